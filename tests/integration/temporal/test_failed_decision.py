"""A decision whose attempt fails *after* it recorded the decision: the store took the decision's
record, then refused the write after it (here the completion) past the attempt's retries, and
came back. The workflow settles the failed attempt by a look at the store under its token: the
run goes on from the record (the person's decision is not lost, not applied twice), instead of
a rollback that left the job ``suspended`` with its pending request cleared and nobody able to
decide it again."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType

from signoff.activities.flow import FlowActivities
from signoff.engine.errors import SignoffError
from signoff.engine.models import Decision, JobStatus
from signoff.engine.store.base import StoreError
from signoff.engine.store.proxy import StoreProxy
from signoff.service import RunService
from signoff.worker import build_worker
from signoff.workflows.flow_run import LAYER_RETRY

from tests.fixtures.world import BACKENDS
from tests.helpers import event_names, wait_status
from .test_stop_races import replayer


class Refusing(StoreProxy):
    """The store, refusing the calls of ``method`` that ``which(args)`` picks, the first ``times``
    of them (a retryable error it could not take), then itself again."""

    def __init__(self, store, method: str, times: int, which=lambda args: True) -> None:
        super().__init__(store)
        self.method, self.left, self.which = method, times, which

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args, **kwargs):
            if name == self.method and self.left > 0 and self.which(args):
                self.left -= 1
                raise StoreError(f"{name} could not be written")
            return await inner(*args, **kwargs)

        return call


async def paused(service, user, make_flow):
    job, _ = await service.submit(user, await make_flow(), input_value="refund 42", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    return job


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_a_decision_that_failed_after_its_record_goes_on_from_it(client, store, settings, user, make_flow):
    service = RunService(settings, store, client)
    # every attempt of the decision's activity fails at the completion, after the record
    refusing = Refusing(store, "set_status", LAYER_RETRY.maximum_attempts,
                        lambda args: args[1] == JobStatus.completed)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, make_flow)
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
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert "resume_run" in scheduled and "rollback_resume" not in scheduled  # the look, no rollback
    await replayer().replay_workflow(history)  # with its patch marker


@pytest.mark.parametrize("database_url", BACKENDS[:1], indirect=True)
async def test_a_decision_that_failed_before_its_record_is_let_go_and_decided_again(client, store, settings, user,
                                                                                  make_flow):
    """An attempt that fails before it records anything has its claim let go of by the same
    look: the job waits as it was, its request pending, and the next decision is applied."""
    service = RunService(settings, store, client)
    refusing = Refusing(store, "record_decision", LAYER_RETRY.maximum_attempts)
    async with build_worker(client, store, settings, activities=FlowActivities(refusing, settings).all()):
        job = await paused(service, user, make_flow)
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
    assert done.result["output"]["text"] == "Refund refused"  # the second decision was the one applied
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
    await replayer().replay_workflow(history)

