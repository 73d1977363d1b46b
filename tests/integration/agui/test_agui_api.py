"""AG-UI 1.0 through the app (DESIGN §12; docs/agui.md), on SQLite and PostgreSQL with a real
worker: every answer is read as the raw SSE the server wrote, each event validated against
``ag-ui-protocol``'s models and the stream against AG-UI's rules (conftest ``agui``).

A gate ends the AG-UI run with the interrupt outcome (id = request id, its prompt, options,
allowed actions, fields schema, tool call); the next run of the thread carrying ``resume`` is
the decision, through RunService.resume: approve and reject take their branches, refused
decisions are RUN_ERROR with signoff's code and leave the job as it was, a cancelled entry
stops the run, and nobody else's run or flow can be touched."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from signoff.engine.models import JobStatus
from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say
from tests import helpers
from tests.helpers import event_names
from tests.integration.agui.conftest import agui, check_stream, of_type, outcome, run_input, sse_events, texts
from tests.integration.api.conftest import BlockingHTTP, Harness


def thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def approve(interrupt_id: str, action: str = "approve", values: dict[str, Any] | None = None,
            status: str = "resolved") -> list[dict[str, Any]]:
    payload: dict[str, Any] = {"action_id": action}
    if values is not None:
        payload["values"] = values
    entry: dict[str, Any] = {"interruptId": interrupt_id, "status": status}
    if status == "resolved":
        entry["payload"] = payload
    return [entry]


async def upload(h: Harness, spec: dict[str, Any], user: str = "alice") -> str:
    async with h.client(user) as c:
        r = await c.post("/api/v1/flows", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def interrupted(h: Harness, c: httpx.AsyncClient, flow: str, t: str, text: str = "refund 42"
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A first AG-UI run that ends at a gate: its events and its one interrupt."""
    events = await agui(c, flow, run_input(t, text=text))
    end = outcome(events)
    assert end["type"] == "RUN_FINISHED" and end["outcome"]["type"] == "interrupt", end
    [interrupt] = end["outcome"]["interrupts"]
    return events, interrupt


def gate_flow(**gate: Any) -> dict[str, Any]:
    return helpers.gate_flow(f"agui gate {uuid.uuid4().hex[:6]}", **gate)


def agent_flow(llm: FakeOpenAI, target: ToolTarget) -> dict[str, Any]:
    return {
        "name": f"agui agent {uuid.uuid4().hex[:6]}",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "agent", "type": "Agent", "params": {
                "model": "fake-model", "base_url": llm.base_url, "system_prompt": "You send refunds.",
                "retry_backoff": 0.01}},
            {"id": "calc", "type": "Calculator", "params": {"tool_name": "calculator",
                                                            "tool_description": "Evaluates arithmetic"}},
            {"id": "pay", "type": "HTTPRequest", "params": {
                "url": f"{target.url}/refunds", "method": "POST", "tool_name": "refund",
                "tool_description": "Send a refund", "approval_actions": ["approve", "edit", "reject", "respond"]}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "agent.input_value"},
            {"from": "calc.tool", "to": "agent.tools"},
            {"from": "pay.tool", "to": "agent.tools"},
            {"from": "agent.response", "to": "out.input_value"},
        ],
    }


# ---- a gate: interrupt, then resume ------------------------------------------------------


