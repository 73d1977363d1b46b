"""MCP (DESIGN §15) with the official ``mcp`` client against a real signoff: the app behind a real
uvicorn server (Streamable HTTP at /mcp) and ``signoff mcp`` as a subprocess (stdio), a real
Temporal dev server and worker, SQLite and PostgreSQL.

``run_flow`` at a gate asks the client's person (elicitation) when the client can be asked:
accept decides, decline takes the reject action, cancel leaves the run waiting; without
elicitation it returns the waiting request for ``decide``. Every decision goes through
RunService.resume (``via`` ``mcp``); someone else's flow or run is not found; bad input is a
JSON-RPC error and the run still waits."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from signoff.engine.models import JobStatus
from tests import helpers
from tests.integration.api.conftest import Harness


@pytest.fixture(scope="module")
def url(base: str) -> str:
    return f"{base}/mcp"


@contextlib.asynccontextmanager
async def over_http(url: str, key: str | None, **kw: Any) -> AsyncIterator[Client]:
    """The official client over Streamable HTTP, sending ``key`` as x-api-key."""
    async with create_mcp_http_client(headers={"x-api-key": key} if key else {}) as http:
        async with Client(streamable_http_client(url, http_client=http), **kw) as client:
            yield client


class Person:
    """An elicitation callback that answers as told, and remembers what it was asked."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action, self.content = action, content
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        return types.ElicitResult(action=self.action, content=self.content if self.action == "accept" else None)


def data(result: types.CallToolResult) -> dict[str, Any]:
    """A tool's result: the same JSON as text and as structured content."""
    assert not result.is_error, result
    body = json.loads(result.content[0].text)
    assert result.structured_content == body, result
    return body


async def gate_flow(h: Harness, user: str = "alice", **gate: Any) -> str:
    async with h.client(user) as c:
        r = await c.post("/api/v1/flows", json=helpers.gate_flow(f"mcp gate {uuid.uuid4().hex[:6]}", **gate))
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def decision_event(h: Harness, job_id: str) -> dict[str, Any]:
    [event] = await h.store.read_events_named(job_id, "human_input_decision")
    return event.data


async def test_a_client_without_elicitation_gets_the_request_and_decides(h: Harness, url: str):
    async with over_http(url, h.users["alice"][1]) as client:
        flows = data(await client.call_tool("list_flows", {}))["flows"]
        assert h.flows["refund"] in [f["id"] for f in flows]
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
        assert run["status"] == "suspended" and run["next"] == "decide", run
        request = run["request"]
        assert request["prompt"] and set(request["allowed_decisions"]) == {"approve", "reject"}
        job_id = run["job_id"]
        pending = data(await client.call_tool("list_pending", {}))["pending"]
        assert job_id in [p["job_id"] for p in pending]
        got = data(await client.call_tool("get_request", {"job_id": job_id}))
        assert got["request"]["request_id"] == request["request_id"]
        done = data(await client.call_tool("decide", {"job_id": job_id, "request_id": request["request_id"],
                                                      "action_id": "approve"}))
        assert done["status"] == "completed" and done["output"]["text"] == "Refund sent", done
        resource = await client.read_resource(f"signoff://runs/{job_id}")
        assert json.loads(resource.contents[0].text)["status"] == "completed"
    event = await decision_event(h, job_id)
    assert event["action_id"] == "approve" and event["via"] == "mcp" and event["decided_by"] == h.users["alice"][0]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_elicitation_accepted_decides_with_its_values(h: Harness, url: str, mode: str):
    flow = await gate_flow(h, fields={"approve": {"type": "object", "properties": {
        "amount": {"type": "integer", "minimum": 1}, "note": {"type": "string"}}, "required": ["amount"]}})
    person = Person("accept", {"action": "approve", "amount": 42, "note": "ok"})
    async with over_http(url, h.users["alice"][1], elicitation_callback=person, mode=mode) as client:
        run = data(await client.call_tool("run_flow", {"flow": flow, "input": "refund 42"}))
    assert run["status"] == "completed", run
    [asked] = person.asked
    schema = asked.requested_schema
    assert schema["properties"]["action"]["enum"] == ["approve", "reject"] and schema["required"] == ["action"]
    assert schema["properties"]["amount"]["type"] == "integer" and "Approve this refund?" in asked.message
    event = await decision_event(h, run["job_id"])
    assert event["action_id"] == "approve" and event["values"] == {"amount": 42, "note": "ok"}
    assert event["via"] == "mcp"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_elicitation_declined_takes_the_reject_action(h: Harness, url: str, mode: str):
    person = Person("decline")
    async with over_http(url, h.users["alice"][1], elicitation_callback=person, mode=mode) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
    assert run["status"] == "completed" and run["output"]["text"] == "Refund refused", run
    assert (await decision_event(h, run["job_id"]))["action_id"] == "reject"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_elicitation_cancelled_leaves_the_run_waiting(h: Harness, url: str, mode: str):
    person = Person("cancel")
    async with over_http(url, h.users["alice"][1], elicitation_callback=person, mode=mode) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
    assert run["status"] == "suspended" and run["answer"] == "waiting" and run["request"], run
    assert len(person.asked) == 1
    job = await h.store.get_job(run["job_id"])
    assert job is not None and job.status == JobStatus.suspended
    assert await h.store.read_events_named(run["job_id"], "human_input_decision") == []


