"""Rejected ``resume`` Signals are recorded (``resume_rejected``, one activity each) at most
MAX_RECORDED_REJECTIONS times per pending request; the rest are counted in the workflow (Query
``rejected_signals``) and logged, so spamming bad Signals does not grow the history without
bound. SQLite and PostgreSQL, real Temporal, with a replay of the history."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from signoff.engine.models import Decision, JobStatus
from tests.helpers import event_names, eventually, wait_status
from tests.integration.temporal.test_stop_races import replayer
from signoff.workflows.flow_run import MAX_RECORDED_REJECTIONS
from signoff.workflows.types import REJECTED_QUERY, RESUME, ResumeInput

# ---- 5. rejected Signals are bounded ------------------------------------------------------------


async def test_rejected_signals_are_recorded_a_bounded_number_of_times(worker, service, store, user, make_flow):
    job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    await wait_status(store, job.job_id, JobStatus.suspended)
    handle = service.client.get_workflow_handle(job.job_id)
    spam = MAX_RECORDED_REJECTIONS + 15
    for i in range(spam):
        await handle.signal(RESUME, ResumeInput(request_id=f"gate:stale-{i}", decision=Decision(action_id="approve")))
    # every Signal was handled (counted) before this Query, which runs after them
    counts = await eventually(lambda: _rejected(handle, spam), what="every Signal handled")
    assert counts == {f"gate:{job.job_id}": spam}
    await handle.signal(RESUME, ResumeInput(request_id=f"gate:{job.job_id}", decision=Decision(action_id="approve")))
    await wait_status(store, job.job_id, JobStatus.completed)
    assert (await event_names(store, job.job_id)).count("resume_rejected") == MAX_RECORDED_REJECTIONS
    history = await handle.fetch_history()
    scheduled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "record_event"]
    assert len(scheduled) == MAX_RECORDED_REJECTIONS  # the history does not grow with the spam
    await replayer().replay_workflow(history)



async def _rejected(handle, n: int) -> dict[str, int] | None:
    counts = await handle.query(REJECTED_QUERY, result_type=dict[str, int])
    return counts if sum(counts.values()) >= n else None


async def test_a_bad_signal_after_the_run_ended_writes_nothing_after_its_end(worker, service, store, user,
                                                                           make_flow):
    """The run completed; its workflow stays open for its webhook deliveries' retries (a dead
    endpoint). A rejected resume Signal sent then is not recorded: no event after ``end``."""
    await store.create_webhook(user.id, "http://127.0.0.1:9/hook", ["human_input_decision"], b"x" * 32)
    job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await wait_status(store, job.job_id, JobStatus.suspended)
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, job.job_id, JobStatus.completed)
    handle = service.client.get_workflow_handle(job.job_id)
    assert (await handle.describe()).status.name == "RUNNING"  # delivering to the dead endpoint
    await handle.signal(RESUME, ResumeInput(request_id="gate:nope", decision=Decision(action_id="approve")))
    await eventually(lambda: _rejected(handle, 1), what="the Signal handled")
    assert (await event_names(store, job.job_id))[-1] == "end"
    await handle.terminate("test: do not wait for the dead endpoint's retries")
