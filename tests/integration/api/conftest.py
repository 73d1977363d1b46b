"""The real app on a real Temporal dev server and a real worker, on SQLite (and PostgreSQL for a
test marked ``both_stores``: tests/conftest.py says which tests are).

``api`` is one harness per test module and store: its own database, its own task queue and
worker, the app with its lifespan run, and an httpx client speaking ASGI to it."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest_asyncio
import uvicorn

from signoff.api.app import create_app
from signoff.engine.models import Job, JobStatus
from signoff.engine.settings import Settings
from signoff.engine.store import open_store
from signoff.engine.store.base import Store
from signoff.service import RunService
from signoff.worker import build_worker
from tests.helpers import EgressAllow, LocalHTTPServer

ROOT = Path(__file__).resolve().parents[3]
REFUND = json.loads((ROOT / "examples/flows/refund.json").read_text())
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class Harness:
    settings: Settings
    store: Store
    service: RunService
    app: Any
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (user_id, key)
    flows: dict[str, str] = field(default_factory=dict)
    egress: EgressAllow = field(default_factory=EgressAllow)  # the local servers its flows may call

    def client(self, user: str | None = None, **kw: Any) -> httpx.AsyncClient:
        headers = {"x-api-key": self.users[user][1]} if user else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://api", headers=headers, **kw)

    async def wait_status(self, job_id: str, *statuses: JobStatus, timeout: float = 30.0) -> Job:
        deadline = time.monotonic() + timeout
        while True:
            job = await self.store.get_job(job_id)
            if job is not None and job.status in statuses:
                return job
            if time.monotonic() >= deadline:
                raise AssertionError(f"job {job_id} is {job and job.status.value}, not {[s.value for s in statuses]}\n"
                                     + await self.diagnose(job_id))
            await _tick()

    async def diagnose(self, job_id: str) -> str:
        """What a stuck run is doing, for a failure message: its events, the workflow's status,
        pending activities (attempt, last failure) and pending updates, and its stack trace."""
        from datetime import timedelta

        lines = [f"events: {[(e.seq, e.event, e.data) for e in await self.store.read_events(job_id)]}"]
        handle = self.service.client.get_workflow_handle(job_id)
        try:
            desc = await handle.describe(rpc_timeout=timedelta(seconds=5))
            raw = desc.raw_description
            lines.append(f"workflow: {desc.status and desc.status.name}, history length {desc.history_length}")
            for act in raw.pending_activities:
                lines.append(f"pending activity {act.activity_type.name}: state {act.state}, attempt {act.attempt}, "
                             f"last failure {act.last_failure.message!r}")
            if raw.HasField("pending_workflow_task"):
                wft = raw.pending_workflow_task
                lines.append(f"pending workflow task: state {wft.state}, attempt {wft.attempt}")
            lines.append(f"stack: {await handle.query('__stack_trace', rpc_timeout=timedelta(seconds=5))}")
        except Exception as err:  # noqa: BLE001 - a diagnosis must not hide the failure
            lines.append(f"(workflow not described: {err!r})")
        return "\n".join(lines)


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.02)


def _pg_url(dbname: str) -> str:
    return f"postgresql://postgres@127.0.0.1:5432/{dbname}"


@contextlib.asynccontextmanager
async def database(backend: str, tmp: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'signoff.db'}"
        return
    name = f"api_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name)
    finally:
        async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def harness(backend: str, tmp: Path, temporal_client, **settings_kw: Any) -> AsyncIterator[Harness]:
    async with database(backend, tmp) as url:
        egress = EgressAllow()
        # these tests send bursts of writes as one user (hundreds a second, parametrized cases);
        # SIGNOFF_WRITE_RATE is taken from a bucket that never runs dry here, and has its own tests
        settings_kw.setdefault("write_burst", 100_000)
        # and leave runs running as one user across a module (streams, held calls): the runs in
        # flight (SIGNOFF_USER_MAX_RUNS_IN_FLIGHT) have their own tests (api/test_fair_share.py)
        settings_kw.setdefault("user_max_runs_in_flight", 0)
        settings = egress.bind(Settings(home=tmp, database_url=url, task_queue=f"api-{uuid.uuid4()}", **settings_kw))
        store = open_store(url)
        await store.setup()
        try:
            service = RunService(settings, store, temporal_client)
            app = create_app(settings, store=store, service=service)
            worker = build_worker(temporal_client, store, settings)
            async with worker, app.router.lifespan_context(app):
                h = Harness(settings, store, service, app, egress=egress)
                for name in ("alice", "bob"):
                    user = await store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
                    h.users[name] = (user.id, await store.create_api_key(user.id))
                async with h.client("alice") as c:
                    r = await c.post("/api/v1/flows", json=REFUND)
                    assert r.status_code == 201, r.text
                    h.flows["refund"] = r.json()["id"]
                yield h
        finally:
            await store.close()



@pytest_asyncio.fixture(scope="module")
async def api(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("api"), temporal_client) as h:
        yield h


async def submit(c: httpx.AsyncClient, flow_id: str, mode: str = "background", **body: Any) -> dict[str, Any]:
    r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 42", "mode": mode, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def submit_suspended(h: Harness, user: str = "alice", **body: Any) -> dict[str, Any]:
    async with h.client(user) as c:
        resp = await submit(c, body.pop("flow_id", h.flows["refund"]), "sync", **body)
    assert resp["status"] == "suspended", resp
    assert resp["human_request"]["request_id"] == f"gate:{resp['job_id']}"
    return resp


def sse_frames(text: str) -> list[dict[str, Any]]:
    frames = []
    for block in text.split("\n\n"):
        fid, data = None, None
        for line in block.splitlines():
            if line.startswith("id: "):
                fid = int(line[4:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            assert data["seq"] == fid
            frames.append(data)
    return frames


class _InLoopServer(uvicorn.Server):
    """uvicorn in the test's event loop (the harness's store, service and worker live there);
    pytest keeps its own signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


