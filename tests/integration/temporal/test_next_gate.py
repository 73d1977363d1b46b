"""A decision for the next gate sent the moment the store shows the run waiting on it. The
decision before it put the run there (resume_run persisted the next pause), but its workflow
task may not have run yet: the run must take the new decision once it has, not refuse it. A
client that follows the run's events (or the answer to its own resume) and answers at once
meets this window."""

from __future__ import annotations

import asyncio

import pytest

from signoff.engine.models import Decision, JobStatus

from tests.fixtures.world import BACKENDS
from tests.helpers import event_names, wait_status
from .test_surface import submit

TWO_GATES = {
    "name": "Two approvals",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "first", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "second", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "ok", "type": "ChatOutput"},
    ],
    "edges": [
        {"from": "ask.message", "to": "first.prompt"},
        {"from": "first.branch_approve", "to": "second.prompt"},
        {"from": "second.branch_approve", "to": "ok.input_value"},
    ],
}


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_a_decision_sent_as_soon_as_the_next_gate_shows_is_taken(worker, service, store, user, make_flow):
    flow = await make_flow(TWO_GATES)
    for _ in range(5):  # the window is a workflow task long: a few tries make meeting it near certain
        job = await submit(service, user, flow)
        job = await wait_status(store, job.job_id, JobStatus.suspended)
        first = job.pending.request_id

        async def answer_the_next_gate_at_once() -> None:
            while True:
                now = await store.get_job(job.job_id)
                if now.status == JobStatus.suspended and now.pending.request_id != first:
                    await service.resume(user, job.job_id, now.pending.request_id, Decision(action_id="approve"))
                    return
                await asyncio.sleep(0.001)

        follower = asyncio.create_task(answer_the_next_gate_at_once())
        await service.resume(user, job.job_id, first, Decision(action_id="approve"))
        await asyncio.wait_for(follower, 30)  # a refusal (409 NOT_RESUMABLE) raises here
        done = await wait_status(store, job.job_id, JobStatus.completed)
        assert (await event_names(store, job.job_id)).count("human_input_decision") == 2
        assert done.result is not None
        await service.client.get_workflow_handle(job.job_id).result()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_the_next_decision_right_after_the_answer_to_a_resume_is_taken(worker, service, store, user, make_flow):
    """A resume is answered once the store shows its decision applied and the run settled
    (TemporalBackend.resume), which can be before the workflow has taken the decision's result:
    a client that answers the next gate the moment its resume returns must not be refused."""
    flow = await make_flow(TWO_GATES)
    for _ in range(3):
        job = await submit(service, user, flow)
        job = await wait_status(store, job.job_id, JobStatus.suspended)
        resumed = await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        after = resumed.job
        assert after.status == JobStatus.suspended and after.pending.request_id != job.pending.request_id
        await service.resume(user, job.job_id, after.pending.request_id, Decision(action_id="approve"))
        done = await wait_status(store, job.job_id, JobStatus.completed)
        assert (await event_names(store, job.job_id)).count("human_input_decision") == 2
        assert done.result is not None
