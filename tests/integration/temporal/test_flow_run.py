"""FlowRun end to end against the real dev server: submit, suspend, resume, complete."""

from __future__ import annotations

import pytest

from signoff.engine.errors import InvalidDecision, NotResumable
from signoff.engine.models import Decision, JobStatus

from tests.helpers import event_names, wait_status


@pytest.mark.parametrize("action, text", [("approve", "Refund sent"), ("reject", "Refund refused")])
async def test_suspend_then_resume_completes(worker, service, store, user, make_flow, action, text):
    flow = await make_flow()
    job, created = await service.submit(user, flow, input_value="refund 42", session_id="s1", tweaks=None,
                                        idempotency_key=None, mode="background")
    assert created
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.status == JobStatus.suspended
    assert job.pending.request_id.startswith("gate:")
    assert job.pending.allowed_decisions == ["approve", "reject"]

    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id=action))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == text
    assert await event_names(store, job.job_id) == ["human_input_required", "human_input_decision", "end"]
    decision = (await store.read_events(job.job_id))[1].data
    assert decision["action_id"] == action and decision["decided_by"] == user.id
    result = await service.client.get_workflow_handle(job.job_id).result()
    assert result["status"] == "completed"


async def test_resume_rejections(worker, service, store, user, make_flow):
    flow = await make_flow()
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    with pytest.raises(InvalidDecision):
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="maybe"))
    with pytest.raises(NotResumable):
        await service.resume(user, job.job_id, "gate:stale", Decision(action_id="approve"))
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    with pytest.raises(NotResumable):
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, job.job_id, JobStatus.completed)


async def test_a_run_uses_the_flow_version_its_job_was_created_with(worker, service, store, user, make_flow):
    from tests.helpers import GATE_FLOW

    v1 = await make_flow()
    edited = {**GATE_FLOW, "nodes": [dict(n) for n in GATE_FLOW["nodes"]]}
    edited["nodes"][2] = {"id": "ok", "type": "ChatOutput", "params": {"text": "Refund sent (v2)"}}
    v2 = await store.save_flow(user.id, "Refund approval", edited, flow_id=v1.id)
    assert (v1.version, v2.version) == (1, 2)
    job, _ = await service.submit(user, v1, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    assert job.flow_version == 1
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "Refund sent"
