"""The world of the gate timer and webhook tests (DESIGN §9): the real app, a real worker and
the session's Temporal dev server, on SQLite and PostgreSQL, with a client that starts every
workflow under per-workflow time skipping (off until a test fast-forwards its own run), so days
of waiting take a second. Users: alice (submits), bob, carol and dave (approvers), mallory (a user of
the same service who must learn nothing of alice's runs)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest_asyncio
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import TimeSkipper, TimeSkippingConfig

from signoff.engine.models import TERMINAL_STATUSES, JobStatus
from signoff.service import with_converter
from tests.helpers import LocalHTTPServer
from tests.integration.api.conftest import Harness, harness

PEOPLE = ("carol", "dave", "mallory")


@pytest_asyncio.fixture(scope="module")
async def world(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[tuple[Harness, TimeSkipper]]:
    """(the harness, its time skipper): the harness's service starts workflows through the
    skipper's client, so ``skipper.fast_forward(handle, days)`` moves one run's clock."""
    skipper = TimeSkipper(with_converter(temporal_client), config=TimeSkippingConfig(enabled=False))
    async with harness(store_backend, tmp_path_factory.mktemp("gates"), skipper.client) as h:
        for name in PEOPLE:
            user = await h.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            h.users[name] = (user.id, await h.store.create_api_key(user.id))
        yield h, skipper


async def name_of(h: Harness, who: str) -> str:
    """The user name the harness gave ``who`` (how a flow's approvers name people)."""
    user = await h.store.get_user(h.users[who][0])
    assert user is not None
    return user.name


def gate_flow(name: str, **gate: Any) -> dict[str, Any]:
    """ask → gate (Approve / Reject, and Fallback when enabled) → one ChatOutput per branch,
    whose text says which branch ran."""
    params = {"decisions": ["Approve", "Reject"], **gate}
    nodes = [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": params},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "approved"}},
        {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}},
    ]
    edges = [
        {"from": "ask.message", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "ok.input_value"},
        {"from": "gate.branch_reject", "to": "no.input_value"},
    ]
    if params.get("enable_fallback"):
        nodes.append({"id": "fb", "type": "ChatOutput", "params": {"text": "fallback"}})
        edges.append({"from": "gate.branch_fallback", "to": "fb.input_value"})
    return {"name": name, "nodes": nodes, "edges": edges}


async def save_flow(h: Harness, spec: dict[str, Any], user: str = "alice") -> str:
    async with h.client(user) as c:
        r = await c.post("/api/v1/flows", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def start_suspended(h: Harness, flow_id: str, user: str = "alice") -> dict[str, Any]:
    """A background run of the flow, once it waits at its gate: the job (GET) as JSON."""
    async with h.client(user) as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 42",
                                                     "mode": "background"})
        assert r.status_code == 200, r.text
        job_id = r.json()["job_id"]
        job = await h.wait_status(job_id, JobStatus.suspended, *TERMINAL_STATUSES)
        assert job.status.value == "suspended", (job.status, await h.diagnose(job_id))
        r = await c.get(f"/api/v2/workflows/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


async def fast_forward(h: Harness, skipper: TimeSkipper, job_id: str, duration: timedelta) -> bool:
    """Move the run's virtual clock on by ``duration`` (its timers fire in order); False when the
    workflow ended before, whether during the skip or before it began (the job row can read
    completed while the workflow is still closing, or after it closed)."""
    try:
        return await skipper.fast_forward(h.service.client.get_workflow_handle(job_id), duration)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND and "already completed" in e.message:
            return False
        raise


async def events(h: Harness, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's event log: (event, data), in order."""
    return [(e.event, e.data) for e in await h.store.read_events(job_id)]


async def event_names(h: Harness, job_id: str) -> list[str]:
    return [name for name, _ in await events(h, job_id)]


async def resume(h: Harness, user: str, job_id: str, action_id: str, values: dict[str, Any] | None = None):
    decision: dict[str, Any] = {"action_id": action_id}
    if values is not None:
        decision["values"] = values
    async with h.client(user) as c:
        return await c.post(f"/api/v2/workflows/{job_id}/resume",
                            json={"request_id": f"gate:{job_id}", "decision": decision})


async def pending_ids(h: Harness, user: str) -> set[str]:
    async with h.client(user) as c:
        r = await c.get("/api/v2/workflows/pending")
    assert r.status_code == 200, r.text
    return {item["job_id"] for item in r.json()}


# ---- a webhook receiver -------------------------------------------------------------------


class Receiver(LocalHTTPServer):
    """A webhook endpoint on 127.0.0.1: keeps every POST (raw body, headers); ``fail_first``
    answers 500 to the first ``n`` POSTs of each event seq, then 200."""

    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.fail_first = fail_first
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with outer._lock:
                    key = self.headers.get("X-Signoff-Delivery") or ""
                    n = outer._seen[key] = outer._seen.get(key, 0) + 1
                    code = 500 if n <= outer.fail_first else 200
                    outer.posts.append({"raw": raw, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "code": code, "path": self.path})
                    outer.answers.append(code)
                self.send_response(code)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def delivered(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """The bodies answered 200 (parsed), for ``job_id`` when given, in arrival order."""
        out = []
        for p in list(self.posts):
            if p["code"] != 200:
                continue
            body = json.loads(p["raw"])
            if job_id is None or body["job_id"] == job_id:
                out.append({**body, "_post": p})
        return out

    def events(self, job_id: str) -> list[str]:
        return [b["event"] for b in self.delivered(job_id)]


def signed(secret: str, raw: bytes) -> str:
    """What X-Signoff-Signature must say for ``raw``, computed here independently."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


async def register_webhook(h: Harness, user: str, url: str, secret: str, events: list[str] | None = None) -> str:
    async with h.client(user) as c:
        r = await c.post("/api/v1/webhooks", json={"url": url, "secret": secret, "events": events or ["*"]})
    assert r.status_code == 201, r.text
    assert "secret" not in r.json()
    return r.json()["id"]


async def deliveries(h: Harness, user: str, webhook_id: str) -> list[dict[str, Any]]:
    async with h.client(user) as c:
        r = await c.get(f"/api/v1/webhooks/{webhook_id}/deliveries", params={"limit": 500})
    assert r.status_code == 200, r.text
    return r.json()