async def test_a_gate_ends_the_run_with_an_interrupt_and_resume_approves_it(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        first, interrupt = await interrupted(h, c, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        assert interrupt["id"] == f"gate:{job_id}"
        assert interrupt["reason"] == "human_input" and interrupt["message"] == "Approve the refund for: refund 42"
        meta = interrupt["metadata"]
        assert meta["options"] == [{"action_id": "approve", "label": "Approve"},
                                   {"action_id": "reject", "label": "Reject"}]
        assert meta["allowed_decisions"] == ["approve", "reject"] and meta["kind"] == "node_input"
        assert interrupt["responseSchema"]["properties"]["action_id"]["enum"] == ["approve", "reject"]
        assert first[0]["threadId"] == t and first[0]["protocolVersion"] == "1.0"
        # the steps so far: the Chat Input, the Prompt that words the question, the gate that asked
        steps = [(e["type"], e["stepName"]) for e in of_type(first, "STEP_STARTED", "STEP_FINISHED")]
        assert steps == [("STEP_STARTED", "ask"), ("STEP_FINISHED", "ask"), ("STEP_STARTED", "card"),
                         ("STEP_FINISHED", "card"), ("STEP_STARTED", "gate"), ("STEP_FINISHED", "gate")]
        assert [e["name"] for e in of_type(first, "CUSTOM")] == ["signoff.human_input_required"]
        assert texts(first) == []
        job = await h.store.get_job(job_id)
        assert job.status == JobStatus.suspended and job.session_id == t

        second = await agui(c, flow, run_input(t, resume=approve(interrupt["id"])))
        end = outcome(second)
        assert end["type"] == "RUN_FINISHED" and end["outcome"] == {"type": "success"}
        assert end["result"]["status"] == "completed" and end["result"]["output"]["text"] == "Refund sent"
        assert texts(second) == ["Refund sent"]
        steps = [e["stepName"] for e in of_type(second, "STEP_STARTED")]
        assert steps == ["gate", "ok"]  # the gate decided, then the branch it chose
        decided = of_type(second, "STEP_FINISHED")[0]["metadata"]
        assert decided["action_id"] == "approve" and decided["decided_by"] == h.users["alice"][0]
        assert [e["name"] for e in of_type(second, "CUSTOM")] == ["signoff.human_input_decision", "signoff.end"]
    assert (await h.store.get_job(job_id)).status == JobStatus.completed
    assert await event_names(h.store, job_id) == ["human_input_required", "human_input_decision", "end"]


async def test_an_interrupt_expires_at_the_gates_deadline_and_an_answer_after_it_is_a_run_error(h: Harness):
    """expiresAt = paused_at + the gate's timeout; a resolved answer after it is AG-UI's stale
    resume (RUN_ERROR INTERRUPT_EXPIRED), the job untouched; cancelling it still stops the run."""
    from datetime import datetime, timedelta

    flow, t = await upload(h, gate_flow(timeout=1)), thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        paused = datetime.fromisoformat(interrupt["metadata"]["paused_at"])
        expires = datetime.fromisoformat(interrupt["expiresAt"].replace("Z", "+00:00"))
        assert expires - paused == timedelta(seconds=1), (interrupt["expiresAt"], paused)
        while datetime.now(expires.tzinfo) <= expires:  # the deadline passes (the test waits for it, no timing asserted)
            await asyncio.sleep(0.05)
        late = await agui(c, flow, run_input(t, resume=approve(interrupt["id"])))
        end = outcome(late)
        assert end["type"] == "RUN_ERROR" and end["code"] == "INTERRUPT_EXPIRED", end
        assert end["metadata"]["job_id"] == job_id
        assert (await h.store.get_job(job_id)).status == JobStatus.suspended
        assert "human_input_decision" not in await event_names(h.store, job_id)
        stop = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], status="cancelled")))
        assert outcome(stop)["outcome"]["type"] == "cancelled"
        _, untimed = await interrupted(h, c, h.flows["refund"], thread())
    assert untimed.get("expiresAt") is None  # a gate without a deadline never expires


async def test_a_reject_takes_the_other_branch(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        second = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "reject")))
    assert outcome(second)["outcome"] == {"type": "success"}
    assert texts(second) == ["Refund refused"]
    assert [e["stepName"] for e in of_type(second, "STEP_STARTED")] == ["gate", "no"]


async def test_the_payload_may_be_the_action_id_alone_and_the_history_has_the_text(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        second = await agui(c, flow, run_input(t, resume=[{"interruptId": interrupt["id"], "status": "resolved",
                                                           "payload": "approve"}]))
        assert texts(second) == ["Refund sent"]
        history = (await c.get("/api/v1/monitor/messages", params={"session_id": t})).json()
    # the text message is the Chat Output's message of the history, under the same id
    [message_id] = [e["messageId"] for e in of_type(second, "TEXT_MESSAGE_START")]
    assert any(m["id"] == message_id and m["text"] == "Refund sent" for m in history), history


async def test_fields_travel_in_the_interrupt_and_bad_values_are_refused(h: Harness):
    reason = {"type": "object", "required": ["reason"], "properties": {"reason": {"type": "string", "minLength": 3}}}
    flow, t = await upload(h, gate_flow(fields={"Reject": reason})), thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        assert interrupt["metadata"]["fields"] == {"reject": reason}
        [reject_branch] = [b for b in interrupt["responseSchema"]["oneOf"]
                           if b["properties"]["action_id"] == {"const": "reject"}]
        assert reject_branch["properties"]["values"] == reason and "values" in reject_branch["required"]
        job_id = interrupt["metadata"]["job_id"]

        bad = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "reject", {"reason": "no"})))
        err = outcome(bad)
        assert err["type"] == "RUN_ERROR" and err["code"] == "INVALID_VALUES", err
        assert [p["loc"] for p in err["metadata"]["problems"]] == ["values.reason"]
        assert err["metadata"]["job_id"] == job_id
        job = await h.store.get_job(job_id)
        assert job.status == JobStatus.suspended and job.pending.request_id == interrupt["id"]

        good = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "reject", {"reason": "too late"})))
        assert texts(good) == ["Refund refused"]
    decision = [e for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]
    assert [d.data["values"] for d in decision] == [{"reason": "too late"}]


