"""A2A (DESIGN §15) with the official ``a2a-sdk`` client against a real signoff: the app behind a
real uvicorn server, a real Temporal dev server and worker, SQLite and PostgreSQL.

A message starts a run; a gate makes the task ``input-required`` (the prompt as text, a DataPart
with the request); the next message on the task decides (a DataPart, or the text of an action)
through RunService.resume (``via`` ``a2a``); GetTask reads, CancelTask stops, streaming follows.
Someone else's flow or task is not found; a malformed body, an unknown method, an action the gate
does not allow are JSON-RPC errors and the run still waits."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest, SubscribeToTaskRequest, Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from signoff.engine.models import JobStatus
from tests import helpers
from tests.integration.api.conftest import Harness

@contextlib.asynccontextmanager
async def agent(base: str, h: Harness, flow_id: str, user: str = "alice", streaming: bool = False):
    """The official client of one flow's agent, its card resolved from the card's URL."""
    async with httpx.AsyncClient(headers={"x-api-key": h.users[user][1]}, timeout=60) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        client = await factory.create_from_url(f"{base}/a2a/{flow_id}")
        try:
            yield client
        finally:
            await client.close()


def message(text: str | None = None, *, data: dict[str, Any] | None = None, task_id: str = "",
            context_id: str = "") -> SendMessageRequest:
    parts = [Part(text=text)] if text is not None else []
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return SendMessageRequest(message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts,
                                              task_id=task_id, context_id=context_id))


async def send(client: Any, request: SendMessageRequest) -> Task:
    """The task the (non-streaming) answer carries."""
    tasks = [r.task for r in [r async for r in client.send_message(request)] if r.HasField("task")]
    assert tasks, "no task in the answer"
    return tasks[-1]


def asked(task: Task) -> dict[str, Any]:
    """The DataPart of an input-required task's status message."""
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    [text, data] = task.status.message.parts
    assert text.text
    return json_format.MessageToDict(data.data)


async def test_send_input_required_reply_completed(h: Harness, base: str):
    session = f"ctx-{uuid.uuid4().hex[:8]}"
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42", context_id=session))
        request = asked(task)
        assert task.context_id == session and task.status.message.parts[0].text
        assert [a["id"] for a in request["actions"]] == ["approve", "reject"]
        assert request["request_id"] == f"gate:{task.id}"
        done = await send(client, message(data={"action_id": "approve"}, task_id=task.id, context_id=session))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
        assert done.status.message.parts[0].text == "Refund sent"
        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.status.state == TaskState.TASK_STATE_COMPLETED and again.artifacts[0].parts[0].text == "Refund sent"
    [event] = await h.store.read_events_named(task.id, "human_input_decision")
    assert event.data["action_id"] == "approve" and event.data["via"] == "a2a"


async def test_a_text_equal_to_an_action_label_decides(h: Harness, base: str):
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42"))
        asked(task)
        done = await send(client, message("  Reject ", task_id=task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and done.status.message.parts[0].text == "Refund refused"


async def test_streaming_follows_the_run_to_the_gate_and_to_the_end(h: Harness, base: str):
    async with agent(base, h, h.flows["refund"], streaming=True) as client:
        events = [r async for r in client.send_message(message("refund 42"))]
        states = [(r.task.status.state if r.HasField("task") else r.status_update.status.state) for r in events
                  if r.HasField("task") or r.HasField("status_update")]
        assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED, events
        task_id = events[0].task.id
        events = [r async for r in client.send_message(message(data={"action_id": "approve"}, task_id=task_id))]
        last = events[-1]
        state = last.task.status.state if last.HasField("task") else last.status_update.status.state
        assert state == TaskState.TASK_STATE_COMPLETED, events


async def test_subscribe_follows_a_task_started_without_waiting(h: Harness, base: str):
    request = message("refund 42")
    request.configuration.return_immediately = True
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, request)
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                                     TaskState.TASK_STATE_INPUT_REQUIRED)
    async with agent(base, h, h.flows["refund"], streaming=True) as client:
        events = [r async for r in client.subscribe(SubscribeToTaskRequest(id=task.id))]
    last = events[-1]
    state = last.task.status.state if last.HasField("task") else last.status_update.status.state
    assert state == TaskState.TASK_STATE_INPUT_REQUIRED, events


async def test_streams_are_bounded_per_user(h: Harness, base: str, monkeypatch):
    """Past SIGNOFF_MAX_STREAMS_PER_USER (here none left) a stream is refused before anything runs."""
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42"))
    before = await h.store.list_pending(h.users["alice"][0])
    monkeypatch.setattr(h.service.feed, "max_per_user", 0)
    async with agent(base, h, h.flows["refund"], streaming=True) as client:
        with pytest.raises(InvalidParamsError) as err:
            [r async for r in client.send_message(message("refund 42"))]
        assert err.value.data["code"] == "TOO_MANY_STREAMS"
        with pytest.raises(InvalidParamsError) as err:
            [r async for r in client.subscribe(SubscribeToTaskRequest(id=task.id))]
        assert err.value.data["code"] == "TOO_MANY_STREAMS"
    assert len(await h.store.list_pending(h.users["alice"][0])) == len(before)


