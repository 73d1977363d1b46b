"""A gate's own timers (DESIGN §9), on SQLite and PostgreSQL, through the real app, worker and
Temporal dev server, days of waiting fast-forwarded per workflow:

- ``on_timeout``: nobody answers and the deadline acts by itself, as a durable timer:
  ``default`` applies the default decision (``timed_out: true``, nobody decided), ``fallback``
  takes ``branch_fallback``, ``fail`` ends the run ``timed_out``; ``human_input_expired`` records
  it. Without ``on_timeout`` a late answer is still rerouted to the fallback as before.
- ``remind_every``: a ``human_input_reminder`` per period until the request is decided, none
  after.
- ``escalate_after`` + ``escalate_to``: the new approvers are added once
  (``human_input_escalated``); they see the request and decide it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from signoff.worker import STRICT_SANDBOX

from signoff.engine.models import JobStatus
from signoff.service import RunService
from signoff.worker import build_worker
from signoff.workflows.flow_run import FlowRun
from tests.integration.decisions.gate_world import (  # noqa: F401 - the world fixture
    event_names,
    events,
    fast_forward,
    gate_flow,
    name_of,
    pending_ids,
    resume,
    save_flow,
    start_suspended,
    world,
)
from tests.helpers import eventually

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def _only(evts: list[tuple[str, dict]], name: str) -> list[dict]:
    return [data for event, data in evts if event == name]


async def _output(h, job_id: str, user: str = "alice") -> str | None:
    async with h.client(user) as c:
        r = await c.get(f"/api/v2/workflows/{job_id}")
    assert r.status_code == 200, r.text
    return (r.json().get("output") or {}).get("text")


async def _result(h, job_id: str) -> dict:
    return await h.service.client.get_workflow_handle(job_id).result()


# ---- on_timeout ----------------------------------------------------------------------------


async def test_on_timeout_default_applies_the_default_decision(world):
    h, skipper = world
    reason = {"type": "object", "properties": {"reason": {"type": "string", "minLength": 3}}, "required": ["reason"]}
    flow = await save_flow(h, gate_flow(
        "default at the deadline", timeout={"value": 2, "unit": "Days"}, on_timeout="default",
        default_action="reject", default_values={"reason": "nobody answered"}, fields={"Reject": reason}))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert job["human_request"]["timeout_seconds"] == 2 * 86400

    # a day on: nothing happens by itself yet
    assert await fast_forward(h, skipper, job_id, DAY)
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended
    assert await event_names(h, job_id) == ["human_input_required"]

    # past the deadline: the durable timer applies the default decision, and the run goes on
    await fast_forward(h, skipper, job_id, DAY + 2 * HOUR)
    done = await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "refused"
    evts = await events(h, job_id)
    assert [e for e, _ in evts] == ["human_input_required", "human_input_expired", "human_input_decision", "end"]
    expired = _only(evts, "human_input_expired")[0]
    assert expired["request_id"] == f"gate:{job_id}"
    assert expired["requested_action"] is None and expired["rerouted_to"] == "reject"
    assert expired["timeout_seconds"] == 2 * 86400
    decision = _only(evts, "human_input_decision")[0]
    assert decision["action_id"] == "reject"
    assert decision["values"] == {"reason": "nobody answered"}
    assert decision["timed_out"] is True
    assert decision["decided_by"] is None
    assert done.pending is None
    assert (await _result(h, job_id))["status"] == "completed"
    # the gate's span names what the deadline chose
    async def gate_spans():
        return [s.name for s in await h.store.get_trace(done.run_id) if s.name.startswith("Human In The Loop")]

    assert await eventually(gate_spans, timeout=15, what="the gate span") == ["Human In The Loop — Reject"]

    # a late answer finds nothing to decide
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 409, r.text


async def test_on_timeout_fail_ends_the_run_timed_out(world):
    h, skipper = world
    flow = await save_flow(h, gate_flow("fail at the deadline", timeout=3600, on_timeout="fail"))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert job["human_request"]["timeout_seconds"] == 3600

    assert await fast_forward(h, skipper, job_id, timedelta(minutes=50))
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended

    await fast_forward(h, skipper, job_id, timedelta(minutes=20))
    ended = await h.wait_status(job_id, JobStatus.timed_out)
    assert ended.pending is None
    evts = await events(h, job_id)
    assert [e for e, _ in evts] == ["human_input_required", "human_input_expired", "run_timed_out"]
    assert _only(evts, "human_input_expired")[0]["request_id"] == f"gate:{job_id}"
    # the run ended by the gate's deadline, not by the deployment's maximum suspension
    assert _only(evts, "run_timed_out") == [{"reason": "on_timeout", "request_id": f"gate:{job_id}",
                                             "timeout_seconds": 3600}]
    assert (await _result(h, job_id))["status"] == "timed_out"
    async with h.client("alice") as c:
        r = await c.get(f"/api/v2/workflows/{job_id}")
    assert r.json()["status"] == "timed_out" and r.json()["human_request"] is None
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 409, r.text


async def test_on_timeout_fallback_takes_the_fallback_branch(world):
    h, skipper = world
    flow = await save_flow(h, gate_flow("fallback at the deadline", timeout={"value": 90, "unit": "Minutes"},
                                        on_timeout="fallback", enable_fallback=True))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert job["human_request"]["timeout_seconds"] == 5400

    await fast_forward(h, skipper, job_id, 2 * HOUR)
    await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "fallback"
    evts = await events(h, job_id)
    assert [e for e, _ in evts] == ["human_input_required", "human_input_expired", "human_input_decision", "end"]
    decision = _only(evts, "human_input_decision")[0]
    assert decision["action_id"] == "fallback"
    assert decision["timed_out"] is True and decision["decided_by"] is None
    assert _only(evts, "human_input_expired")[0]["rerouted_to"] == "fallback"


async def test_answer_before_the_deadline_wins_and_cancels_the_timer(world):
    h, skipper = world
    flow = await save_flow(h, gate_flow("answered in time", timeout={"value": 1, "unit": "Days"}, on_timeout="default",
                                        default_action="reject"))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert await fast_forward(h, skipper, job_id, 20 * HOUR)
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "approved"
    evts = await events(h, job_id)
    assert [e for e, _ in evts] == ["human_input_required", "human_input_decision", "end"]
    decision = _only(evts, "human_input_decision")[0]
    assert decision["action_id"] == "approve" and decision["decided_by"] == h.users["alice"][0]
    assert "timed_out" not in decision
    assert (await _result(h, job_id))["status"] == "completed"


async def test_late_answer_without_on_timeout_is_still_rerouted(world):
    """A gate with a timeout but no on_timeout does nothing by itself at the deadline (here its
    reminders keep it under the timers' wait): the late answer is rerouted to the fallback, as
    before DESIGN §9."""
    h, skipper = world
    flow = await save_flow(h, gate_flow("late answer", timeout={"value": 3, "unit": "Days"}, enable_fallback=True,
                                        remind_every={"value": 1, "unit": "Days"}))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert await fast_forward(h, skipper, job_id, 4 * DAY + 2 * HOUR)
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended
    assert "human_input_expired" not in await event_names(h, job_id)

    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "fallback"
    evts = await events(h, job_id)
    names = [e for e, _ in evts]
    assert names == ["human_input_required"] + ["human_input_reminder"] * 4 + [
        "human_input_expired", "human_input_decision", "end"]
    expired = _only(evts, "human_input_expired")[0]
    assert expired["requested_action"] == "approve" and expired["rerouted_to"] == "fallback"
    decision = _only(evts, "human_input_decision")[0]
    assert decision["action_id"] == "fallback" and decision["decided_by"] == h.users["alice"][0]
    assert "timed_out" not in decision


# ---- reminders -------------------------------------------------------------------------------


def _two_gates(**first: object) -> dict:
    """ask → gate (with ``first``'s params) → approve → then (a second, plain gate) → done: after
    the first decision the run still waits, so a reminder of the first would still have time to
    come."""
    return {
        "name": "two gates",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"], **first}},
            {"id": "then", "type": "HumanInput", "params": {"decisions": ["Ship"]}},
            {"id": "done", "type": "ChatOutput", "params": {"text": "shipped"}},
            {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "then.prompt"},
            {"from": "gate.branch_reject", "to": "no.input_value"},
            {"from": "then.branch_ship", "to": "done.input_value"},
        ],
    }


async def test_reminders_until_decided_then_none(world):
    h, skipper = world
    flow = await save_flow(h, _two_gates(remind_every={"value": 1, "unit": "Days"}))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]

    assert await fast_forward(h, skipper, job_id, 3 * DAY + 2 * HOUR)  # three simulated days
    evts = await events(h, job_id)
    reminders = _only(evts, "human_input_reminder")
    assert [r["reminder"] for r in reminders] == [1, 2, 3]
    assert all(r["request_id"] == f"gate:{job_id}" for r in reminders)
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended

    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    second = await h.wait_status(job_id, JobStatus.suspended)
    assert second.pending is not None and second.pending.request_id == f"then:{job_id}"

    # three more days while the run waits at the second gate: no reminder of the decided one
    assert await fast_forward(h, skipper, job_id, 3 * DAY + 2 * HOUR)
    evts = await events(h, job_id)
    assert len(_only(evts, "human_input_reminder")) == 3
    assert [e for e, _ in evts] == ["human_input_required"] + ["human_input_reminder"] * 3 + [
        "human_input_decision", "human_input_required"]
    async with h.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"then:{job_id}", "decision": {"action_id": "ship"}})
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "shipped"


# ---- escalation ------------------------------------------------------------------------------


async def _refused_to(h, who: str, job_id: str) -> None:
    """``who`` can neither see nor decide the run (before an escalation names them)."""
    assert job_id not in await pending_ids(h, who)
    async with h.client(who) as c:
        r = await c.get(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 404, r.text
    r = await resume(h, who, job_id, "approve")
    assert r.status_code in (403, 404), r.text


async def test_escalation_adds_the_approvers_once(world):
    h, skipper = world
    bob, carol = await name_of(h, "bob"), await name_of(h, "carol")
    flow = await save_flow(h, gate_flow("escalates", approvers=[bob], escalate_after={"value": 1, "unit": "Days"},
                                        escalate_to=[carol]))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    assert job_id in await pending_ids(h, "bob")
    await _refused_to(h, "carol", job_id)

    assert await fast_forward(h, skipper, job_id, 20 * HOUR)
    await _refused_to(h, "carol", job_id)
    assert "human_input_escalated" not in await event_names(h, job_id)

    assert await fast_forward(h, skipper, job_id, 6 * HOUR)  # a day after the pause
    escalated = _only(await events(h, job_id), "human_input_escalated")
    assert escalated == [{"request_id": f"gate:{job_id}", "added": [carol]}]
    assert job_id in await pending_ids(h, "carol")
    assert job_id in await pending_ids(h, "bob")  # the first approvers stay
    async with h.client("carol") as c:
        r = await c.get(f"/api/v2/workflows/{job_id}")
    assert r.status_code == 200 and r.json()["status"] == "suspended", r.text

    # once: more days change nothing
    assert await fast_forward(h, skipper, job_id, 3 * DAY)
    assert len(_only(await events(h, job_id), "human_input_escalated")) == 1

    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    decision = _only(await events(h, job_id), "human_input_decision")[0]
    assert decision["action_id"] == "approve" and decision["decided_by"] == h.users["carol"][0]
    assert await _output(h, job_id) == "approved"


async def test_escalation_of_an_owner_only_request_keeps_the_owner(world):
    """With no approvers named the run's owner decides; an escalation adds people, it does not
    take the request away from the owner."""
    h, skipper = world
    carol = await name_of(h, "carol")
    flow = await save_flow(h, gate_flow("escalates from the owner", escalate_after=3600, escalate_to=[carol]))
    job = await start_suspended(h, flow)
    job_id = job["job_id"]
    await _refused_to(h, "carol", job_id)
    assert await fast_forward(h, skipper, job_id, 2 * HOUR)
    assert len(_only(await events(h, job_id), "human_input_escalated")) == 1
    assert job_id in await pending_ids(h, "carol")
    assert job_id in await pending_ids(h, "alice")
    r = await resume(h, "alice", job_id, "reject")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert await _output(h, job_id) == "refused"


# ---- replay ----------------------------------------------------------------------------------


async def test_the_timer_paths_replay(world):
    """The histories of runs whose gate timers fired (reminders, an escalation, a deadline that
    applied the default, a deadline that failed the run, a decision while timers were pending)
    replay against the current FlowRun: the timer code is deterministic."""
    h, skipper = world
    carol = await name_of(h, "carol")
    every_timer = await save_flow(h, gate_flow(
        "every timer", timeout={"value": 3, "unit": "Days"}, on_timeout="default", default_action="approve",
        remind_every={"value": 1, "unit": "Days"}, escalate_after={"value": 36, "unit": "Hours"},
        escalate_to=[carol]))
    failing = await save_flow(h, gate_flow("fails", timeout=7200, on_timeout="fail",
                                           remind_every={"value": 1, "unit": "Hours"}))
    answered = await save_flow(h, gate_flow("answered", timeout={"value": 3, "unit": "Days"}, on_timeout="fallback",
                                            enable_fallback=True, remind_every={"value": 1, "unit": "Days"}))
    ids = {}
    ids["default"] = (await start_suspended(h, every_timer))["job_id"]
    await fast_forward(h, skipper, ids["default"], 4 * DAY)
    ids["fail"] = (await start_suspended(h, failing))["job_id"]
    await fast_forward(h, skipper, ids["fail"], 3 * HOUR)
    ids["answered"] = (await start_suspended(h, answered))["job_id"]
    assert await fast_forward(h, skipper, ids["answered"], DAY + HOUR)
    assert (await resume(h, "alice", ids["answered"], "reject")).status_code == 200
    ends = {path: (await h.wait_status(job_id, JobStatus.completed, JobStatus.timed_out)).status.value
            for path, job_id in ids.items()}
    assert ends == {"default": "completed", "fail": "timed_out", "answered": "completed"}
    names = await event_names(h, ids["default"])
    assert names.count("human_input_reminder") == 2 and names.count("human_input_escalated") == 1

    replayer = Replayer(
        workflows=[FlowRun], data_converter=pydantic_data_converter,
        workflow_runner=SandboxedWorkflowRunner(restrictions=STRICT_SANDBOX))
    for path, job_id in ids.items():
        handle = h.service.client.get_workflow_handle(job_id)
        assert (await handle.result())["status"] == ends[path]
        history = await handle.fetch_history()
        assert any(e.timer_started_event_attributes.start_to_fire_timeout.seconds for e in history.events
                   if e.HasField("timer_started_event_attributes")), path
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path}: {result.replay_failure!r}"


async def test_reminders_missed_while_no_worker_ran_are_not_all_sent_at_once(world, monkeypatch):
    """The workers were down for several reminder periods (real time here: a reminder every 1 s,
    4 s without a worker): when one runs again the run sends one reminder for the periods it
    missed, not one each in a burst (to every webhook), then one a period: no two reminders in
    the same period."""
    h, _ = world
    if h.settings.resolved_database_url.startswith("postgres"):
        pytest.skip("the workflow's own timer logic, in real time: one backend is enough")
    every = 1
    monkeypatch.setattr(h.settings, "min_remind_every_seconds", 1)  # below the floor (60 s): real time here
    settings = h.settings.model_copy(update={"task_queue": f"outage-{uuid.uuid4()}"})
    service = RunService(settings, h.store, h.service.client)
    alice = await h.store.get_user(h.users["alice"][0])
    flow = await h.store.get_flow(await save_flow(h, gate_flow("reminds often", remind_every=every)))

    async def reminders(at_least: int) -> list[Any]:
        async def enough():
            found = [e for e in await h.store.read_events(job_id) if e.event == "human_input_reminder"]
            return found if len(found) >= at_least else None

        return await eventually(enough, timeout=30, what=f"{at_least} reminders")

    async with build_worker(h.service.client, h.store, settings):
        job, _ = await service.submit(alice, flow, input_value="refund", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        job_id = job.job_id
        paused = (await h.wait_status(job_id, JobStatus.suspended)).pending.paused_at
        await reminders(1)
    before = len(await reminders(1))
    await asyncio.sleep(4)  # no worker: three periods or more go by
    assert len(await reminders(1)) == before
    async with build_worker(h.service.client, h.store, settings):
        await reminders(before + 3)
        assert (await resume(h, "alice", job_id, "approve")).status_code == 200
        await h.wait_status(job_id, JobStatus.completed)
    found = [e for e in await h.store.read_events(job_id) if e.event == "human_input_reminder"]
    assert [e.data["reminder"] for e in found] == list(range(1, len(found) + 1))
    # when each reminder was sent, in the workflow's time (the gate_timer activities' input)
    history = await h.service.client.get_workflow_handle(job_id).fetch_history()
    sent = [json.loads(a.input.payloads[0].data) for a in (
        e.activity_task_scheduled_event_attributes for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")) if a.activity_type.name == "gate_timer"]
    assert [s["n"] for s in sent] == [e.data["reminder"] for e in found]
    periods = [int((datetime.fromisoformat(s["now"].replace("Z", "+00:00")) - paused).total_seconds() // every)
               for s in sent]
    assert periods == sorted(set(periods)), periods  # one reminder a period at most