# ---- refused decisions: RUN_ERROR with signoff's code, the job untouched ---------------------


async def test_resuming_the_same_interrupt_twice_gives_one_decision_and_not_resumable(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        first = await agui(c, flow, run_input(t, resume=approve(interrupt["id"])))
        assert outcome(first)["outcome"] == {"type": "success"}
        again = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "reject")))
    err = outcome(again)
    assert [e["type"] for e in again] == ["RUN_STARTED", "RUN_ERROR"]
    assert err["code"] == "NOT_RESUMABLE" and err["metadata"]["job_id"] == job_id
    assert await event_names(h.store, job_id) == ["human_input_required", "human_input_decision", "end"]
    assert (await h.store.get_job(job_id)).result["output"]["text"] == "Refund sent"


async def test_concurrent_resumes_of_one_interrupt_apply_one_decision(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        runs = await asyncio.gather(*(agui(c, flow, run_input(t, resume=approve(interrupt["id"], action)))
                                      for action in ("approve", "reject", "approve", "reject")))
    ends = [outcome(r) for r in runs]
    won = [e for e in ends if e["type"] == "RUN_FINISHED"]
    assert len(won) == 1, ends
    assert {e["code"] for e in ends if e["type"] == "RUN_ERROR"} == {"NOT_RESUMABLE"}
    job_id = interrupt["metadata"]["job_id"]
    assert (await event_names(h.store, job_id)).count("human_input_decision") == 1


async def test_a_stale_interrupt_a_refused_action_a_bad_payload_leave_the_job_waiting(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        cases = [
            (approve(f"gate:{uuid.uuid4()}"), "NOT_RESUMABLE"),  # names no run
            (approve("gate:stale"), "NOT_RESUMABLE"),
            (approve(interrupt["id"], "maybe"), "INVALID_DECISION"),
            ([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"nope": 1}}], "INVALID_REQUEST"),
            ([{"interruptId": interrupt["id"], "status": "resolved"}], "INVALID_REQUEST"),
            (approve(interrupt["id"]) * 2, "INVALID_REQUEST"),  # one decision at a time
        ]
        for resume, code in cases:
            events = await agui(c, flow, run_input(t, resume=resume))
            assert outcome(events)["type"] == "RUN_ERROR" and outcome(events)["code"] == code, (resume, events)
        # another thread of the same user may not answer it either
        other = await agui(c, flow, run_input(thread(), resume=approve(interrupt["id"])))
        assert outcome(other)["code"] == "NOT_RESUMABLE"
    job = await h.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == interrupt["id"]
    assert await event_names(h.store, job_id) == ["human_input_required"]


