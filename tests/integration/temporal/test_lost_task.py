"""A decision applied by a workflow task that is then lost (docs/temporal.md, "Round trips per
run"): the decision is a local activity, so its store writes happen inside the workflow task
that took the Update, and that task can be lost after them (Temporal drops a speculative task,
a worker dies before completing it). Temporal then delivers the run's Updates again, maybe in
another order, and the activity runs again. The run must go on from the decision the store
recorded, exactly once, with nothing built twice, and the Update whose decision it was must get
its answer.

A worker interceptor loses a task for real: the first time a decision's local activity resolves
(not on replay), the workflow code raises, which fails the workflow task; Temporal retries it on
a history without that task's events, so the activity runs again."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError
import temporalio.activity
import temporalio.worker
from temporalio.exceptions import ApplicationError

from signoff.activities.flow import FlowActivities
from signoff.activities.types import GateTimerInput, GateTimerOutput, ResumeRunInput, ResumeRunOutput
from signoff.engine.models import Decision, JobStatus, utcnow
from signoff.engine.store.proxy import StoreProxy
from signoff.service import RunService
from signoff.worker import build_worker
from signoff.workflows.flow_run import CATCH_UP_RETRY, MAX_CATCH_UPS
from signoff.workflows.types import CATCH_UP, ResumeInput
from tests.helpers import event_names, gate_flow, wait_status
from .test_resume_retry import TWO_GATES
from .test_stop_races import replayer
from .test_surface import submit


class LoseTheDecisionTask(temporalio.worker.Interceptor):
    """Fails the workflow task in which a decision's local activity (``resume_run``) first
    resolves, once per run, after its store writes."""

    def __init__(self) -> None:
        self.lost: set[str] = set()

    def workflow_interceptor_class(self, input: Any) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        lost = self.lost

        class Outbound(temporalio.worker.WorkflowOutboundInterceptor):
            def start_local_activity(self, input: temporalio.worker.StartLocalActivityInput) -> Any:
                handle = self.next.start_local_activity(input)
                run_id = workflow.info().run_id
                if input.activity != "resume_run" or run_id in lost or workflow.unsafe.is_replaying():
                    return handle

                async def lose_the_task() -> Any:
                    await handle
                    lost.add(run_id)
                    raise RuntimeError("test: this workflow task is lost after the decision's writes")

                return asyncio.ensure_future(lose_the_task())

        class Inbound(temporalio.worker.WorkflowInboundInterceptor):
            def init(self, outbound: temporalio.worker.WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


@pytest.fixture
def loser() -> LoseTheDecisionTask:
    return LoseTheDecisionTask()


@pytest.fixture
async def lossy_worker(client, store, settings, loser):
    async with build_worker(client, store, settings, interceptors=[loser]):
        yield


async def failed_tasks(service, job_id: str) -> int:
    history = await service.client.get_workflow_handle(job_id).fetch_history()
    return sum(ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for ev in history.events)


async def paused(service, user, flow):
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    return job


FLOWS = {
    # the decision's activity ends the run: the task is lost after the completion was written
    "ends": None,
    # the decision's activity leaves the run running (the next layer dials out): built again from
    # the record, the call made once
    "goes_on": lambda url: {
        "name": "gate then call",
        "nodes": [{"id": "ask", "type": "ChatInput"},
                  {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
                  {"id": "call", "type": "HTTPRequest", "params": {"url": f"{url}/after", "method": "POST"}},
                  {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "call.body"},
                  {"from": "call.response", "to": "out.input_value"}]},
    # the decision's activity takes the run to its next gate (the pause persisted)
    "next_gate": lambda url: TWO_GATES,
}


@pytest.mark.parametrize("shape", list(FLOWS))
async def test_a_decision_whose_task_was_lost_is_applied_once_and_answered(
        lossy_worker, loser, service, store, user, make_flow, http_counter, shape):
    spec = FLOWS[shape]
    job = await paused(service, user, await make_flow(spec(http_counter.url) if spec else None))
    resumed = await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    assert resumed.status == "resuming"  # the Update got its answer from the task that ran again
    assert await failed_tasks(service, job.job_id) == 1 and len(loser.lost) == 1  # a task was lost for real
    if shape == "next_gate":
        job = await wait_status(store, job.job_id, JobStatus.suspended)
        assert job.pending.request_id.startswith("g2:")
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    await service.client.get_workflow_handle(job.job_id).result()
    names = await event_names(store, job.job_id)
    assert names.count("human_input_decision") == (2 if shape == "next_gate" else 1)
    assert names.count("end") == 1 and names[-1] == "end"
    if shape == "goes_on":
        assert http_counter.counts["/after"] == 1  # the layer after the decision ran once
        assert "seen /after" in done.result["output"]["text"]
    if shape == "next_gate":
        assert names.count("human_input_required") == 2  # the second pause persisted once
        assert done.result["output"]["text"] == "both approved"


async def test_updates_racing_a_lost_task_the_one_applied_is_the_one_answered(
        lossy_worker, loser, service, store, user, make_flow):
    """Several Updates at once; the task that applied the first is lost; whichever Update the
    workflow takes first when the task runs again, the run goes on from the decision the store
    recorded and only the Update that sent it is answered with success."""
    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    ids = [f"u-{uuid.uuid4()}" for _ in range(6)]

    async def one(update_id: str, action: str) -> bool:
        arg = ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id=action), decided_by=user.id)
        try:
            await handle.execute_update("resume", arg, id=update_id)
            return True
        except (WorkflowUpdateFailedError, RPCError):
            return False

    outcomes = await asyncio.gather(*(one(u, "approve" if i % 2 else "reject") for i, u in enumerate(ids)))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    await handle.result()
    decisions = [e for e in await store.read_events(job.job_id) if e.event == "human_input_decision"]
    assert len(decisions) == 1 and len(loser.lost) == 1
    winner = ids.index(decisions[0].data["update_id"])
    assert outcomes == [i == winner for i in range(len(ids))]  # the one applied, and only it, succeeded
    expected = "Refund sent" if decisions[0].data["action_id"] == "approve" else "Refund refused"
    assert done.result["output"]["text"] == expected


async def test_the_update_taken_first_after_a_lost_task_yields_to_the_decision_recorded(
        worker, service, store, user, make_flow):
    """The exact state a lost task leaves when Temporal then hands the workflow another Update
    first, made by hand: the run's first decision attempt (its claim token) claimed the job and
    recorded the decision of Update ``u-lost``, then its task was lost. Update ``u-other`` comes:
    it is refused as second, the run goes on from ``u-lost``'s decision (reject), and ``u-lost``,
    when it comes again, gets its answer: the run waits for it before it closes."""
    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    token = f"wf-{(await handle.describe()).run_id}-d0"  # the first attempt's (workflows/flow_run.py: _claim_token)
    assert (await store.claim_decision(job.job_id, job.pending.request_id, token)).won
    lost = {"request_id": job.pending.request_id, "action_id": "reject", "values": None, "decided_by": user.id,
            "decided_at": job.pending.paused_at.isoformat(), "via": "api", "client_identity": None,
            "update_id": "u-lost"}
    assert await store.record_decision(job.job_id, [("human_input_decision", lost, f"{token}:decision")],
                                       token=token, request_id=job.pending.request_id, action_id="reject",
                                       participants=[user.id]) == [2]
    arg = ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id="approve"), decided_by=user.id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("resume", arg, id="u-other")
    assert "Another decision was applied first" in str(refused.value.cause)
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "Refund refused"  # u-lost's decision, not u-other's
    answer = await handle.execute_update("resume", arg.model_copy(update={"decision": Decision(action_id="reject")}),
                                         id="u-lost")
    assert answer["status"] == "resuming" and answer["action_id"] == "reject"
    await handle.result()
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 1


# ---- found by a hostile review of the above --------------------------------------------------

class FailOnce(StoreProxy):
    """The store, with ``method`` raising once (a transient fault, or the worker dying there)
    when ``when(args, kwargs)`` holds."""

    def __init__(self, store: Any, method: str, when=lambda a, k: True) -> None:
        super().__init__(store)
        self.method, self.when, self.fired = method, when, 0

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if name == self.method and not self.fired and self.when(args, kwargs):
                self.fired += 1
                raise RuntimeError(f"test: {name} failed once")
            return await inner(*args, **kwargs)

        return call


async def test_an_attempt_run_again_after_the_next_gate_was_saved_persists_that_gate(
        client, store, settings, service, user, make_flow):
    """The decision on g1 recorded, g2 built and its checkpoint saved, then the attempt failed
    before g2's pause was persisted. Run again, the attempt must persist g2's pause, never
    apply g1's decision to g2 (which then passed with nobody deciding it)."""
    faulty = FailOnce(store, "mark_suspended", lambda a, k: a[1].request_id.startswith("g2:"))
    async with build_worker(client, faulty, settings):
        job = await paused(service, user, await make_flow(TWO_GATES))
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
        assert faulty.fired == 1
        assert job.status == JobStatus.suspended and job.pending.request_id.startswith("g2:")
        assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision",
                                                       "human_input_required"]
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        done = await wait_status(store, job.job_id, JobStatus.completed)
        assert done.result["output"]["text"] == "both approved"


