"""AG-UI (DESIGN §12) through the real parts: the app (ASGI, and behind a real uvicorn server for
the real ``@ag-ui/client``), a real Temporal dev server and worker, SQLite and PostgreSQL.

``h`` is the API harness of ``tests/integration/api`` (one per test module and backend) with a
third person, erin, who shares nothing. :func:`agui` posts one ``RunAgentInput`` and returns the
AG-UI events of the answer, each validated against the ``ag-ui-protocol`` package's models and
the stream against AG-UI's rules (:func:`check_stream`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.integration.api.conftest import Harness, harness

# the api harness's `live` fixture (uvicorn in the test loop, on `api`), for the @ag-ui/client tests
from tests.integration.api.conftest import live  # noqa: F401

EVENT = TypeAdapter(Event)


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("agui"), temporal_client) as hx:
        user = await hx.store.create_user(f"erin-{uuid.uuid4().hex[:6]}")
        hx.users["erin"] = (user.id, await hx.store.create_api_key(user.id))
        yield hx


@pytest.fixture(scope="module")
def api(h: Harness) -> Harness:
    """The name the api conftest's ``live`` fixture asks for."""
    return h


def run_input(thread: str, *, text: str | None = None, resume: list[dict[str, Any]] | None = None,
              run_id: str | None = None, **more: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` as an AG-UI client sends it (camelCase)."""
    body: dict[str, Any] = {"threadId": thread, "runId": run_id or str(uuid.uuid4()), "messages": [], "tools": [],
                            "context": [], "state": {}, "forwardedProps": {}, **more}
    if text is not None:
        body["messages"] = [{"id": str(uuid.uuid4()), "role": "user", "content": text}]
    if resume is not None:
        body["resume"] = resume
    return body


def sse_events(text: str) -> list[dict[str, Any]]:
    """The AG-UI events of an SSE body, each validated by ``ag-ui-protocol``'s models (comments
    skipped), as the JSON sent."""
    out = []
    for block in text.split("\n\n"):
        data = [line[len("data: "):] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            raw = "\n".join(data)
            EVENT.validate_json(raw)  # raises if the event is not a valid AG-UI 1.0 event
            out.append(json.loads(raw))
    return out


def check_stream(events: list[dict[str, Any]]) -> None:
    """AG-UI's stream rules (what ``@ag-ui/client``'s verifier enforces): RUN_STARTED first, one
    RUN_FINISHED or RUN_ERROR last, steps, text messages and tool calls each opened once and
    closed before the end, content only inside an open message or call."""
    assert events and events[0]["type"] == "RUN_STARTED", events[:1]
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events[-1]
    assert sum(e["type"] in ("RUN_FINISHED", "RUN_ERROR", "RUN_STARTED") for e in events) == 2
    steps: set[str] = set()
    messages: set[str] = set()
    calls: set[str] = set()
    for e in events[1:-1]:
        t = e["type"]
        if t == "STEP_STARTED":
            assert e["stepName"] not in steps, e
            steps.add(e["stepName"])
        elif t == "STEP_FINISHED":
            steps.remove(e["stepName"])
        elif t == "TEXT_MESSAGE_START":
            assert e["messageId"] not in messages
            messages.add(e["messageId"])
        elif t == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in messages and e["delta"]
        elif t == "TEXT_MESSAGE_END":
            messages.remove(e["messageId"])
        elif t == "TOOL_CALL_START":
            assert e["toolCallId"] not in calls
            calls.add(e["toolCallId"])
        elif t == "TOOL_CALL_ARGS":
            assert e["toolCallId"] in calls
        elif t == "TOOL_CALL_END":
            calls.remove(e["toolCallId"])
    assert not steps and not messages and not calls, (steps, messages, calls)
    for e in events:
        assert None not in e.values(), e  # optional fields are left out, never null


async def agui(c: httpx.AsyncClient, flow_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST one RunAgentInput; the checked AG-UI events of the answer."""
    r = await c.post(f"/api/v1/agui/{flow_id}", json=body, headers={"accept": "text/event-stream"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    check_stream(events)
    return events


def of_type(events: list[dict[str, Any]], *types: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] in types]


def outcome(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The last event: RUN_FINISHED (its outcome) or RUN_ERROR."""
    return events[-1]


def texts(events: list[dict[str, Any]]) -> list[str]:
    """The text messages of a stream, in order (START..CONTENT*..END joined)."""
    out, current = [], {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_START":
            current[e["messageId"]] = ""
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            current[e["messageId"]] += e["delta"]
        elif e["type"] == "TEXT_MESSAGE_END":
            out.append(current.pop(e["messageId"]))
    return out