async def test_cancel_stops_the_waiting_run(h: Harness, base: str):
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42"))
        asked(task)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    job = await h.store.get_job(task.id)
    assert job is not None and job.status == JobStatus.cancelled


async def test_a_wrong_action_bad_values_or_no_decision_are_errors_and_the_run_still_waits(h: Harness, base: str):
    async with h.client("alice") as c:
        r = await c.post("/api/v1/flows", json=helpers.gate_flow(f"a2a gate {uuid.uuid4().hex[:6]}", fields={
            "approve": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}}))
    flow = r.json()["id"]
    async with agent(base, h, flow) as client:
        task = await send(client, message("refund"))
        assert asked(task)["fields"]["approve"]["required"] == ["amount"]
        for bad, code in (({"action_id": "refund-twice"}, "INVALID_DECISION"),
                          ({"action_id": "approve", "values": {"amount": "lots"}}, "INVALID_VALUES"),
                          ({"action_id": "approve"}, "INVALID_VALUES")):
            with pytest.raises(InvalidParamsError) as err:
                await send(client, message(data=bad, task_id=task.id))
            assert err.value.data["code"] == code, err.value
        with pytest.raises(InvalidParamsError) as err:
            await send(client, message("maybe", task_id=task.id))
        assert err.value.data["code"] == "INVALID_REQUEST"
        huge = {"action_id": "approve", "values": {"amount": 1, "note": "x" * (h.settings.max_string_chars + 1)}}
        with pytest.raises(InvalidParamsError) as err:
            await send(client, message(data=huge, task_id=task.id))
        assert err.value.data["code"] == "INVALID_REQUEST"
        assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        done = await send(client, message(data={"action_id": "approve", "values": {"amount": 3}}, task_id=task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(await h.store.read_events_named(task.id, "human_input_decision")) == 1


async def test_malformed_bodies_and_unknown_methods_are_json_rpc_errors(h: Harness, base: str):
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42"))
    url = f"{base}/a2a/{h.flows['refund']}"
    headers = {"x-api-key": h.users["alice"][1], "A2A-Version": "1.0"}
    async with httpx.AsyncClient(headers=headers) as c:
        r = await c.post(url, content=b"{not json", headers={"content-type": "application/json"})
        assert r.json()["error"]["code"] == -32700
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}})
        assert r.json()["error"]["code"] == -32601
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": 7}})
        assert r.json()["error"]["code"] in (-32602, -32600), r.json()
        r = await c.post(url, content=b"x" * (h.settings.max_body_bytes + 1), headers={"content-type": "application/json"})
        assert r.status_code == 413
        for headers_ in ({"x-api-key": ""}, {"x-api-key": "nope"}):
            r = await c.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": task.id}},
                             headers=headers_)
            assert r.status_code == 401
            r = await c.get(f"{url}/.well-known/agent-card.json", headers=headers_)
            assert r.status_code == 401
    job = await h.store.get_job(task.id)
    assert job is not None and job.status == JobStatus.suspended


async def test_nobody_else_runs_the_flow_or_reads_decides_or_cancels_the_task(h: Harness, base: str):
    async with agent(base, h, h.flows["refund"]) as alice:
        task = await send(alice, message("refund 42"))
    async with httpx.AsyncClient(headers={"x-api-key": h.users["bob"][1]}) as c:
        card = await c.get(f"{base}/a2a/{h.flows['refund']}/.well-known/agent-card.json")
        missing = await c.get(f"{base}/a2a/{uuid.uuid4()}/.well-known/agent-card.json")
        assert card.status_code == missing.status_code == 404
        assert card.json()["detail"]["code"] == missing.json()["detail"]["code"] == "FLOW_NOT_FOUND"
    # bob's own agent (a flow of his) cannot reach alice's task, nor can he reach alice's agent
    async with h.client("bob") as c:
        r = await c.post("/api/v1/flows", json=helpers.gate_flow(f"bob {uuid.uuid4().hex[:6]}"))
    async with agent(base, h, r.json()["id"], user="bob") as bob:
        for call in (lambda: bob.get_task(GetTaskRequest(id=task.id)),
                     lambda: bob.cancel_task(CancelTaskRequest(id=task.id)),
                     lambda: send(bob, message(data={"action_id": "approve"}, task_id=task.id))):
            with pytest.raises(TaskNotFoundError):
                await call()
    async with httpx.AsyncClient(headers={"x-api-key": h.users["bob"][1], "A2A-Version": "1.0"}) as c:
        r = await c.post(f"{base}/a2a/{h.flows['refund']}", json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "refund 1"}]}}})
        assert r.json()["error"]["code"] == -32001, r.json()
    job = await h.store.get_job(task.id)
    assert job is not None and job.status == JobStatus.suspended