class Before(StoreProxy):
    """The store, awaiting ``hooks[name](args, kwargs)`` before the calls of that name."""

    def __init__(self, store: Any, hooks: dict) -> None:
        super().__init__(store)
        self.hooks = hooks

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if name in self.hooks:
                await self.hooks[name](args, kwargs)
            return await inner(*args, **kwargs)

        return call


async def test_two_runs_of_one_attempt_go_on_from_the_one_decision_recorded(
        worker, store, settings, service, user, make_flow):
    """A lost task's local activity (Update A, approve) is still running when the attempt runs
    again for Update B (reject): both hold the attempt's claim. B records first; A's record then
    writes nothing, and A must go on from B's decision, not build its own (the log said reject
    and the run approved). A's claim rides in its record (issue 33: the job it read waits for
    the request), so B claims and records first, and A's write finds the token's claim held and
    every key used."""
    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    token = f"wf-{(await handle.describe()).run_id}-d0"
    a_waits = asyncio.Event()

    async def once_b_recorded(args, kwargs):
        a_waits.set()
        await eventually_async(lambda: any_decision(store, job.job_id), what="B's decision recorded")

    stalled = FlowActivities(Before(store, {"record_decision": once_b_recorded}), settings)
    a = asyncio.ensure_future(stalled.resume_run(ResumeRunInput(
        job_id=job.job_id, token=token, request_id=job.pending.request_id, decision=Decision(action_id="approve"),
        decided_by=user.id, now=utcnow(), update_id="u-A", client_identity="", persist=True)))
    await asyncio.wait_for(a_waits.wait(), 30)  # A applied the decision, and waits before its record
    b = await handle.execute_update("resume", ResumeInput(request_id=job.pending.request_id,
                                                          decision=Decision(action_id="reject"),
                                                          decided_by=user.id), id="u-B")
    out_a = await asyncio.wait_for(a, 30)
    done = await wait_status(store, job.job_id, JobStatus.completed)
    await handle.result()
    assert b["action_id"] == "reject" and (out_a.update_id, out_a.action_id) == ("u-B", "reject")
    decisions = [e.data for e in await store.read_events(job.job_id) if e.event == "human_input_decision"]
    assert [(d["action_id"], d["update_id"]) for d in decisions] == [("reject", "u-B")]
    assert done.result["output"]["text"] == "Refund refused"  # what was recorded is what ran


