"""Receipts of what a gate's timers lead to (DESIGN §16, docs/audit.md), days fast-forwarded per
workflow: the default the deadline applies by itself is on the record with nobody deciding
(``authority: timeout``, ``decided_by`` null), and a person added by the escalation decides
with ``authority: escalation``."""

from __future__ import annotations

from datetime import timedelta

from signoff.engine.models import JobStatus
from tests.integration.decisions.gate_world import (  # noqa: F401 - the world fixture
    fast_forward,
    gate_flow,
    name_of,
    resume,
    save_flow,
    start_suspended,
    world,
)

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


async def _receipts(h, job_id: str) -> list[dict]:
    return [r.body for r in await h.store.read_receipts(job_id)]


async def test_the_deadlines_default_is_on_the_record_with_nobody_deciding(world):
    h, skipper = world
    flow = await save_flow(h, gate_flow("receipt at the deadline", timeout={"value": 1, "unit": "Days"},
                                        on_timeout="default", default_action="reject",
                                        default_values={"reason": "nobody answered"}))
    job_id = (await start_suspended(h, flow))["job_id"]
    await fast_forward(h, skipper, job_id, DAY + HOUR)
    await h.wait_status(job_id, JobStatus.completed)
    [receipt] = await _receipts(h, job_id)
    assert receipt["authority"] == "timeout" and receipt["decided_by"] is None and receipt["via"] is None
    assert receipt["action_id"] == "reject" and receipt["values"] == {"reason": "nobody answered"}
    assert receipt["justification"] == "nobody answered" and receipt["prev_sha256"] is None


async def test_an_escalated_approver_decides_with_the_escalations_authority(world):
    h, skipper = world
    bob, carol = await name_of(h, "bob"), await name_of(h, "carol")
    flow = await save_flow(h, gate_flow("receipt escalates", approvers=[bob], escalate_after={"value": 1, "unit": "Days"},
                                        escalate_to=[carol]))
    job_id = (await start_suspended(h, flow))["job_id"]
    assert await fast_forward(h, skipper, job_id, DAY + HOUR)
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    [receipt] = await _receipts(h, job_id)
    assert receipt["authority"] == "escalation" and receipt["decided_by"]["id"] == h.users["carol"][0]
