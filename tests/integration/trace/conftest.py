"""The trace tests' world: a SQLite store, the session's Temporal dev server, a task queue of
the test, a worker in this process on a client carrying Temporal's tracing interceptor, the
service, and a real OTLP/HTTP receiver on 127.0.0.1 (protobuf at /v1/traces)."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from engine.models import FlowRecord, Job, JobStatus, SpanRecord, User
from engine.settings import Settings
from engine.store import open_store
from signoff.service import SignoffService, with_converter
from signoff.telemetry import with_tracing
from signoff.worker import build_worker


def gate_flow(decisions: list[str] | None = None) -> dict[str, Any]:
    """Chat Input → Prompt → gate → (Approve: Prompt → Chat Output | Reject: Chat Output |
    Request Changes: Chat Output)."""
    return {
        "name": "Refund approval",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "p", "type": "Prompt", "params": {"template": "Refund {q}?"}},
            {"id": "gate", "type": "HumanInput",
             "params": {"decisions": decisions or ["Approve", "Reject", "Request Changes"]}},
            {"id": "note", "type": "Prompt", "params": {"template": "Approved: {x}", "display_name": "Approval note"}},
            {"id": "ok", "type": "ChatOutput", "params": {"display_name": "Sent"}},
            {"id": "no", "type": "ChatOutput", "params": {"text": "Refund refused", "display_name": "Refused"}},
            {"id": "ch", "type": "ChatOutput", "params": {"text": "Please change it", "display_name": "Changes"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "p.q"},
            {"from": "p.prompt", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "note.x"},
            {"from": "note.prompt", "to": "ok.input_value"},
            {"from": "gate.branch_reject", "to": "no.input_value"},
            {"from": "gate.branch_request_changes", "to": "ch.input_value"},
        ],
    }


# the spans expected after each decision, in order (component and gate spans under the root)
EXPECTED = {
    "approve": ["Chat Input", "Prompt", "Human In The Loop — Approve", "Approval note", "Sent"],
    "reject": ["Chat Input", "Prompt", "Human In The Loop — Reject", "Refused"],
    "request_changes": ["Chat Input", "Prompt", "Human In The Loop — Request Changes", "Changes"],
}


def story(spans: list[SpanRecord]) -> list[str]:
    """The names of the root's children in start order; asserts there is exactly one root."""
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1, [(s.name, s.span_id) for s in roots]
    (root,) = roots
    children = [s for s in spans if s.parent_id == root.span_id]
    assert len(children) == len(spans) - 1, "every span hangs under the run's root"
    return [s.name for s in sorted(children, key=lambda s: (s.start_time, s.span_id))]


class OTLPReceiver:
    """A real OTLP/HTTP endpoint: POST /v1/traces with an ExportTraceServiceRequest (protobuf,
    gzip or not). Keeps every span as a dict."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                got = []
                for rs in req.resource_spans:
                    service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            attrs = {a.key: _any_value(a.value) for a in sp.attributes}
                            got.append({
                                "trace_id": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                                "parent_id": sp.parent_span_id.hex() or None, "name": sp.name,
                                "scope": ss.scope.name, "service": service, "status": sp.status.code,
                                "attributes": attrs,
                            })
                with outer.lock:
                    outer.spans.extend(got)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def of_trace(self, trace_hex: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_hex]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@pytest.fixture
def otlp() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver()
    yield r
    r.close()


@pytest.fixture
def settings(tmp_path, temporal_server, task_queue) -> Settings:
    return Settings(
        home=tmp_path / "home",
        database_url=f"sqlite:///{tmp_path / 'signoff.db'}",
        temporal_address=temporal_server.address,
        task_queue=task_queue,
    )


@pytest_asyncio.fixture
async def store(settings):
    s = open_store(settings.resolved_database_url)
    await s.setup()
    yield s
    await s.close()


@pytest_asyncio.fixture
async def client(temporal_client):
    return with_tracing(with_converter(temporal_client))


@pytest_asyncio.fixture
async def worker(client, store, settings) -> AsyncIterator[Any]:
    async with build_worker(client, store, settings) as w:
        yield w


@pytest_asyncio.fixture
async def service(settings, store, client) -> SignoffService:
    return SignoffService(settings, store, client)


@pytest_asyncio.fixture
async def user(store) -> User:
    return await store.create_user("alice")


@pytest_asyncio.fixture
async def make_flow(store, user) -> Callable[..., Any]:
    async def make(spec: dict[str, Any]) -> FlowRecord:
        return await store.save_flow(user.id, spec.get("name", "flow"), spec)

    return make


async def eventually(fn: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition") -> Any:
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


async def wait_status(store, job_id: str, *statuses: JobStatus, timeout: float = 60.0) -> Job:
    async def check():
        job = await store.get_job(job_id)
        return job if job and job.status in statuses else None

    return await eventually(check, timeout=timeout, what=f"job {job_id} in {statuses}")
