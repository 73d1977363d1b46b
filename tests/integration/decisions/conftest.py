"""Decisions people can trust (DESIGN §9) through the real parts: the app over HTTP (httpx ASGI
client), a real Temporal dev server and worker, SQLite and PostgreSQL.

``h`` is the API harness of ``tests/integration/api`` (one per test module and backend) with
three more people: carol (in alice's groups), dave (a share holder of alice's flows) and erin (a
stranger). ``echo`` is a local HTTP server that answers a POST with its body, so a flow shows
what a component downstream of a gate received."""

from __future__ import annotations

import asyncio
import email
import email.policy
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiosmtpd.controller import Controller

from signoff.devserver import free_port
from tests.helpers import LocalHTTPServer
from tests.integration.api.conftest import Harness, harness, sse_frames

# the api harness's `live` fixture (uvicorn in the test loop, on `api`), for the CLI tests
from tests.integration.api.conftest import live  # noqa: F401

PEOPLE = ("carol", "dave", "erin")


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("decisions"), temporal_client) as hx:
        for name in PEOPLE:
            user = await hx.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            hx.users[name] = (user.id, await hx.store.create_api_key(user.id))
        yield hx


@pytest.fixture(scope="module")
def api(h: Harness) -> Harness:
    """The name the api conftest's ``live`` fixture asks for."""
    return h


