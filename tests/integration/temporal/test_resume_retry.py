"""The crash windows of a resume, driven through the real resume_run activity on a real run's
store: an attempt retried after its first one committed everything, and a worker that died
right after the claim committed. Neither leaves the job in_progress forever nor writes an event
twice."""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from signoff.activities.flow import FlowActivities
from signoff.engine.models import Decision, JobStatus, utcnow
from signoff.activities.types import ResumeRunInput, RunLayerInput, StateRef

from tests.helpers import event_names
from .test_surface import submit


async def suspended(service, user, make_flow):
    job = await submit(service, user, await make_flow())
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    return job


def resume_input(job, token: str, action: str = "approve") -> ResumeRunInput:
    return ResumeRunInput(job_id=job.job_id, token=token, request_id=job.pending.request_id,
                          decision=Decision(action_id=action), decided_by=job.user_id, now=utcnow(), step=2)


async def test_retried_resume_run_applies_once_and_reports_the_end(worker, service, store, user, make_flow, settings):
    job = await suspended(service, user, make_flow)
    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    try:
        first = await env.run(acts.resume_run, resume_input(job, "wf-1"))
        assert first.claimed and first.out.done and first.out.status == "completed"
        # the first attempt's result was lost (worker died before reporting it): the retry
        retry = await env.run(acts.resume_run, resume_input(job, "wf-1"))
        assert retry.claimed and retry.out.done and retry.out.status == "completed"
        assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
        # another claimant (another Update) wins nothing
        other = await env.run(acts.resume_run, resume_input(job, "wf-2", "reject"))
        assert not other.claimed
        assert (await store.get_job(job.job_id)).result["output"]["text"] == "Refund sent"
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


async def test_claim_committed_by_a_dead_attempt_is_taken_over_by_its_retry(worker, service, store, user, make_flow,
                                                                           settings):
    job = await suspended(service, user, make_flow)
    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    try:
        # attempt 1 committed the claim, then its worker died: the job says in_progress
        assert await store.claim_suspended_for_resume(job.job_id, job.pending.request_id, token="wf-1") == "wf-1"
        assert (await store.get_job(job.job_id)).status == JobStatus.in_progress
        assert not (await env.run(acts.resume_run, resume_input(job, "wf-other"))).claimed
        retry = await env.run(acts.resume_run, resume_input(job, "wf-1", "reject"))
        assert retry.claimed and retry.out.status == "completed"
        done = await store.get_job(job.job_id)
        assert done.status == JobStatus.completed and done.result["output"]["text"] == "Refund refused"
        assert (await event_names(store, job.job_id)).count("human_input_decision") == 1
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


TWO_GATES = {
    "name": "two gates",
    "nodes": [{"id": "ask", "type": "ChatInput"},
              {"id": "g1", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
              {"id": "g2", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
              {"id": "ok", "type": "ChatOutput", "params": {"text": "both approved"}}],
    "edges": [{"from": "ask.message", "to": "g1.prompt"}, {"from": "g1.branch_approve", "to": "g2.prompt"},
              {"from": "g2.branch_approve", "to": "ok.input_value"}],
}


async def test_retry_of_a_decision_that_reached_the_next_pause_reports_that_pause(worker, service, store, user,
                                                                                  make_flow, settings):
    """The first attempt claimed, applied the decision and took the run to its next gate, whose
    pause (persisted) cleared the claim; its result was lost (its worker died, or the workflow
    task that ran it as a local activity failed). The retry must report that pause, as the first
    attempt would have, and write nothing: before, it lost the claim against the new pause and
    the workflow took the decision for refused while the store showed the run at the next gate."""
    job = await suspended(service, user, lambda: make_flow(TWO_GATES))
    cp = await store.load_latest_checkpoint(job.run_id)
    inp = resume_input(job, "wf-1").model_copy(update={"state": StateRef(inline=cp.data), "persist": True})
    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    try:
        first = await env.run(acts.resume_run, inp)
        assert first.claimed and first.out.persisted and first.out.pending.request_id.startswith("g2:")
        at_pause = await event_names(store, job.job_id)
        retry = await env.run(acts.resume_run, inp)
        assert retry.claimed and retry.action_id == "approve"
        assert retry.out.persisted and retry.out.pending.request_id == first.out.pending.request_id
        assert (retry.out.step, retry.out.state) == (first.out.step, first.out.state)
        assert await event_names(store, job.job_id) == at_pause  # nothing written twice
        assert (await store.get_job(job.job_id)).pending.request_id == first.out.pending.request_id
        # another decision on the first gate still wins nothing
        assert not (await env.run(acts.resume_run, resume_input(job, "wf-2", "reject"))).claimed
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


async def test_retried_first_layer_of_a_finished_run_reports_completed_not_cancelled(worker, service, store, user,
                                                                                   make_flow, settings):
    """A one-layer run: its first run_layer completed the job, then the result was lost and the
    activity retried. The retry must report the job's real status, not 'cancelled'."""
    flow = await make_flow({"name": "one layer", "nodes": [{"id": "t", "type": "TextInput", "params": {"value": "x"}}],
                            "edges": []})
    job = await submit(service, user, flow)
    assert (await service.wait_for_terminal(job.job_id, timeout=30)).status == JobStatus.completed
    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    retry = await env.run(acts.run_layer, RunLayerInput(job_id=job.job_id, step=0, state=None, now=utcnow()))
    assert retry.cancelled and retry.status == "completed"
    assert (await store.get_job(job.job_id)).status == JobStatus.completed
    handle = service.client.get_workflow_handle(job.job_id)
    assert (await handle.result())["status"] == "completed"