@contextlib.asynccontextmanager
async def serving(app: Any, *, force_exit: bool = False) -> AsyncIterator[str]:
    """``app`` behind a real uvicorn server on 127.0.0.1 (a free port), in this event loop; its
    base URL. ``force_exit``: open streams (live pages' SSE) do not hold the stop."""
    import asyncio
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, ws="none", http="h11")
    server = _InLoopServer(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    deadline = time.monotonic() + 30
    while not server.started:
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, "uvicorn did not start"
        await _tick()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        server.force_exit = force_exit
        await task
        sock.close()


@pytest_asyncio.fixture(scope="module")
async def live(api: Harness) -> AsyncIterator[str]:
    """The harness's app behind a real uvicorn server: real HTTP, so a streamed response reaches
    the client frame by frame (the ASGI test client buffers it)."""
    async with serving(api.app) as url:
        yield url


class BlockingHTTP(LocalHTTPServer):
    """A local HTTP server whose ``/block/{name}`` answers only once ``release(name)`` is called,
    so a flow's HTTPRequest vertex holds its run in_progress for as long as a test needs."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler

        self.gates: dict[str, threading.Event] = {}
        self.seen: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                name = self.path.rsplit("/", 1)[-1]
                outer.seen.append(name)
                outer.gate(name).wait(120)
                body = f"answer from {name}".encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def gate(self, name: str):
        import threading

        return self.gates.setdefault(name, threading.Event())

    def release(self, name: str) -> None:
        self.gate(name).set()

    def close(self) -> None:
        for g in list(self.gates.values()):
            g.set()
        super().close()


async def read_frame(lines) -> dict[str, Any] | None:
    """The next SSE frame from ``response.aiter_lines()`` (comments skipped); None at the end."""
    fid, data = None, None
    async for line in lines:
        if line.startswith("id: "):
            fid = int(line[4:])
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            assert data["seq"] == fid
            return data
    return None