class EchoHTTP(LocalHTTPServer):
    """Answers a POST with the body it received; keeps every body (parsed JSON when it is)."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    outer.bodies.append(json.loads(raw))
                except ValueError:
                    outer.bodies.append(raw.decode())
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture(scope="module")
def echo(h: Harness) -> Iterator[EchoHTTP]:
    server = EchoHTTP()
    h.egress.add(server)
    try:
        yield server
    finally:
        server.close()


_names: dict[str, str] = {}


async def user_name(h: Harness, who: str) -> str:
    """The user name of ``who`` (the harness gives each a unique suffix)."""
    user_id = h.users[who][0]
    if user_id not in _names:
        user = await h.store.get_user(user_id)
        assert user is not None
        _names[user_id] = user.name
    return _names[user_id]


def uid(h: Harness, who: str) -> str:
    return h.users[who][0]


def gate_flow(gate_params: dict[str, Any], *, name: str = "gated", echo_url: str | None = None) -> dict[str, Any]:
    """ask → gate (Approve / Reject by default) → approve: ok (or an echo of the branch's payload
    when ``echo_url``), reject: no."""
    nodes: list[dict[str, Any]] = [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"prompt": "Approve this refund?", **gate_params}},
        {"id": "no", "type": "TextOutput"},
    ]
    edges = [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_reject", "to": "no.input_value"}]
    if echo_url:
        nodes += [{"id": "call", "type": "HTTPRequest", "params": {"url": f"{echo_url}/seen", "method": "POST"}},
                  {"id": "ok", "type": "TextOutput"}]
        edges += [{"from": "gate.branch_approve", "to": "call.body"}, {"from": "call.response", "to": "ok.input_value"}]
    else:
        nodes.append({"id": "ok", "type": "TextOutput", "params": {"text": "Refund sent"}})
        edges.append({"from": "gate.branch_approve", "to": "ok.input_value"})
    return {"name": name, "nodes": nodes, "edges": edges}


async def upload(h: Harness, spec: dict[str, Any], who: str = "alice") -> str:
    async with h.client(who) as c:
        r = await c.post("/api/v1/flows", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def run_suspended(h: Harness, flow_id: str, who: str = "alice", **body: Any) -> dict[str, Any]:
    """A run of ``flow_id`` by ``who``, waiting at its gate (its job, as the API answers it)."""
    async with h.client(who) as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": body.pop("input_value", "refund 42"),
                                                    "mode": "sync", "session_id": f"s-{uuid.uuid4().hex[:8]}", **body})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "suspended", job
    return job


async def resume(h: Harness, who: str, job_id: str, action: str, values: dict[str, Any] | None = None,
                 request_id: str | None = None) -> httpx.Response:
    decision: dict[str, Any] = {"action_id": action}
    if values is not None:
        decision["values"] = values
    async with h.client(who) as c:
        return await c.post(f"/api/v2/workflows/{job_id}/resume",
                            json={"request_id": request_id or f"gate:{job_id}", "decision": decision})


async def events(h: Harness, who: str, job_id: str) -> list[dict[str, Any]]:
    async with h.client(who) as c:
        r = await c.get(f"/api/v2/workflows/{job_id}/events")
    assert r.status_code == 200, r.text
    return sse_frames(r.text)


def only(frames: list[dict[str, Any]], event: str) -> dict[str, Any]:
    found = [f for f in frames if f["event"] == event]
    assert len(found) == 1, [f["event"] for f in frames]
    return found[0]["data"]


async def pending_ids(h: Harness, who: str) -> list[str]:
    async with h.client(who) as c:
        r = await c.get("/api/v2/workflows/pending")
    assert r.status_code == 200, r.text
    return [i["job_id"] for i in r.json()]


def code(r: httpx.Response) -> str:
    return r.json()["detail"]["code"]


# ---- the channels' real parts (docs/channels.md, "Tests"): Slack's Web API faked, a real SMTP server

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-test-token"


class FakeSlack(LocalHTTPServer):
    """Slack's Web API as far as signoff uses it: every call kept (method, JSON body, auth, status;
    ``sent``: those answered ok);
    ``fail``: the next chat.postMessage calls' answers (429, 500) before it answers ok again."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str, int]] = []
        self.fail: list[int] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                method = self.path.rsplit("/", 1)[-1]
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"raw": raw.decode(errors="replace")}
                with outer.lock:
                    status = outer.fail.pop(0) if outer.fail and method == "chat.postMessage" else 200
                    outer.calls.append((method, body, self.headers.get("authorization", ""), status))
                answer = {"ok": True, "channel": body.get("channel", "D1"), "ts": f"{time.time():.6f}"} \
                    if status == 200 else {"ok": False, "error": "ratelimited" if status == 429 else "internal_error"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("retry-after", "1")
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def sent(self, method: str, channel: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [b for m, b, _, status in self.calls
                    if m == method and status == 200 and (channel is None or b.get("channel") == channel)]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlack]:
    server = FakeSlack()
    try:
        yield server
    finally:
        server.close()


def signed(body: str, *, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    """The headers Slack signs ``body`` with (v0, HMAC-SHA256 of ``v0:{timestamp}:{body}``)."""
    ts = str(at if at is not None else int(time.time()))
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": ts, "x-slack-signature": sig,
            "content-type": "application/x-www-form-urlencoded"}


class Inbox:
    """What the SMTP server received; ``refuse`` / ``hang``: that many next mails are refused
    (451) / never answered."""

    def __init__(self) -> None:
        self.mails: list[tuple[list[str], email.message.EmailMessage]] = []
        self.refuse = 0
        self.hang = 0
        self.refused = 0
        self.port = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse > 0:
            self.refuse -= 1
            self.refused += 1
            return "451 4.3.0 Try again later"
        if self.hang > 0:
            self.hang -= 1
            await asyncio.sleep(60)  # longer than the client's SIGNOFF_NOTIFY_TIMEOUT_SECONDS
            return "250 OK"
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.mails.append((list(envelope.rcpt_tos), msg))  # type: ignore[arg-type]
        return "250 OK"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        return [m for rcpts, m in self.mails if address in rcpts]


@pytest.fixture(scope="module")
def inbox() -> Iterator[Inbox]:
    """A real SMTP server (aiosmtpd) on a free port (``inbox.port``), per module."""
    box, port = Inbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    box.port = port
    try:
        yield box
    finally:
        controller.stop()