@pytest.mark.both_stores  # a race with a decision made elsewhere
async def test_an_elicitation_answered_after_a_decision_elsewhere_is_refused_and_applied_once(h: Harness, url: str):
    """The person answers the form after the request was decided over HTTP: refused, one decision."""
    job_ids: list[str] = []

    class Late(Person):
        async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            [job] = [j for j in await h.store.list_pending(h.users["alice"][0]) if j.job_id not in seen]
            job_ids.append(job.job_id)
            async with h.client("alice") as c:
                r = await c.post(f"/api/v2/workflows/{job.job_id}/resume",
                                 json={"request_id": job.pending.request_id, "decision": {"action_id": "reject"}})
            assert r.status_code == 200, r.text
            return await super().__call__(context, params)

    seen = {j.job_id for j in await h.store.list_pending(h.users["alice"][0])}
    async with over_http(url, h.users["alice"][1], elicitation_callback=Late("accept", {"action": "approve"})) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
    assert run["answer"] == "refused" and run["refused"]["code"] == "NOT_RESUMABLE", run
    await h.wait_status(job_ids[0], JobStatus.completed)
    events = await h.store.read_events_named(job_ids[0], "human_input_decision")
    assert [e.data["action_id"] for e in events] == ["reject"] and events[0].data["via"] == "api"