async def test_nobody_else_runs_the_flow_or_resumes_the_run(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as a, h.client("erin") as e:
        _, interrupt = await interrupted(h, a, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        ran = await agui(e, flow, run_input(t, text="mine now"))
        assert outcome(ran)["type"] == "RUN_ERROR" and outcome(ran)["code"] == "FLOW_NOT_FOUND"
        for resume in (approve(interrupt["id"]), approve(interrupt["id"], status="cancelled")):
            stolen = await agui(e, flow, run_input(t, resume=resume))
            # never "forbidden": it is not theirs to see (as the HTTP API's 404 for the id they named)
            assert [e["type"] for e in stolen] == ["RUN_STARTED", "RUN_ERROR"]
            assert outcome(stolen)["code"] == "JOB_NOT_FOUND", stolen
            assert outcome(stolen)["metadata"] == {"job_id": job_id}
        r = await e.post(f"/api/v1/agui/{flow}", json=run_input(t, text="x"), headers={"x-api-key": "wrong"})
        assert r.status_code == 401
    job = await h.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == interrupt["id"]
    assert await event_names(h.store, job_id) == ["human_input_required"]


async def test_a_revoked_share_is_forbidden_and_the_job_stays_suspended(h: Harness):
    flow = await upload(h, gate_flow())
    bob_id = h.users["bob"][0]
    t = thread()
    async with h.client("alice") as a, h.client("bob") as b:
        assert (await a.post(f"/api/v1/flows/{flow}/shares", json={"user": bob_id})).status_code == 201
        _, interrupt = await interrupted(h, b, flow, t)
        assert (await a.delete(f"/api/v1/flows/{flow}/shares/{bob_id}")).status_code == 204
        refused = await agui(b, flow, run_input(t, resume=approve(interrupt["id"])))
    assert outcome(refused)["code"] == "FORBIDDEN"
    assert (await h.store.get_job(interrupt["metadata"]["job_id"])).status == JobStatus.suspended


async def test_an_approver_votes_through_ag_ui_and_the_quorum_resolves(h: Harness):
    alice_id, bob_id = h.users["alice"][0], h.users["bob"][0]
    flow, t = await upload(h, gate_flow(approvers=[alice_id, bob_id], required_approvals=2)), thread()
    async with h.client("alice") as a, h.client("bob") as b:
        _, interrupt = await interrupted(h, a, flow, t)
        voted = await agui(a, flow, run_input(t, resume=approve(interrupt["id"])))
        end = outcome(voted)
        assert end["outcome"]["type"] == "interrupt", end  # one vote of two: still waiting
        [again] = end["outcome"]["interrupts"]
        assert again["id"] == interrupt["id"] and again["metadata"]["votes"] == 1 and again["metadata"]["required"] == 2
        # bob may not run alice's flow, but he is an approver of this request, in this thread;
        # his AG-UI run ends with his decision: the rest of the run is alice's
        done = await agui(b, flow, run_input(t, resume=approve(interrupt["id"])))
        end = outcome(done)
        assert end["outcome"] == {"type": "success"} and end["result"] == {"job_id": interrupt["metadata"]["job_id"],
                                                                           "status": "resuming"}, done
        assert texts(done) == [] and of_type(done, "STEP_STARTED", "CUSTOM") == []
    job = await h.wait_status(interrupt["metadata"]["job_id"], JobStatus.completed)
    assert job.result["output"]["text"] == "Refund sent"
    decision = [e for e in await h.store.read_events(job.job_id) if e.event == "human_input_decision"]
    assert [v["user"] for v in decision[0].data["votes"]] == [alice_id, bob_id]


# ---- stop, supersede, failure ---------------------------------------------------------------


async def test_a_cancelled_entry_stops_the_waiting_run(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        job_id = interrupt["metadata"]["job_id"]
        stopped = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], status="cancelled")))
        end = outcome(stopped)
        assert end["type"] == "RUN_FINISHED" and end["outcome"] == {"type": "cancelled"}
        assert end["metadata"] == {"job_id": job_id, "reason": "stopped"}
        assert (await h.store.get_job(job_id)).status == JobStatus.cancelled
        # cancelling again says the same; answering it now is refused
        again = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], status="cancelled")))
        assert outcome(again)["outcome"] == {"type": "cancelled"}
        late = await agui(c, flow, run_input(t, resume=approve(interrupt["id"])))
        assert outcome(late)["code"] == "NOT_RESUMABLE"
    assert await event_names(h.store, job_id) == ["human_input_required", "run_cancelled"]


