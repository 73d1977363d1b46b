"""A decision whose attempt fails *after* it recorded the decision: the store took the decision's
record, then refused the write after it (here the completion) past the attempt's retries, and
came back. The workflow settles the failed attempt by a look at the store under its token: the
run goes on from the record (the person's decision is not lost, not applied twice), instead of
a rollback that left the job ``suspended`` with its pending request cleared and nobody able to
decide it again."""

from __future__ import annotations

import asyncio

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

from signoff.activities.flow import FlowActivities
from signoff.activities.types import ResumeRunInput, ResumeRunOutput
from signoff.engine.errors import NotResumable, SignoffError
from signoff.engine.models import Decision, JobStatus
from signoff.engine.store.base import StoreError
from signoff.engine.store.proxy import StoreProxy
from signoff.service import RunService
from signoff.worker import build_worker
from signoff.workflows.flow_run import LAYER_RETRY

from tests.helpers import event_names, gate_flow, wait_status
from .test_lost_task import paused
from .test_stop_races import replayer


class Refusing(StoreProxy):
    """The store, refusing the calls of ``method`` (a name, or a tuple of them) that ``which(args)``
    picks, the first ``times`` of them, with ``error`` (by default a retryable error it could not
    take), then itself again."""

    def __init__(self, store, method: str | tuple[str, ...], times: int, which=lambda args: True,
                 error=StoreError) -> None:
        super().__init__(store)
        self.method, self.left, self.which, self.error = method, times, which, error

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args, **kwargs):
            if name in ((self.method,) if isinstance(self.method, str) else self.method) and self.left > 0 \
                    and self.which(args):
                self.left -= 1
                raise self.error(f"{name} could not be written")
            return await inner(*args, **kwargs)

        return call


def scheduled(history) -> list[str]:
    """The regular activities the run scheduled (the decision's own attempts are local)."""
    return [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def test_a_decision_that_failed_after_its_record_goes_on_from_it(client, store, settings, user, make_flow):
    service = RunService(settings, store, client)
    # every attempt of the decision's activity fails at the completion, after the record
    refusing = Refusing(store, "set_status", LAYER_RETRY.maximum_attempts,
                        lambda args: args[1] == JobStatus.completed)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, await make_flow())
        request_id = job.pending.request_id
        await service.resume(user, job.job_id, request_id, Decision(action_id="approve"))
        done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.suspended, timeout=60)
        handle = client.get_workflow_handle(job.job_id)
        assert (await handle.result())["status"] == "completed"
        history = await handle.fetch_history()
    assert refusing.left == 0  # the attempts did fail: the store refused each one's completion
    assert done.status == JobStatus.completed
    assert done.result["output"]["text"] == "Refund sent"
    # the decision once, the end once: the settling went on from the record, applied nothing twice
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
    decided = [e for e in await store.read_events(job.job_id) if e.event == "human_input_decision"][0]
    assert decided.data["action_id"] == "approve" and decided.data["request_id"] == request_id
    assert scheduled(history) == ["run_layer", "resume_run"]  # the look at the store, no rollback
    await replayer().replay_workflow(history)


async def test_a_decision_that_failed_before_its_record_is_let_go_and_decided_again(client, store, settings, user,
                                                                                  make_flow):
    """An attempt that fails before it records anything has its claim let go of by the same
    look: the job waits as it was, its request pending, and the next decision is applied."""
    service = RunService(settings, store, client)
    refusing = Refusing(store, "record_decision", LAYER_RETRY.maximum_attempts)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, await make_flow())
        request_id = job.pending.request_id
        with pytest.raises(SignoffError) as failed:
            await service.resume(user, job.job_id, request_id, Decision(action_id="approve"))
        assert "Applying the decision failed" in str(failed.value)
        waiting = await store.get_job(job.job_id)
        assert waiting.status == JobStatus.suspended and waiting.pending.request_id == request_id
        await service.resume(user, job.job_id, request_id, Decision(action_id="reject"))
        done = await wait_status(store, job.job_id, JobStatus.completed, timeout=60)
        history = await client.get_workflow_handle(job.job_id).fetch_history()
    assert refusing.left == 0
    assert scheduled(history) == ["run_layer", "resume_run"]  # the look let the claim go: no rollback
    assert done.result["output"]["text"] == "Refund refused"  # the second decision was the one applied
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
    await replayer().replay_workflow(history)