async def any_decision(store, job_id: str) -> bool:
    return any(e.event == "human_input_decision" for e in await store.read_events(job_id))


async def eventually_async(check, *, what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def lost_attempt(store, settings, service, job, user, flow_action: str = "approve"):
    """What a decision's local activity leaves when its workflow task is lost with its Update and
    the Update never comes again (the API gave up; the server lost it with its in-memory
    registry): the real activity run under the run's first attempt's token, the workflow never
    told."""
    token = f"wf-{(await service.client.get_workflow_handle(job.job_id).describe()).run_id}-d0"
    out = await FlowActivities(store, settings).resume_run(ResumeRunInput(
        job_id=job.job_id, token=token, request_id=job.pending.request_id, decision=Decision(action_id=flow_action),
        decided_by=user.id, now=utcnow(), update_id="u-lost", client_identity="", persist=True))
    assert out.claimed
    return out


async def test_a_run_whose_lost_decision_never_comes_again_goes_on_at_its_maximum_suspension(
        client, store, settings, worker, user, make_flow, http_counter):
    """The lost attempt left the job running after its decision (the next layer dials out), and
    nobody sends it again. At the maximum suspension the end loses to that claim: the workflow
    catches up with the store and the run goes on from the decision (it waited on, with no
    timer at all, before)."""
    service = RunService(settings.model_copy(update={"max_suspend_seconds": 2}), store, client)
    job = await paused(service, user, await make_flow(FLOWS["goes_on"](http_counter.url)))
    out = await lost_attempt(store, settings, service, job, user)
    assert out.out is not None and out.out.pending is None and not out.out.done  # running, the call next
    done = await wait_status(store, job.job_id, JobStatus.completed, timeout=60)
    await service.client.get_workflow_handle(job.job_id).result()
    assert http_counter.counts["/after"] == 1
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 1
    assert "seen /after" in done.result["output"]["text"]


def timers(history) -> list[float]:
    return [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]


async def test_a_claim_left_with_nothing_recorded_does_not_hold_off_the_maximum_suspension(
        client, store, settings, worker, user, make_flow):
    """The lost attempt claimed the job under the run's token and died before recording a
    decision. At the maximum suspension the end loses to that claim; the catch-up lets go of it
    and the run ends at once, not a retry period (CATCH_UP_RETRY) later."""
    service = RunService(settings.model_copy(update={"max_suspend_seconds": 2}), store, client)
    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    token = f"wf-{(await handle.describe()).run_id}-d0"
    assert await store.claim_suspended_for_resume(job.job_id, job.pending.request_id, token=token)
    await wait_status(store, job.job_id, JobStatus.timed_out, timeout=CATCH_UP_RETRY.total_seconds() - 10)
    assert (await handle.result())["status"] == "timed_out"
    assert CATCH_UP_RETRY.total_seconds() not in timers(await handle.fetch_history())


async def test_a_claim_that_gets_in_after_a_failing_deadline_expired_the_request_does_not_hang_the_run(
        client, store, settings, user, make_flow):
    """A gate's deadline with ``on_timeout: fail``: the request expired (``human_input_expired``),
    and before the end is written a claim the workflow did not make gets in (a lost attempt under
    the run's first token, with nothing recorded). The end loses to it and catches up while the
    deadline holds the run's decision lock: the catch-up runs under that lock (it waited for the
    lock for good before: the lock is not re-entrant, and the run never ended)."""
    service = RunService(settings, store, client)
    real = FlowActivities(store, settings)

    @temporalio.activity.defn(name="gate_timer")
    async def gate_timer(inp: GateTimerInput) -> GateTimerOutput:
        out = await real.gate_timer(inp)
        if inp.kind == "expired":  # the claim gets in between the expiry and the end
            run_id = (await service.client.get_workflow_handle(inp.job_id).describe()).run_id
            assert await store.claim_suspended_for_resume(inp.job_id, inp.request_id, token=f"wf-{run_id}-d0")
        return out

    acts = [gate_timer if getattr(a, "__name__", "") == "gate_timer" else a for a in real.all()]
    async with build_worker(client, store, settings, activities=acts):
        job = await paused(service, user, await make_flow(gate_flow("fails at its deadline", timeout=1,
                                                                    on_timeout="fail")))
        handle = service.client.get_workflow_handle(job.job_id)
        ended = await wait_status(store, job.job_id, JobStatus.timed_out, timeout=30)
        assert (await asyncio.wait_for(handle.result(), 30))["status"] == "timed_out"
        history = await handle.fetch_history()
    assert ended.pending is None
    assert (await event_names(store, job.job_id))[-2:] == ["human_input_expired", "run_timed_out"]
    await replayer().replay_workflow(history)


async def test_a_claim_left_with_nothing_recorded_does_not_hold_off_a_deadline_that_fails_the_run(
        client, store, settings, worker, user, make_flow):
    """A lost attempt claimed the job and recorded nothing; the gate's deadline (``on_timeout:
    fail``) finds the request not waiting. It catches up (the claim let go of) and expires the
    request: the run ends at its deadline, not at the maximum suspension (30 days)."""
    service = RunService(settings, store, client)
    job = await paused(service, user, await make_flow(gate_flow("fails at its deadline", timeout=2,
                                                                on_timeout="fail")))
    handle = service.client.get_workflow_handle(job.job_id)
    token = f"wf-{(await handle.describe()).run_id}-d0"
    assert await store.claim_suspended_for_resume(job.job_id, job.pending.request_id, token=token)
    ended = await wait_status(store, job.job_id, JobStatus.timed_out, timeout=30)
    assert (await asyncio.wait_for(handle.result(), 30))["status"] == "timed_out"
    assert ended.pending is None
    assert (await event_names(store, job.job_id))[-2:] == ["human_input_expired", "run_timed_out"]
    await replayer().replay_workflow(await handle.fetch_history())


class FailingLook:
    """The store cannot be read for a catch-up's look (it fails past its retries); the first
    time, the claim that held off the run's end is let go of meanwhile."""

    def __init__(self, real: FlowActivities, store, foreign: str) -> None:
        self.real, self.store, self.foreign, self.looks = real, store, foreign, 0

    @temporalio.activity.defn(name="resume_run")
    async def resume_run(self, inp: ResumeRunInput) -> ResumeRunOutput:
        if not inp.probe:
            return await self.real.resume_run(inp)
        self.looks += 1
        await self.store.rollback_resume_claim(inp.job_id, self.foreign)
        raise ApplicationError("test: the store is out", type="STORE_UNAVAILABLE", non_retryable=True)


async def test_a_catch_up_that_cannot_read_the_store_does_not_fail_the_run(
        client, store, settings, user, make_flow):
    """At the maximum suspension the end loses to a claim the workflow did not make, and its
    catch-up's look at the store fails for good: the run waits on and ends when it can (it
    failed as a whole, with the look's failure, before)."""
    settings = settings.model_copy(update={"max_suspend_seconds": 2})
    service = RunService(settings, store, client)
    real = FlowActivities(store, settings)
    look = FailingLook(real, store, foreign="someone-else")
    acts = [look.resume_run if a.__name__ == "resume_run" else a for a in real.all()]
    async with build_worker(client, store, settings, activities=acts):
        job = await paused(service, user, await make_flow())
        assert await store.claim_suspended_for_resume(job.job_id, job.pending.request_id, token="someone-else")
        await wait_status(store, job.job_id, JobStatus.timed_out, timeout=CATCH_UP_RETRY.total_seconds() - 10)
        assert (await service.client.get_workflow_handle(job.job_id).result())["status"] == "timed_out"
    assert look.looks == 1


async def test_a_decision_on_the_gate_the_store_shows_catches_the_run_up(worker, service, store, user, make_flow):
    """The lost attempt took the run to its next gate (persisted: the job waits for g2) while
    the workflow still waits for g1's decision. The owner answers g2, as the API shows it: the
    workflow catches up with the store (catch_up) and takes the decision, not a 409."""
    job = await paused(service, user, await make_flow(TWO_GATES))
    await lost_attempt(store, settings=service.settings, service=service, job=job, user=user)
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id.startswith("g2:")
    resumed = await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    assert resumed.status == "resuming"
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "both approved"
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 2


async def test_refusals_before_a_claim_cost_no_rollback_and_catch_ups_are_bounded(
        worker, service, store, user, make_flow):
    """Updates that name a person who may not decide are refused by the decision's activity
    before it claims anything: answered as refusals, with no rollback activity (each scheduled
    one grew the run's history, and a hostile Temporal client could send many). Catch-up Updates
    are let in MAX_CATCH_UPS times per request, then refused without history."""
    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    arg = ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id="approve"), user="nobody")
    for _ in range(3):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("resume", arg, id=f"h-{uuid.uuid4()}")
        assert refused.value.cause.type == "NOT_AN_APPROVER"
    for _ in range(MAX_CATCH_UPS):
        assert await handle.execute_update(CATCH_UP) is False  # nothing to catch up with
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(CATCH_UP)
    history = (await handle.fetch_history()).events
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert "rollback_resume" not in scheduled
    accepted = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in history)
    assert accepted == 3 + MAX_CATCH_UPS
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, job.job_id, JobStatus.completed)