async def test_the_card_names_the_endpoint_and_the_key_scheme(h: Harness, base: str):
    async with httpx.AsyncClient(headers={"x-api-key": h.users["alice"][1]}) as c:
        card = (await c.get(f"{base}/a2a/{h.flows['refund']}/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == f"{base}/a2a/{h.flows['refund']}"
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"] == {
        "location": "header", "name": "x-api-key", "description": "API key from `signoff users create`"}
    assert card["capabilities"]["streaming"] is True


async def test_messages_and_cancels_take_from_the_users_write_rate(h: Harness, base: str, monkeypatch):
    from signoff.api.ratelimit import WriteBudget

    # (setitem on its dict: monkeypatch cannot put back an attribute of a Starlette State)
    monkeypatch.setitem(h.app.state._state, "write_buckets", WriteBudget(0.0001, 1))  # one write, then none for hours
    async with agent(base, h, h.flows["refund"]) as client:
        task = await send(client, message("refund 42"))
        for call in (lambda: send(client, message("Approve", task_id=task.id)),
                     lambda: client.cancel_task(CancelTaskRequest(id=task.id))):
            with pytest.raises(InvalidParamsError) as err:
                await call()
            assert err.value.data["code"] == "RATE_LIMITED"
        assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_a_new_message_in_a_context_supersedes_its_waiting_run(h: Harness, base: str):
    session = f"ctx-{uuid.uuid4().hex[:8]}"
    async with agent(base, h, h.flows["refund"]) as client:
        first = await send(client, message("refund 1", context_id=session))
        second = await send(client, message("refund 2", context_id=session))
        asked(second)
        assert (await client.get_task(GetTaskRequest(id=first.id))).status.state == TaskState.TASK_STATE_CANCELED


async def test_the_0_3_method_names_are_served_too(h: Harness, base: str):
    """A client of A2A 0.3 (no A2A-Version header, ``message/send``, ``tasks/get``) gets the same run."""
    url = f"{base}/a2a/{h.flows['refund']}"
    async with httpx.AsyncClient(headers={"x-api-key": h.users["alice"][1]}, timeout=60) as c:
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
            "kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
            "parts": [{"kind": "text", "text": "refund 42"}]}}})
        task = r.json()["result"]
        assert task["status"]["state"] == "input-required", r.json()
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {"message": {
            "kind": "message", "messageId": str(uuid.uuid4()), "role": "user", "taskId": task["id"],
            "parts": [{"kind": "data", "data": {"action_id": "approve"}}]}}})
        assert r.json()["result"]["status"]["state"] == "completed", r.json()
        r = await c.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": task["id"]}})
        assert r.json()["result"]["status"]["state"] == "completed"


async def test_the_card_names_the_public_origin_behind_a_proxy(h: Harness, base: str, monkeypatch):
    monkeypatch.setattr(h.settings, "public_url", "https://signoff.example.com")
    async with httpx.AsyncClient(headers={"x-api-key": h.users["alice"][1]}) as c:
        card = (await c.get(f"{base}/a2a/{h.flows['refund']}/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == f"https://signoff.example.com/a2a/{h.flows['refund']}"


@pytest.mark.both_stores  # the revoke reaches the stream through the store's tail (NOTIFY on PostgreSQL)
async def test_a_revoked_key_ends_a_running_stream(h: Harness, base: str, monkeypatch):
    """A stream asks whether its key still sees the run while it is quiet (every
    SIGNOFF_STREAM_RECHECK_SECONDS): revoked while the run works, the stream ends, nothing after."""
    import asyncio

    from tests.integration.agui.test_agui_api import slow_flow
    from tests.integration.api.conftest import BlockingHTTP

    monkeypatch.setattr(h.settings, "stream_recheck_seconds", 0.05)
    server = BlockingHTTP()
    h.egress.add(server)
    name = f"a2a-{uuid.uuid4().hex[:6]}"
    async with h.client("alice") as c:
        flow = (await c.post("/api/v1/flows", json={**slow_flow(f"{server.url}/block/{name}"),
                                                     "name": name})).json()["id"]
    key = await h.store.create_api_key(h.users["alice"][0])
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
    try:
        async with httpx.AsyncClient(headers={"x-api-key": key, "A2A-Version": "1.0"}, timeout=60) as c:
            async with c.stream("POST", f"{base}/a2a/{flow}", json=body) as r:
                assert r.status_code == 200
                chunks, seen = r.aiter_text(), ""
                while '"task"' not in seen:
                    seen += await anext(chunks)
                await helpers.eventually(lambda: name in server.seen, what="the run to make its call")
                assert await h.store.revoke_api_key(key)

                async def rest() -> str:
                    return "".join([chunk async for chunk in chunks])

                seen += await asyncio.wait_for(rest(), 10)  # the stream ended, the call still waiting
                assert not server.gate(name).is_set()
    finally:
        server.close()
    assert "TASK_STATE_COMPLETED" not in seen  # nothing of the run after the revoke