async def test_a_recorded_decision_that_cannot_be_carried_on_fails_the_run(client, store, settings, user, make_flow):
    """The write after the record fails for good (not retryable), for the attempt and for the
    look at the store after it: the claim is not rolled back (the store refuses to roll back a
    recorded decision: the job would wait for no request, and nobody could decide it), the run
    fails with the error, the decision kept."""
    service = RunService(settings, store, client)
    refusing = Refusing(store, "set_status", 2, lambda args: args[1] == JobStatus.completed, error=NotResumable)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, await make_flow())
        resumed = await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        assert resumed.status == "resuming"  # the decision was taken (and recorded)
        failed = await wait_status(store, job.job_id, JobStatus.failed, JobStatus.suspended, timeout=60)
        handle = client.get_workflow_handle(job.job_id)
        assert (await handle.result())["status"] == "failed"
        history = await handle.fetch_history()
    assert refusing.left == 0
    assert failed.status == JobStatus.failed and failed.pending is None
    assert "set_status could not be written" in failed.error["error"]
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "run_failed"]
    assert scheduled(history) == ["run_layer", "resume_run", "rollback_resume", "finish"]
    await replayer().replay_workflow(history)


async def test_a_failed_decision_whose_look_fails_before_any_claim_leaves_the_run_waiting(
        client, store, settings, user, make_flow):
    """The store cannot answer the attempt's claim nor the look after it: nothing was claimed,
    nothing recorded. The rollback finds nothing of the claim's to undo, and that is not taken for
    a recorded decision: the run is not failed, it waits for its request as it was. (The
    attempt's claim rides in its record_decision when the job it read waits for the request,
    issue 33: that write is refused first, then the look.)"""
    service = RunService(settings, store, client)
    refusing = Refusing(store, ("record_decision", "claim_decision"), 2, error=NotResumable)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, await make_flow())
        with pytest.raises(SignoffError):
            await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        assert refusing.left == 0
        waiting = await store.get_job(job.job_id)
        assert waiting.status == JobStatus.suspended and waiting.pending.request_id == job.pending.request_id
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        done = await wait_status(store, job.job_id, JobStatus.completed, timeout=60)
        history = await client.get_workflow_handle(job.job_id).fetch_history()
    assert done.result["output"]["text"] == "Refund sent"
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
    await replayer().replay_workflow(history)


@pytest.mark.parametrize("held", ["attempt", "look"])
async def test_a_stop_while_a_deadlines_decision_is_applied_or_settled_stops_the_run(client, store, settings, user,
                                                                                     make_flow, held):
    """The run is stopped while the deadline's own decision (``on_timeout: default``, applied in
    the run's own task) is being applied (``attempt``), or, that attempt failed, while the look at
    the store that settles it runs (``look``): the cancellation is a stop, not a failed decision
    the deadline passes over (the run waited on at its gate, its job already cancelled)."""
    service = RunService(settings, store, client)
    real = FlowActivities(store, settings)
    holding, release = asyncio.Event(), asyncio.Event()

    @activity.defn(name="resume_run")
    async def resume_run(inp: ResumeRunInput) -> ResumeRunOutput:
        if held == "look" and not inp.probe:
            raise ApplicationError("applying the decision failed", type="DECISION_FAILED", non_retryable=True)
        if (held == "look") == inp.probe and not holding.is_set():
            holding.set()  # held until the stop cancels it (a local attempt) or the test is over (the look)
            await asyncio.wait_for(release.wait(), 30)
        return await real.resume_run(inp)

    acts = [resume_run if getattr(a, "__name__", "") == "resume_run" else a for a in real.all()]
    try:
        async with build_worker(client, store, settings, activities=acts):
            job = await paused(service, user, await make_flow(gate_flow("default at the deadline", timeout=1,
                                                                        on_timeout="default",
                                                                        default_action="reject")))
            await asyncio.wait_for(holding.wait(), 30)
            assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled
            handle = client.get_workflow_handle(job.job_id)
            with pytest.raises(WorkflowFailureError) as stopped:
                await asyncio.wait_for(handle.result(), 30)
            assert isinstance(stopped.value.cause, CancelledError)
            release.set()
            history = await handle.fetch_history()
    finally:
        release.set()
    assert (await store.get_job(job.job_id)).status == JobStatus.cancelled
    await replayer().replay_workflow(history)