async def test_an_attempt_that_reads_the_run_going_on_after_the_decision_and_finds_it_ended_reports_the_end(
        worker, store, settings, service, user, make_flow):
    """The race the test above can meet (a landing-check CI did): A's record reads the job still
    running after B's decision, then B's run ends and its end drops the checkpoint before A looks
    for it. A, without the workflow's copy of the state, must report the end B reached (B's
    decision, the run done), not fail with "the checkpoint is gone". Made certain here: the claim
    as A's record read it (the job running) is handed to A once the run has ended."""
    from signoff.engine.models import DecisionClaim

    job = await paused(service, user, await make_flow())
    handle = service.client.get_workflow_handle(job.job_id)
    token = f"wf-{(await handle.describe()).run_id}-d0"
    b = await handle.execute_update("resume", ResumeInput(request_id=job.pending.request_id,
                                                          decision=Decision(action_id="reject"),
                                                          decided_by=user.id), id="u-B")
    assert b["action_id"] == "reject"
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert await store.load_latest_checkpoint(done.run_id) is None  # the end dropped it
    decided = next(e for e in await store.read_events(job.job_id) if e.event == "human_input_decision")
    running = done.model_copy(update={"status": JobStatus.in_progress})  # as A's record read it
    out = await FlowActivities(store, settings)._go_on_from(
        ResumeRunInput(job_id=job.job_id, token=token, request_id=job.pending.request_id,
                       decision=Decision(action_id="approve"), decided_by=user.id, now=utcnow(), update_id="u-A",
                       client_identity="", persist=True),
        DecisionClaim(won=True, job=running, recorded={"decision": decided}))
    assert (out.claimed, out.update_id, out.action_id) == (True, "u-B", "reject")
    assert out.out is not None and out.out.done and out.out.status == JobStatus.completed.value
    assert [e.data["update_id"] for e in await store.read_events(job.job_id)
            if e.event == "human_input_decision"] == ["u-B"]
