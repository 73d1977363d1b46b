"""Per-test world for the Temporal tests: a store (SQLite by default; a test parametrised with
``BACKENDS`` on ``database_url`` runs on PostgreSQL too), settings pointing at the session's
dev server and a task queue of this test, a worker running in this process, the service, a user,
and a local HTTP server whose requests are counted (a real part: 'no second HTTP call')."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import pytest_asyncio

from engine.models import FlowRecord, Job, JobStatus, User
from engine.settings import Settings
from engine.store import open_store
from signoff.service import SignoffService, with_converter
from signoff.worker import build_worker

GATE_FLOW: dict[str, Any] = {
    "name": "Refund approval",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "Refund sent"}},
        {"id": "no", "type": "ChatOutput", "params": {"text": "Refund refused"}},
    ],
    "edges": [
        {"from": "ask.message", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "ok.input_value"},
        {"from": "gate.branch_reject", "to": "no.input_value"},
    ],
}


class CountingHTTP:
    """Counts requests per path. ``/block/...`` answers only once ``release`` is set."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                outer.counts[self.path] += 1
                if self.path.startswith("/block/"):
                    outer.release.wait(120)
                body = f"seen {self.path}".encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_counter() -> Iterator[CountingHTTP]:
    srv = CountingHTTP()
    yield srv
    srv.close()


# ``@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)``: the test on both stores
BACKENDS = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def database_url(request, tmp_path) -> str:
    """A SQLite file of this test, or (param "postgres") the session's PostgreSQL database;
    tests there keep apart by their own ids (a fresh task queue, flows and jobs)."""
    if getattr(request, "param", "sqlite") == "postgres":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path / 'signoff.db'}"


@pytest.fixture
def settings(tmp_path, temporal_server, task_queue, database_url) -> Settings:
    return Settings(
        home=tmp_path / "home",
        database_url=database_url,
        temporal_address=temporal_server.address,
        task_queue=task_queue,
        max_suspend_seconds=30 * 24 * 3600,
    )


@pytest_asyncio.fixture
async def store(settings):
    s = open_store(settings.resolved_database_url)
    await s.setup()
    yield s
    await s.close()


@pytest_asyncio.fixture
async def client(temporal_client):
    return with_converter(temporal_client)


@pytest_asyncio.fixture
async def worker(client, store, settings) -> AsyncIterator[Any]:
    w = build_worker(client, store, settings)
    async with w:
        yield w


@pytest_asyncio.fixture
async def service(settings, store, client) -> SignoffService:
    return SignoffService(settings, store, client)


@pytest_asyncio.fixture
async def user(store) -> User:
    return await store.get_or_create_user("alice")  # the PostgreSQL database is shared by the session


@pytest_asyncio.fixture
async def make_flow(store, user) -> Callable[..., Any]:
    async def make(spec: dict[str, Any] | None = None, owner: User | None = None) -> FlowRecord:
        spec = spec or GATE_FLOW
        return await store.save_flow((owner or user).id, spec.get("name", "flow"), spec)

    return make


async def eventually(fn: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``fn`` (sync or async) until it returns a truthy value; returns it."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = fn()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.2)


async def wait_status(store, job_id: str, *statuses: JobStatus, timeout: float = 30.0) -> Job:
    async def check():
        job = await store.get_job(job_id)
        return job if job and job.status in statuses else None

    return await eventually(check, timeout=timeout, what=f"job {job_id} in {statuses}")


async def event_names(store, job_id: str) -> list[str]:
    return [e.event for e in await store.read_events(job_id)]
