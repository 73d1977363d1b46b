"""Days of waiting in seconds, with the server's per-workflow time skipping: a late answer is
rerouted to the fallback branch, and a forgotten run ends as timed_out at the maximum
suspension (a durable Temporal timer)."""

from __future__ import annotations

from datetime import timedelta

import pytest_asyncio
from temporalio.testing import TimeSkipper, TimeSkippingConfig

from signoff.engine.models import Decision, JobStatus
from signoff.service import RunService

from tests.helpers import event_names, wait_status

LATE_FLOW = {
    "name": "late",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput",
         "params": {"decisions": ["Approve", "Reject"], "timeout": {"value": 3, "unit": "Days"}, "enable_fallback": True}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "approved"}},
        {"id": "fb", "type": "ChatOutput", "params": {"text": "too late: escalated"}},
    ],
    "edges": [
        {"from": "ask.message", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "ok.input_value"},
        {"from": "gate.branch_fallback", "to": "fb.input_value"},
    ],
}


@pytest_asyncio.fixture
async def skipper(client) -> TimeSkipper:
    # Skipping off at start; each test fast-forwards its own workflow's virtual clock.
    return TimeSkipper(client, config=TimeSkippingConfig(enabled=False))


async def test_late_answer_rerouted_to_fallback(worker, settings, store, user, make_flow, skipper):
    service = RunService(settings, store, skipper.client)
    flow = await make_flow(LATE_FLOW)
    job, _ = await service.submit(user, flow, input_value="refund", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    handle = service.client.get_workflow_handle(job.job_id)
    assert await skipper.fast_forward(handle, timedelta(days=4))

    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "too late: escalated"
    events = await store.read_events(job.job_id)
    assert [e.event for e in events] == ["human_input_required", "human_input_expired", "human_input_decision", "end"]
    assert events[1].data["requested_action"] == "approve" and events[1].data["rerouted_to"] == "fallback"
    assert events[2].data["action_id"] == "fallback"


async def test_max_suspension_ends_timed_out(worker, settings, store, user, make_flow, skipper):
    settings = settings.model_copy(update={"max_suspend_seconds": 7 * 24 * 3600})
    service = RunService(settings, store, skipper.client)
    flow = await make_flow()
    job, _ = await service.submit(user, flow, input_value="refund", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    handle = service.client.get_workflow_handle(job.job_id)
    await skipper.fast_forward(handle, timedelta(days=8))
    ended = await wait_status(store, job.job_id, JobStatus.timed_out)
    assert ended.pending is None
    assert (await event_names(store, job.job_id))[-1] == "run_timed_out"
    assert (await handle.result())["status"] == "timed_out"
