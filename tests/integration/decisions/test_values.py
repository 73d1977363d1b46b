"""Typed values (DESIGN §9 ``fields``): a schema checked when the flow is saved, values checked
when a decision is made (422 INVALID_VALUES, one problem per field, the job still waits), and
good values carried on the chosen branch, into the event and the pending request."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from signoff.engine.models import JobStatus
from tests.helpers import signoff_cli
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import (
    EchoHTTP,
    code,
    events,
    gate_flow,
    only,
    resume,
    run_suspended,
    uid,
    upload,
)


FORM: dict[str, Any] = {
    "type": "object",
    "title": "Refund",
    "description": "What the approver fills in",
    "required": ["reason", "amount"],
    "properties": {
        "reason": {"type": "string", "title": "Reason", "minLength": 3, "pattern": "^[A-Z]"},
        "amount": {"type": "number", "minimum": 0, "maximum": 1000, "description": "in EUR"},
        "count": {"type": "integer", "minimum": 1},
        "urgent": {"type": "boolean", "default": False},
        "level": {"enum": ["low", "high"], "default": "low"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["vip", "repeat"]}, "maxItems": 2},
    },
}


async def _flow_problems(h: Harness, gate_params: dict[str, Any]) -> list[dict[str, Any]]:
    async with h.client("alice") as c:
        r = await c.post("/api/v1/flows", json=gate_flow(gate_params, name="bad"))
    assert r.status_code == 422, r.text
    assert code(r) == "FLOW_INVALID"
    return r.json()["detail"]["problems"]


async def test_an_invalid_schema_or_param_is_refused_at_upload_naming_the_node(h: Harness):
    cases: list[tuple[dict[str, Any], str]] = [
        ({"fields": {"type": "object", "properties": {"who": {"type": "object"}}}}, "fields.who"),
        ({"fields": {"type": "object", "properties": {"n": {"type": "number", "minimum": "zero"}}}},
         "not a valid JSON Schema"),
        ({"fields": {"type": "object", "properties": {"n": {"$ref": "#/x"}}}}, "$ref"),
        ({"fields": {"type": "array"}}, "type is 'object'"),
        ({"fields": {"Escalate": {"type": "object"}}}, "'Escalate' is not one of the decisions"),
        ({"fields": {"Reject": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object"}}}}}},
         "fields.Reject.l"),
        ({"aprovers": ["bob"]}, "unknown param 'aprovers'"),
        ({"approvers": ["bob"], "required_approvals": 0}, "required_approvals"),
    ]
    for params, expected in cases:
        problems = await _flow_problems(h, params)
        assert any(p.get("node") == "gate" and expected in p["message"] for p in problems), (params, problems)
    # nothing was saved
    async with h.client("alice") as c:
        assert all(f["name"] != "bad" for f in (await c.get("/api/v1/flows")).json())


async def test_bad_values_are_refused_per_field_and_the_job_still_waits(h: Harness, echo: EchoHTTP):
    flow_id = await upload(h, gate_flow({"fields": FORM}, name="typed", echo_url=echo.url))
    job = await run_suspended(h, flow_id)
    job_id, request_id = job["job_id"], job["human_request"]["request_id"]

    async with h.client("alice") as c:
        before = (await c.get(f"/api/v2/workflows/{job_id}/pending")).json()
    # the pending request carries the schema (per decision: the same one for both)
    assert before["fields"] == {"approve": FORM, "reject": FORM}

    bad = {"reason": "no", "amount": 5000, "count": 1.5, "urgent": "yes", "level": "medium", "tags": ["vip", 3, "x"]}
    r = await resume(h, "alice", job_id, "approve", bad)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["code"] == "INVALID_VALUES" and detail["job_id"] == job_id
    locs = [p["loc"] for p in detail["problems"]]
    # one entry per failing field (reason is both too short and not capitalised: still one)
    assert locs == sorted(set(locs)), locs
    assert set(locs) == {"values.reason", "values.amount", "values.count", "values.urgent", "values.level",
                         "values.tags", "values.tags.1", "values.tags.2"}, locs
    by_loc = {p["loc"]: p for p in detail["problems"]}
    assert by_loc["values.amount"]["type"] == "maximum"
    assert by_loc["values.count"]["type"] == "type"
    assert by_loc["values.level"]["type"] == "enum"
    assert by_loc["values.tags"]["type"] == "maxItems"

    missing = await resume(h, "alice", job_id, "approve", {"amount": 10})
    assert missing.status_code == 422 and code(missing) == "INVALID_VALUES"
    assert [p["loc"] for p in missing.json()["detail"]["problems"]] == ["values.reason"]
    assert missing.json()["detail"]["problems"][0]["type"] == "required"
    nothing = await resume(h, "alice", job_id, "approve")  # no values at all: the required ones are missing
    assert nothing.status_code == 422
    assert [p["loc"] for p in nothing.json()["detail"]["problems"]] == ["values.amount", "values.reason"]

    # the job is exactly as it was: suspended on the same request, no decision recorded
    async with h.client("alice") as c:
        status = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        after = (await c.get(f"/api/v2/workflows/{job_id}/pending")).json()
    assert status["status"] == "suspended"
    assert after == before
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended
    assert all(e.event != "human_input_decision" for e in await h.store.read_events(job_id))

    good = {"reason": "Damaged parcel", "amount": 42.5, "count": 2, "tags": ["vip"]}
    r = await resume(h, "alice", job_id, "approve", good)
    assert r.status_code == 200, r.text
    done = await h.wait_status(job_id, JobStatus.completed)
    with_defaults = {**good, "urgent": False, "level": "low"}
    decision = {"action_id": "approve", "values": with_defaults, "decided_by": uid(h, "alice")}
    # the values rode the approve branch: the HTTP Request downstream got them with the prompt's text
    assert {"text": "refund 42", "decision": decision} in echo.bodies
    assert json.loads(done.result["outputs"]["ok"]["content"]) == {"text": "refund 42", "decision": decision}
    frames = await events(h, "alice", job_id)
    data = only(frames, "human_input_decision")
    assert data["request_id"] == request_id and data["action_id"] == "approve"
    assert data["values"] == with_defaults and data["decided_by"] == uid(h, "alice")
    assert only(frames, "human_input_required")["fields"] == {"approve": FORM, "reject": FORM}


async def test_a_schema_per_decision(h: Harness):
    reason = {"type": "object", "required": ["reason"],
              "properties": {"reason": {"type": "string", "minLength": 5, "title": "Why not?"}}}
    flow_id = await upload(h, gate_flow({"fields": {"Reject": reason}}, name="per-label"))

    # approve needs no values
    job = await run_suspended(h, flow_id)
    async with h.client("alice") as c:
        assert (await c.get(f"/api/v2/workflows/{job['job_id']}/pending")).json()["fields"] == {"reject": reason}
    r = await resume(h, "alice", job["job_id"], "approve")
    assert r.status_code == 200, r.text
    done = await h.wait_status(job["job_id"], JobStatus.completed)
    assert done.result["output"]["text"] == "Refund sent"

    # reject needs a reason
    job = await run_suspended(h, flow_id)
    for values in (None, {}, {"reason": "no"}):
        r = await resume(h, "alice", job["job_id"], "reject", values)
        assert r.status_code == 422 and code(r) == "INVALID_VALUES", r.text
        assert [p["loc"] for p in r.json()["detail"]["problems"]] == ["values.reason"]
        assert (await h.store.get_job(job["job_id"])).status == JobStatus.suspended
    r = await resume(h, "alice", job["job_id"], "reject", {"reason": "Not our product"})
    assert r.status_code == 200, r.text
    done = await h.wait_status(job["job_id"], JobStatus.completed)
    # the reject branch's text output shows the text of what it got
    assert done.result["outputs"]["no"]["content"] == "refund 42"
    data = only(await events(h, "alice", job["job_id"]), "human_input_decision")
    assert data["action_id"] == "reject" and data["values"] == {"reason": "Not our product"}


def _cli(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    return signoff_cli(*args, "--api-url", url, "--api-key", key)


async def test_the_cli_sends_values(h: Harness, live: str):
    flow_id = await upload(h, gate_flow({"fields": {"Approve": {
        "type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer", "maximum": 100}}}}},
        name="cli-values"))
    job = await run_suspended(h, flow_id)
    key = h.users["alice"][1]
    bad = await asyncio.to_thread(_cli, live, key, "resume", job["job_id"], "--action", "approve",
                                  "--values", '{"amount": 500}')
    assert bad.returncode == 1
    assert "INVALID_VALUES" in bad.stderr and "values.amount" in bad.stderr, bad.stderr
    assert (await h.store.get_job(job["job_id"])).status == JobStatus.suspended
    ok = await asyncio.to_thread(_cli, live, key, "resume", job["job_id"], "--action", "approve",
                                 "--values", '{"amount": 50}', "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["job_id"] == job["job_id"]
    await h.wait_status(job["job_id"], JobStatus.completed)
    data = only(await events(h, "alice", job["job_id"]), "human_input_decision")
    assert data["values"] == {"amount": 50}


async def test_values_sent_straight_to_temporal_are_checked_by_the_activity_not_the_workflow(h: Harness):
    """A decision sent as the ``resume`` Update (a Temporal client, the ``temporal`` CLI, the
    Web UI: nothing checked it before) with values its fields refuse is refused INVALID_VALUES
    naming the field, before any claim: no decision recorded, the run still waits, and the right
    values then apply. The check is the activity's (resume_run); no workflow task pays for a
    schema (workflows/attempt.py: values=False everywhere)."""
    import uuid
    from datetime import timedelta

    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.exceptions import ApplicationError

    from signoff.engine.models import Decision
    from signoff.workflows.types import ResumeInput, ResumeResult

    flow_id = await upload(h, gate_flow({"fields": {"Approve": {
        "type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer", "maximum": 100}}}}},
        name="update-values"))
    job = await run_suspended(h, flow_id)
    request_id = job["human_request"]["request_id"]
    handle = h.service.client.get_workflow_handle(job["job_id"])

    async def send(values: dict[str, Any]) -> ResumeResult:
        return await handle.execute_update(
            "resume", ResumeInput(request_id=request_id, decision=Decision(action_id="approve", values=values),
                                  user=h.users["alice"][0]),
            id=f"test-{uuid.uuid4()}", result_type=ResumeResult, rpc_timeout=timedelta(seconds=30))

    try:
        await send({"amount": 500})
        raise AssertionError("values over the maximum were taken")
    except WorkflowUpdateFailedError as err:
        assert isinstance(err.cause, ApplicationError) and err.cause.type == "INVALID_VALUES", err.cause
        assert "amount" in str(err.cause), err.cause
    stored = await h.store.get_job(job["job_id"])
    assert stored.status == JobStatus.suspended and stored.waits_for(request_id)
    assert "human_input_decision" not in [e.event for e in await h.store.read_events(job["job_id"])]
    await send({"amount": 50})
    await h.wait_status(job["job_id"], JobStatus.completed)
    data = only(await events(h, "alice", job["job_id"]), "human_input_decision")
    assert data["values"] == {"amount": 50}