async def test_nobody_else_runs_the_flow_or_reads_or_decides_the_run(h: Harness, url: str):
    async with over_http(url, h.users["alice"][1]) as alice:
        run = data(await alice.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
    job_id, request_id = run["job_id"], run["request"]["request_id"]
    async with over_http(url, h.users["bob"][1]) as bob:
        with pytest.raises(MCPError) as flow:
            await bob.call_tool("run_flow", {"flow": h.flows["refund"], "input": "x"})
        with pytest.raises(MCPError) as missing:
            await bob.call_tool("run_flow", {"flow": str(uuid.uuid4()), "input": "x"})
        assert flow.value.code == missing.value.code == types.INVALID_PARAMS
        assert flow.value.data["code"] == missing.value.data["code"] == "FLOW_NOT_FOUND"
        for call, args in (("get_request", {"job_id": job_id}), ("stop_run", {"job_id": job_id}),
                           ("decide", {"job_id": job_id, "request_id": request_id, "action_id": "approve"})):
            with pytest.raises(MCPError) as err:
                await bob.call_tool(call, args)
            assert err.value.data["code"] == "JOB_NOT_FOUND", call
        with pytest.raises(MCPError):
            await bob.read_resource(f"signoff://runs/{job_id}")
        assert job_id not in json.dumps(data(await bob.call_tool("list_pending", {})))
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended


async def test_bad_input_is_a_json_rpc_error_and_the_run_still_waits(h: Harness, url: str):
    flow = await gate_flow(h, fields={"approve": {"type": "object", "properties": {"amount": {"type": "integer"}},
                                                  "required": ["amount"]}})
    async with over_http(url, h.users["alice"][1]) as client:
        run = data(await client.call_tool("run_flow", {"flow": flow, "input": "refund"}))
        job_id, request_id = run["job_id"], run["request"]["request_id"]
        bad = [({"action_id": "refund-twice"}, "INVALID_DECISION"), ({"action_id": "approve"}, "INVALID_VALUES"),
               ({"action_id": "approve", "values": {"amount": "lots"}}, "INVALID_VALUES"),
               ({"action_id": "approve", "values": {"amount": 1}, "request_id": "gate:nope"}, "NOT_RESUMABLE"),
               ({"action_id": "approve", "values": {"note": "x" * (h.settings.max_string_chars + 1)}},
                "INVALID_REQUEST")]
        for args, code in bad:
            with pytest.raises(MCPError) as err:
                await client.call_tool("decide", {"job_id": job_id, "request_id": request_id, **args})
            assert err.value.code == types.INVALID_PARAMS and err.value.data["code"] == code, (args, err.value.error)
        with pytest.raises(MCPError) as err:
            await client.call_tool("run_flow", {"flow": flow, "input": "a\x00b"})
        assert err.value.data["code"] == "INVALID_REQUEST"
        stopped = data(await client.call_tool("stop_run", {"job_id": job_id}))
    assert stopped["status"] == "cancelled"
    assert await h.store.read_events_named(job_id, "human_input_decision") == []


async def test_without_a_valid_key_there_is_no_mcp(h: Harness, url: str):
    import httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient() as c:
        for headers in ({}, {"x-api-key": "nope"}):
            r = await c.post(url, json=body, headers=headers)
            assert r.status_code == 401 and r.json()["detail"]["code"] == "UNAUTHORIZED"
        r = await c.post(url, content=b"x" * (h.settings.max_body_bytes + 1),
                         headers={"x-api-key": h.users["alice"][1], "content-type": "application/json"})
        assert r.status_code == 413


async def test_stdio_runs_a_flow_and_decides(h: Harness):
    env = {**os.environ, "SIGNOFF_API_KEY": h.users["alice"][1], "SIGNOFF_DATABASE_URL": h.settings.database_url,
           "SIGNOFF_HOME": str(h.settings.home), "SIGNOFF_TASK_QUEUE": h.settings.task_queue,
           "SIGNOFF_TEMPORAL_ADDRESS": h.service.client.service_client.config.target_host}
    params = StdioServerParameters(command=sys.executable, args=["-m", "signoff.cli", "mcp"], env=env)
    person = Person("accept", {"action": "approve"})
    async with Client(params, elicitation_callback=person) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
    assert run["status"] == "completed" and run["output"]["text"] == "Refund sent", run
    assert (await decision_event(h, run["job_id"]))["via"] == "mcp"
    async with Client(params) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
        done = data(await client.call_tool("decide", {"job_id": run["job_id"], "action_id": "reject",
                                                      "request_id": run["request"]["request_id"]}))
    assert done["output"]["text"] == "Refund refused"


async def test_a_tool_approval_is_asked_and_an_edit_takes_its_arguments_as_json(h: Harness, url: str):
    from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say
    from tests.integration.agui.test_agui_api import agent_flow

    with FakeOpenAI() as llm, ToolTarget() as target:
        h.egress.add(llm, target)
        llm.add(call("refund", {"body": "45 EUR"}, "call_pay"), say("Refund of 40 EUR sent."))
        async with h.client("alice") as c:
            r = await c.post("/api/v1/flows", json=agent_flow(llm, target))
        person = Person("accept", {"action": "edit", "args": json.dumps({"body": "40 EUR"})})
        async with over_http(url, h.users["alice"][1], elicitation_callback=person) as client:
            run = data(await client.call_tool("run_flow", {"flow": r.json()["id"], "input": "refund 40 EUR"}))
    assert run["status"] == "completed", run
    [asked] = person.asked
    props = asked.requested_schema["properties"]
    assert props["action"]["enum"] == ["approve", "edit", "reject", "respond"]
    assert props["args"]["type"] == "string" and props["message"]["type"] == "string"
    assert "refund" in asked.message and "45 EUR" in asked.message
    assert [hit["body"] for hit in target.hits] == ["40 EUR"]


async def test_an_elicitations_state_is_the_asked_users_and_answers_once(h: Harness, url: str):
    """The request state of an elicitation (2026-07-28) is sealed and bound to the user asked:
    another user's retry with it is refused; the asked user's second retry finds the request
    decided and is refused, one decision applied."""
    person = Person("accept", {"action": "approve"})
    async with over_http(url, h.users["alice"][1], elicitation_callback=person) as alice:
        first = await alice.session.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"},
                                              allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        answer = {"decision": types.ElicitResult(action="accept", content={"action": "approve"})}
        async with over_http(url, h.users["bob"][1], elicitation_callback=person) as bob:
            with pytest.raises(MCPError) as err:
                await bob.session.call_tool("run_flow", {"flow": h.flows["refund"], "input": "x"},
                                            input_responses=answer, request_state=first.request_state)
            assert err.value.data == {"reason": "invalid_request_state"}  # bound to alice: unsealed for nobody else
        done = await alice.session.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"},
                                             input_responses=answer, request_state=first.request_state)
        again = await alice.session.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"},
                                              input_responses=answer, request_state=first.request_state)
    assert data(done)["status"] == "completed", done
    assert data(again)["answer"] == "refused" and data(again)["refused"]["code"] == "NOT_RESUMABLE"
    assert len(await h.store.read_events_named(data(done)["job_id"], "human_input_decision")) == 1


