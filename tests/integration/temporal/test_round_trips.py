"""Round trips per run, counted in the workflow's history (issue 14, docs/temporal.md "Round
trips per run"): every workflow task and every activity on the way to the pause and to the end
costs a trip through the server, so their number is a property of the code, checked here
exactly. A change that adds one fails this test; one that removes one updates it (and the doc).

The refund flow (ChatInput → HumanInput → ChatOutput) reaches its pause in one activity (the
first layer's, which builds the instant layers that follow and persists the pause) and ends in
the workflow task that takes the decision's Update: the decision is a local activity run in that
task (it builds the ChatOutput layer and records the completion), so the Update is answered and
the workflow completed with no activity dispatch and no second task."""

from __future__ import annotations

import json
import uuid

import pytest

from temporalio.api.enums.v1 import EventType

from signoff.engine.models import Decision, JobStatus
from signoff.workflows.types import PENDING_QUERY
from tests.helpers import CountingStore, eventually, wait_status

ACTIVITY = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
TASK = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
UPDATE = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


async def counts(client, job_id: str) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """Workflow tasks, activities and local activities before the decision's Update and after
    it, and the (local) activities' names in order."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    before, after, names = ({"tasks": 0, "activities": 0, "local": 0}, {"tasks": 0, "activities": 0, "local": 0},
                            [])
    part = before
    for ev in history.events:
        if ev.event_type == UPDATE:  # accepted by the task just completed: the first of the decision's
            part = after
            before["tasks"] -= 1
            after["tasks"] += 1
        elif ev.event_type == TASK:
            part["tasks"] += 1
        elif ev.event_type == ACTIVITY:
            part["activities"] += 1
            names.append(ev.activity_task_scheduled_event_attributes.activity_type.name)
        elif ev.event_type == MARKER and ev.marker_recorded_event_attributes.marker_name == "core_local_activity":
            part["local"] += 1
            data = json.loads(ev.marker_recorded_event_attributes.details["data"].payloads[0].data)
            names.append("local:" + data["activity_type"])
    return before, after, names


def assert_trips(before: dict[str, int], after: dict[str, int]) -> None:
    assert (before["activities"], before["local"]) == (1, 0) and (after["activities"], after["local"]) == (0, 1)
    assert (before["tasks"], after["tasks"]) == (2, 1)


async def paused(client, store, job_id: str):
    """The job suspended, and its workflow waiting at the gate (it took the layer's result). The
    store shows the pause a moment before: a decision sent then may reach the server while the
    layer's result is still on its way, and then the tasks are split otherwise (the Update
    accepted while the layer runs and held until its result: one task fewer before the decision,
    one more after it), a race the counts here are not about."""
    job = await wait_status(store, job_id, JobStatus.suspended)
    await eventually(lambda: client.get_workflow_handle(job_id).query(PENDING_QUERY), what="the workflow waiting")
    return job


async def test_the_refund_flow_pauses_in_one_activity_and_ends_in_one_more(worker, client, service, store, user,
                                                                          make_flow):
    job, _ = await service.submit(user, await make_flow(), input_value="refund 42", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await paused(client, store, job.job_id)
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, job.job_id, JobStatus.completed)
    await client.get_workflow_handle(job.job_id).result()
    before, after, names = await counts(client, job.job_id)
    assert names == ["run_layer", "local:resume_run"]
    # to the pause: the first task (schedules the layer), the task that takes its result and waits;
    # to the end: the Update's task, which accepts it, runs the decision as a local activity,
    # completes the Update and the workflow.
    assert_trips(before, after)


async def test_instant_layers_around_the_gate_cost_no_activity_of_their_own(worker, client, service, store, user,
                                                                            make_flow):
    flow = {
        "name": "Prompted refund",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "p1", "type": "Prompt", "params": {"template": "Refund {q}?"}},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "p2", "type": "Prompt", "params": {"template": "Sent: {a}"}},
            {"id": "ok", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "p1.q"},
            {"from": "p1.prompt", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "p2.a"},
            {"from": "p2.prompt", "to": "ok.input_value"},
        ],
    }
    job, _ = await service.submit(user, await make_flow(flow), input_value="42", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await paused(client, store, job.job_id)
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert "Sent:" in str(done.result)
    await client.get_workflow_handle(job.job_id).result()
    before, after, names = await counts(client, job.job_id)
    assert names == ["run_layer", "local:resume_run"]
    assert_trips(before, after)


async def test_a_decision_costs_the_service_one_store_call_and_the_worker_two(client, store, settings, user,
                                                                            make_flow):
    """Issue 33, store calls per decision through the real parts (Temporal, the worker, the
    store), counted by name: the service's check reads the job and its flow in one call and
    seals the job into the carried check; the worker takes that job and the workflow's copy of
    the pause's state (no job or checkpoint read), claims and records in one write, completes the
    run in one more; the Update's answer carries the run's result, so nothing is read after it.
    (The API key's read is the HTTP layer's, before the service: 4 in all, bench/resume_profile.py.)"""
    from signoff.service.runs import RunService
    from signoff.worker import build_worker


    counting = CountingStore(store)
    service = RunService(settings, counting, client)
    flow = await make_flow()
    async with build_worker(client, counting, settings):
        for _ in range(2):  # the first makes what is made once (the deployment's keys...)
            job, _ = await service.submit(user, flow, input_value="refund 42", session_id=None, tweaks=None,
                                          idempotency_key=None, mode="background")
            job = await paused(client, store, job.job_id)
            counting.calls.clear()
            resumed = await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
            calls = list(counting.calls)
            await client.get_workflow_handle(job.job_id).result()
    assert sorted(calls) == ["get_job_with_flow", "record_decision", "set_status"], calls
    done = await store.get_job(job.job_id)
    assert done.status == JobStatus.completed
    assert resumed.completed is not None and resumed.completed.status == JobStatus.completed
    assert resumed.completed.result == done.result and resumed.completed.job_id == job.job_id


async def counted_submit(client, store, settings, flow, submit):
    """``submit(service, flow)`` run twice through a worker on a CountingStore (the first makes
    what is made once: the deployment's keys...): the second's job, its store calls by name and
    the commits it made (engine/store/counters.py)."""
    from signoff.engine.store import counters
    from signoff.service.runs import RunService
    from signoff.worker import build_worker

    counting = CountingStore(store)
    service = RunService(settings, counting, client)
    async with build_worker(client, counting, settings):
        for _ in range(2):
            counting.calls.clear()
            commits = counters.COUNTS["commit"]
            job = await submit(service, flow)
            calls, commits = list(counting.calls), counters.COUNTS["commit"] - commits
    return job, calls, commits


@pytest.mark.both_stores
async def test_a_submit_to_its_pause_is_four_store_calls_and_three_commits(client, store, settings, user, make_flow):
    """Issue 33, a submit's pause in one write, through the real parts (Temporal, the worker, the
    store), counted by name and by the store's own counters (engine/store/counters.py): the
    service creates the job (a commit), whose transaction checks the user's stored bytes and
    reads the runs it supersedes (before: two reads of their own); the worker reads the job with its flow, starts the run (``in_progress`` with its
    root span: a commit) and persists the pause with its checkpoint, the User's message and the
    card, its event and its spans (``mark_suspended``: a commit), which reads the webhooks its
    event goes to in the same transaction. (The API key's and the flow's reads are the HTTP layer's, before the service,
    and a sync submit's reads of the job while it waits: bench/resume_profile.py.) Before: 14
    calls here, 7 commits; then 6."""
    async def submit(service, flow):
        job, _ = await service.submit(user, flow, input_value="refund 42", session_id=f"s-{uuid.uuid4()}",
                                      tweaks=None, idempotency_key=None, mode="background")  # none superseded
        return await paused(client, store, job.job_id)

    flow = await make_flow()
    job, calls, commits = await counted_submit(client, store, settings, flow, submit)
    assert sorted(calls) == ["create_job", "get_job_with_flow", "mark_suspended", "set_status"], calls
    assert commits == 3
    # what the one write carried is all there: the checkpoint, the User's message and the card,
    # the event, the trace so far
    assert (await store.load_latest_checkpoint(job.run_id)).data["pending"]["request_id"] == job.pending.request_id
    said = await store.list_messages(job.effective_session)
    assert [m.sender for m in said] == ["User", "Machine"] and said[0].text == "refund 42"
    assert said[1].card["request_id"] == job.pending.request_id
    assert [e.event for e in await store.read_events(job.job_id)] == ["human_input_required"]
    trace = await store.get_trace(job.run_id)  # the root, provisional (running), and the ChatInput's
    assert sorted((s.type, s.name) for s in trace) == [("component", "Chat Input"), ("flow", flow.name)]
    assert [s.end_time for s in trace if s.type == "flow"] == [None]


@pytest.mark.both_stores
async def test_a_sync_submit_reads_its_job_once_while_it_waits_for_the_pause(client, store, settings, user, make_flow):
    """Issue 33: a sync submit follows its new job's events from before the run can start (the
    job's id chosen first), so it reads the job only when its pause is told, not once more on
    the way in (the job it just created). The answer is the job at its pause, as before."""
    async def submit(service, flow):
        return await service.submit_sync(user, flow, timeout=30, input_value="refund 42",
                                          session_id=f"s-{uuid.uuid4()}", tweaks=None, idempotency_key=None)

    job, calls, _ = await counted_submit(client, store, settings, await make_flow(), submit)
    assert job.status == JobStatus.suspended and job.pending is not None
    assert sorted(calls) == ["create_job", "get_job", "get_job_with_flow", "mark_suspended", "set_status"], calls
