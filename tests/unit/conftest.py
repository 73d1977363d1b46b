"""Unit-test helpers: components that count their real builds, registered under test-only
types, in-memory stores, a controllable clock, and a local HTTP server that counts hits."""

from __future__ import annotations

import collections
import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from tests.fixtures.memory import InMemoryCheckpointStore, InMemoryHistory
from signoff.engine.models import FlowRecord, utcnow
from signoff.engine.runner import InProcessRunner
from signoff.engine.settings import Settings

BUILDS: collections.Counter[str] = collections.Counter()


@register
class TestCounter(Component):
    """Passes its input through, tagged with its id; counts each real build."""

    __test__ = False
    type_name = "TestCounter"
    inputs = [InputDef("input_value")]
    outputs = [OutputDef("out")]
    params = [ParamDef("fail", "bool", default=False)]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        BUILDS[ctx.vertex_id] += 1
        if self.params.get("fail"):
            raise RuntimeError("boom")
        return {"out": f"{ctx.vertex_id}({as_text(ctx.inputs.get('input_value'))})"}


@register
class TestJoin(Component):
    """Two required inputs, one optional, one many; counts each real build."""

    __test__ = False
    type_name = "TestJoin"
    inputs = [InputDef("a", required=True), InputDef("b", required=True), InputDef("c"), InputDef("items", many=True)]
    outputs = [OutputDef("out")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        BUILDS[ctx.vertex_id] += 1
        parts = [f"{k}={as_text(self.value(ctx, k))}" for k in ("a", "b", "c") if self.value(ctx, k) is not None]
        if "items" in ctx.inputs:
            parts.append("items=" + ",".join(as_text(x) for x in ctx.inputs["items"]))
        return {"out": f"{ctx.vertex_id}[{' '.join(parts)}]"}


@register
class TestTuple(Component):
    """Returns an output that does not survive JSON (a tuple)."""

    __test__ = False
    type_name = "TestTuple"
    outputs = [OutputDef("out")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        return {"out": (1, 2)}


@pytest.fixture
def builds() -> collections.Counter[str]:
    BUILDS.clear()
    return BUILDS


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> None:
        self.t += timedelta(**kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def checkpoints() -> InMemoryCheckpointStore:
    return InMemoryCheckpointStore()


@pytest.fixture
def history() -> InMemoryHistory:
    return InMemoryHistory()


@pytest.fixture
def flows() -> dict[str, dict[str, Any]]:
    """Flows RunFlow can load by id."""
    return {}


@pytest.fixture
def runner(checkpoints, history, clock, flows, egress, tmp_path) -> InProcessRunner:
    async def loader(flow_id: str) -> FlowRecord | None:
        spec = flows.get(flow_id)
        if spec is None:
            return None
        return FlowRecord(id=flow_id, owner_id="owner", name=spec.get("name", flow_id), spec=spec, version=1,
                          created_at=utcnow(), updated_at=utcnow())

    return InProcessRunner(checkpoints, history, flow_loader=loader, clock=clock,
                           settings=egress.bind(Settings(home=tmp_path)))


def flow(nodes: list[tuple], edges: list[tuple[str, str]], name: str = "t") -> dict[str, Any]:
    """flow([("a", "ChatInput"), ("g", "HumanInput", {...})], [("a.message", "g.prompt")])"""
    return {
        "name": name,
        "nodes": [{"id": n[0], "type": n[1], "params": n[2] if len(n) > 2 else {}} for n in nodes],
        "edges": [{"from": a, "to": b} for a, b in edges],
    }


class HitServer:
    """A real HTTP server on 127.0.0.1 that counts hits and remembers each request."""

    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                with server.lock:
                    server.hits.append(
                        {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                    )
                status = 500 if self.path.startswith("/fail") else 200
                payload = json.dumps({"ok": status == 200, "path": self.path, "echo": body}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "HitServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def http_server(egress):
    with HitServer() as s:
        egress.add(s)
        yield s


@register
class TestMultiPause(Component):
    """Pauses twice in one run (like an Agent asking to approve two tool calls), keeping its
    progress in private state; counts its builds and its 'expensive' steps."""

    __test__ = False
    type_name = "TestMultiPause"
    can_pause = True
    inputs = [InputDef("input_value")]
    outputs = [OutputDef("out")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        from signoff.engine.models import Option, PendingRequest

        BUILDS[ctx.vertex_id] += 1
        done = ctx.state.setdefault("done", [])
        if ctx.decision is not None:
            done.append(f"{ctx.decision.request_id.rsplit(':', 1)[1]}={ctx.decision.action_id}")
        step = len(done) + 1
        if step <= 2:
            BUILDS[f"{ctx.vertex_id}:expensive"] += 1  # e.g. a model call whose result is kept in state
            raise ctx.pause(
                PendingRequest(
                    request_id=ctx.request_id(str(step)),
                    kind="tool_approval",
                    prompt=f"call tool #{step}?",
                    options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")],
                    allowed_decisions=["approve", "reject"],
                    paused_at=ctx.now(),
                    tool={"name": "calc", "args": {"n": step}},
                )
            )
        return {"out": f"{as_text(ctx.inputs.get('input_value'))}:{','.join(done)}"}