async def test_a_vote_of_a_quorum_is_told_and_the_other_approver_decides_over_mcp(h: Harness, url: str):
    alice_id, bob_id = h.users["alice"][0], h.users["bob"][0]
    flow = await gate_flow(h, approvers=[alice_id, bob_id], required_approvals=2)
    person = Person("accept", {"action": "approve"})
    async with over_http(url, h.users["alice"][1], elicitation_callback=person) as alice:
        run = data(await alice.call_tool("run_flow", {"flow": flow, "input": "refund 42"}))
    assert run["answer"] == "voted" and (run["votes"], run["required"]) == (1, 2), run
    assert run["status"] == "suspended" and len(person.asked) == 1
    async with over_http(url, h.users["bob"][1]) as bob:
        [pending] = [p for p in data(await bob.call_tool("list_pending", {}))["pending"] if p["job_id"] == run["job_id"]]
        done = data(await bob.call_tool("decide", {"job_id": run["job_id"], "action_id": "approve",
                                                   "request_id": pending["request"]["request_id"]}))
    assert done == {"job_id": run["job_id"], "status": "resuming"}  # the rest of the run is alice's
    job = await h.wait_status(run["job_id"], JobStatus.completed)
    [decision] = await h.store.read_events_named(job.job_id, "human_input_decision")
    assert [v["user"] for v in decision.data["votes"]] == [alice_id, bob_id] and decision.data["via"] == "mcp"


async def test_writes_take_from_the_users_write_rate(h: Harness, url: str, monkeypatch):
    """run_flow, decide and stop_run are writes (SIGNOFF_WRITE_RATE, the API's buckets); reads are not."""
    from signoff.api.ratelimit import WriteBudget

    # (setitem on its dict: monkeypatch cannot put back an attribute of a Starlette State)
    monkeypatch.setitem(h.app.state._state, "write_buckets", WriteBudget(0.0001, 1))  # one write, then none for hours
    async with over_http(url, h.users["alice"][1]) as client:
        run = data(await client.call_tool("run_flow", {"flow": h.flows["refund"], "input": "refund 42"}))
        with pytest.raises(MCPError) as err:
            await client.call_tool("decide", {"job_id": run["job_id"], "action_id": "approve",
                                              "request_id": run["request"]["request_id"]})
        assert err.value.data["code"] == "RATE_LIMITED" and err.value.data["retry_after"] >= 1
        assert data(await client.call_tool("get_request", {"job_id": run["job_id"]}))["request"]  # a read
    assert (await h.store.get_job(run["job_id"])).status == JobStatus.suspended
