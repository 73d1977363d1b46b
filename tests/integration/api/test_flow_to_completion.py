"""Submit → pause → approve → completed, through the HTTP API, with events, history, trace."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus

from signoff.engine.models import JobStatus

from tests.helpers import eventually
from tests.integration.api.conftest import Harness, sse_frames, submit, submit_suspended


async def test_sync_pause_then_resume_completes(api: Harness) -> None:
    resp = await submit_suspended(api, session_id="walk")
    job_id = resp["job_id"]
    async with api.client("alice") as c:
        pending = (await c.get(f"/api/v2/workflows/{job_id}/pending")).json()
        assert pending["allowed_decisions"] == ["approve", "reject"]
        listed = (await c.get("/api/v2/workflows/pending", params={"flow_id": api.flows["refund"]})).json()
        assert job_id in [p["job_id"] for p in listed]

        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": pending["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        resumed = r.json()
        assert resumed["job_id"] == job_id and resumed["status"] == "resuming"
        assert resumed["run"]["status"] == "completed" and resumed["run"]["output"]["text"] == "Refund sent"
        await api.wait_status(job_id, JobStatus.completed)

        done = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        assert done["object"] == "response" and done["status"] == "completed"
        assert done["output"]["text"] == "Refund sent"
        same = (await c.get("/api/v2/workflows", params={"job_id": job_id})).json()
        assert same == done

        r = await c.get(f"/api/v2/workflows/{job_id}/pending")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "NO_PENDING_REQUEST"

        frames = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events")).text)
        names = [f["event"] for f in frames]
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert "human_input_required" in names and "human_input_decision" in names and names[-1] == "end"
        decision = frames[names.index("human_input_decision")]["data"]
        assert decision["action_id"] == "approve" and decision["decided_by"] == api.users["alice"][0]

        history = (await c.get("/api/v1/monitor/messages", params={"session_id": "walk"})).json()
        cards = [m for m in history if m["kind"] == "card"]
        assert cards and cards[-1]["card"]["submitted_action"] == "approve"



async def test_background_and_idempotency(api: Harness) -> None:
    async with api.client("alice") as c:
        first = await submit(c, api.flows["refund"], idempotency_key="k-1", session_id="idem")
        assert first["object"] == "job" and first["links"]["events"].endswith("/events")
        again = await submit(c, api.flows["refund"], idempotency_key="k-1", session_id="idem")
        assert again["job_id"] == first["job_id"]
        await api.wait_status(first["job_id"], JobStatus.suspended)
        stopped = (await c.post("/api/v2/workflows/stop", json={"job_id": first["job_id"]})).json()
        assert stopped["status"] == "cancelled"
        again = (await c.post("/api/v2/workflows/stop", json={"job_id": first["job_id"]})).json()
        assert again["status"] == "cancelled"
    # the cancel claim wrote run_cancelled with the status; the workflow, once cancelled, adds nothing
    handle = api.service.client.get_workflow_handle(first["job_id"])

    async def workflow_closed():
        return (await handle.describe()).status == WorkflowExecutionStatus.CANCELED

    await eventually(workflow_closed, what="the workflow to end as cancelled")
    events = await api.store.read_events(first["job_id"])
    assert [(e.event, e.data) for e in events][1:] == [("run_cancelled", {"reason": "stopped"})]


async def test_trace_routes_build_the_span_tree(api: Harness) -> None:
    resp = await submit_suspended(api, session_id="trace")
    job_id = resp["job_id"]
    async with api.client("alice") as c:
        # the real spans the worker wrote (docs/tracing.md): the open root, the vertices built so far
        # (the example's Chat Input and the Prompt that words its question)
        trace = (await c.get(f"/api/v1/monitor/traces/{job_id}")).json()
        assert trace["trace_id"] == job_id and trace["span_count"] == 3
        (root,) = trace["spans"]
        assert root["name"] == "Refund approval" and root["end_time"] is None
        assert [ch["name"] for ch in root["children"]] == ["Chat Input", "Prompt"]
        listed = (await c.get("/api/v1/monitor/traces", params={"flow_id": resp["flow_id"]})).json()
        assert job_id in [t["trace_id"] for t in listed]
    async with api.client("bob") as c:
        r = await c.get(f"/api/v1/monitor/traces/{job_id}")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "JOB_NOT_FOUND"
        listed = (await c.get("/api/v1/monitor/traces", params={"flow_id": resp["flow_id"]})).json()
        assert job_id not in [t["trace_id"] for t in listed]