async def test_a_new_message_on_the_thread_supersedes_the_waiting_run(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, first = await interrupted(h, c, flow, t, text="refund 1")
        _, second = await interrupted(h, c, flow, t, text="refund 2")
    old, new = first["metadata"]["job_id"], second["metadata"]["job_id"]
    assert old != new
    cancelled = await h.store.read_events(old)
    assert cancelled[-1].event == "run_cancelled" and cancelled[-1].data == {"reason": "superseded",
                                                                            "superseded_by": new}
    messages = await h.store.list_messages(t, flow_id=flow)
    assert [m.text for m in messages if m.sender == "User"] == ["refund 1", "refund 2"]


def slow_flow(url: str) -> dict[str, Any]:
    """ask -> an HTTP call to ``url`` (a BlockingHTTP gate: the run works until it is released) -> out."""
    return {"name": "slow",
            "nodes": [{"id": "ask", "type": "ChatInput"},
                      {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": "POST"}},
                      {"id": "out", "type": "ChatOutput"}],
            "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}]}


async def test_a_stop_while_the_run_streams_ends_it_with_the_cancelled_outcome(h: Harness, live: str):
    server = BlockingHTTP()
    h.egress.add(server)
    flow = await upload(h, slow_flow(f"{server.url}/block/agui"))
    key = h.users["alice"][1]
    try:
        async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=60) as c:
            async with c.stream("POST", f"/api/v1/agui/{flow}", json=run_input(thread(), text="go")) as r:
                assert r.status_code == 200
                body = ""
                lines = r.aiter_text()
                while "STEP_FINISHED" not in body:  # the Chat Input's step, as it happened
                    body += await anext(lines)
                while not server.seen:
                    await asyncio.sleep(0.02)
                [job] = await h.store.list_active_jobs(flow)
                stop = await c.post("/api/v2/workflows/stop", json={"job_id": job.job_id})
                assert stop.json()["status"] == "cancelled", stop.text
                async for chunk in lines:
                    body += chunk
    finally:
        server.close()
    events = sse_events(body)
    check_stream(events)
    assert [e["stepName"] for e in of_type(events, "STEP_STARTED")] == ["ask"]  # the call never finished
    end = outcome(events)
    assert end["type"] == "RUN_FINISHED" and end["outcome"] == {"type": "cancelled"}
    assert end["metadata"]["reason"] == "stopped" and end["metadata"]["job_id"] == job.job_id


async def test_a_failure_is_a_run_error(h: Harness):
    flow = await upload(h, {
        "name": "divide",
        "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "calc", "type": "Calculator"},
                  {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "calc.expression"}, {"from": "calc.result", "to": "out.input_value"}],
    })
    async with h.client("alice") as c:
        ok = await agui(c, flow, run_input(thread(), text="6 * 7"))
        failed = await agui(c, flow, run_input(thread(), text="1 / 0"))
    assert outcome(ok)["outcome"] == {"type": "success"} and texts(ok) == ["42"]
    err = outcome(failed)
    assert err["type"] == "RUN_ERROR" and err["code"] == "RUN_FAILED", err
    assert "Calculator" in err["message"] and err["metadata"]["vertex_id"] == "calc"
    calc = [e for e in failed if e["type"] == "STEP_FINISHED" and e["stepName"] == "calc"]
    assert calc and calc[-1]["metadata"]["status"] == "error"


async def test_a_repeated_run_id_is_the_same_job(h: Harness):
    flow, t = h.flows["refund"], thread()
    body = run_input(t, text="refund 7")
    async with h.client("alice") as c:
        first = await agui(c, flow, body)
        again = await agui(c, flow, body)  # a client retrying the same AG-UI run
    one = outcome(first)["outcome"]["interrupts"][0]
    assert outcome(again)["outcome"]["interrupts"][0] == one
    job = await h.store.get_job(one["metadata"]["job_id"])
    assert job.status == JobStatus.suspended  # not superseded by its own retry
    assert len(await h.store.find_suspended(flow, h.users["alice"][0], t)) == 1


async def test_an_input_that_is_not_a_run_agent_input_is_422(h: Harness):
    flow = h.flows["refund"]
    async with h.client("alice") as c:
        for body in ({"threadId": "t"}, {**run_input("t"), "threadId": ""}, {**run_input("x" * 201)},
                     {**run_input("t", text="a\u0000b")}, {**run_input("t"), "resume": [{"interruptId": "x"}]}):
            r = await c.post(f"/api/v1/agui/{flow}", json=body)
            assert r.status_code == 422, (body, r.text)
            assert r.json()["detail"]["code"] == "INVALID_REQUEST"


# ---- an Agent's tool approval ---------------------------------------------------------------


async def test_a_tool_approval_is_an_interrupt_and_edited_arguments_run(h: Harness):
    with FakeOpenAI() as llm, ToolTarget() as target:
        h.egress.add(llm, target)
        llm.add(call("calculator", {"expression": "3 * 15"}, "call_calc"),
                call("refund", {"body": "45 EUR"}, "call_pay"), say("Refund of 40 EUR sent."))
        flow, t = await upload(h, agent_flow(llm, target)), thread()
        async with h.client("alice") as c:
            first, interrupt = await interrupted(h, c, flow, t, text="refund 3 items of 15 EUR")
            assert interrupt["reason"] == "tool_approval" and interrupt["toolCallId"] == "call_pay"
            job_id = interrupt["metadata"]["job_id"]
            assert interrupt["id"] == f"agent:{job_id}:1"
            assert interrupt["metadata"]["tool"]["args"] == {"body": "45 EUR"}
            assert interrupt["metadata"]["allowed_decisions"] == ["approve", "edit", "reject", "respond"]
            edit = [b for b in interrupt["responseSchema"]["oneOf"] if b["properties"]["action_id"]["const"] == "edit"]
            assert edit[0]["properties"]["values"]["required"] == ["args"]
            # the calculator ran freely (a call with its result); the refund is asked, not run
            calls = of_type(first, "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT")
            assert [(e["type"], e["toolCallId"]) for e in calls] == [
                ("TOOL_CALL_START", "call_calc"), ("TOOL_CALL_ARGS", "call_calc"), ("TOOL_CALL_END", "call_calc"),
                ("TOOL_CALL_RESULT", "call_calc"),
                ("TOOL_CALL_START", "call_pay"), ("TOOL_CALL_ARGS", "call_pay"), ("TOOL_CALL_END", "call_pay")]
            assert calls[0]["toolCallName"] == "calculator" and json.loads(calls[1]["delta"]) == {"expression": "3 * 15"}
            assert calls[3]["content"] == "45"
            assert json.loads(calls[5]["delta"]) == {"body": "45 EUR"}
            assert target.hits == []

            second = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "edit",
                                                                         {"args": {"body": "40 EUR"}})))
        assert outcome(second)["outcome"] == {"type": "success"}, second
        assert [hit["body"] for hit in target.hits] == ["40 EUR"]
        [result] = of_type(second, "TOOL_CALL_RESULT")
        assert result["toolCallId"] == "call_pay" and result["metadata"]["outcome"] == "edited"
        assert json.loads(result["content"])["echo"] == "40 EUR"
        assert result["metadata"]["args"] == {"body": "40 EUR"}
        assert of_type(second, "TOOL_CALL_START") == []  # the call was told in the run that asked
        assert texts(second) == ["Refund of 40 EUR sent."]
        assert [e["stepName"] for e in of_type(second, "STEP_STARTED")] == ["agent", "agent", "out"]


