"""A decision through AG-UI (the next run of the thread carrying ``resume``) leaves its signed
receipt (DESIGN §16, docs/audit.md) with ``via: agui``."""

from __future__ import annotations

from signoff.engine.models import JobStatus
from tests.integration.agui.conftest import agui, outcome, run_input
from tests.integration.agui.test_agui_api import approve, interrupted, thread
from tests.integration.api.conftest import Harness


async def test_an_ag_ui_resume_leaves_a_receipt(h: Harness):
    flow, t = h.flows["refund"], thread()
    async with h.client("alice") as c:
        _, interrupt = await interrupted(h, c, flow, t)
        second = await agui(c, flow, run_input(t, resume=approve(interrupt["id"], "approve")))
        assert outcome(second)["outcome"] == {"type": "success"}
        job_id = interrupt["metadata"]["job_id"]
        await h.wait_status(job_id, JobStatus.completed)
        r = await c.get(f"/api/v1/runs/{job_id}/receipts")
    assert r.status_code == 200, r.text
    [receipt] = r.json()["receipts"]
    assert receipt["via"] == "agui" and receipt["action_id"] == "approve" and receipt["authority"] == "owner"
    assert receipt["decided_by"]["id"] == h.users["alice"][0] and receipt["request_id"] == interrupt["id"]