async def test_a_rejected_tool_call_never_runs_and_its_result_is_the_message(h: Harness):
    with FakeOpenAI() as llm, ToolTarget() as target:
        h.egress.add(llm, target)
        llm.add(call("refund", {"body": "900 EUR"}, "call_big"), say("I could not send that refund."))
        flow, t = await upload(h, agent_flow(llm, target)), thread()
        async with h.client("alice") as c:
            _, interrupt = await interrupted(h, c, flow, t)
            second = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "reject",
                                                                         {"message": "too much"})))
        assert target.hits == []
        [result] = of_type(second, "TOOL_CALL_RESULT")
        assert result["toolCallId"] == "call_big" and result["content"] == "too much"
        assert result["metadata"] == {"outcome": "rejected"}
        assert texts(second) == ["I could not send that refund."]
        assert [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"] == ["too much"]


async def test_a_revoked_key_ends_a_running_agui_stream_within_the_recheck(h: Harness, live: str, monkeypatch):
    """The live-stream access re-check is one rule for every stream (api/sse.py: while_allowed):
    an AG-UI run whose key is revoked while its flow is still running (in another process: the
    store only) ends within SIGNOFF_STREAM_RECHECK_SECONDS, with no event after the revoke."""
    monkeypatch.setattr(h.settings, "stream_recheck_seconds", 0.05)
    server = BlockingHTTP()
    h.egress.add(server)
    name = f"revoke-{uuid.uuid4().hex[:6]}"
    flow = await upload(h, slow_flow(f"{server.url}/block/{name}"))
    key = await h.store.create_api_key(h.users["alice"][0])
    try:
        async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=60) as c:
            async with c.stream("POST", f"/api/v1/agui/{flow}", json=run_input(thread(), text="go")) as r:
                assert r.status_code == 200
                body = ""
                chunks = r.aiter_text()
                while "STEP_FINISHED" not in body:
                    body += await anext(chunks)
                await helpers.eventually(lambda: name in server.seen, what="the run to make its call")
                assert await h.store.revoke_api_key(key)

                async def rest() -> str:
                    return "".join([chunk async for chunk in chunks])

                body += await asyncio.wait_for(rest(), 10)  # the stream ended, the call still waiting
                assert name in server.seen and not server.gate(name).is_set()
    finally:
        server.close()
    assert "RUN_FINISHED" not in body and "STEP_STARTED" in body  # nothing of the run after the revoke
