"""A decision through Temporal (DESIGN §7, §9) with the real `temporal` CLI: it names the person it
is for (``"user"``, default the run's owner), gets that person's checks (approvers, a revoked
share), and the Temporal client's identity is recorded beside the decision."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from typing import Any

from signoff.devserver import temporal_binary
from signoff.engine.models import JobStatus
from signoff.workflows.types import PENDING_QUERY, RESUME
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import (
    code,
    events,
    gate_flow,
    only,
    resume,
    run_suspended,
    uid,
    upload,
    user_name,
)


def _temporal(server, *args: str, identity: str | None = None) -> subprocess.CompletedProcess:
    extra = ["--identity", identity] if identity else []
    return subprocess.run([temporal_binary(), *args, "--address", server.address, "--namespace", "default",
                           "-o", "json", *extra], capture_output=True, text=True, timeout=60)


async def _update(server, job_id: str, action: str = "approve", *, identity: str | None = None,
                  **fields: Any) -> subprocess.CompletedProcess:
    body = {"request_id": f"gate:{job_id}", "decision": {"action_id": action}, **fields}
    return await asyncio.to_thread(_temporal, server, "workflow", "update", "execute", "--workflow-id", job_id,
                                   "--name", RESUME, "--input", json.dumps(body), identity=identity)


async def _still_waiting(h: Harness, server, job_id: str) -> None:
    """The job and its workflow both still wait for the same request; no decision recorded."""
    job = await h.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == f"gate:{job_id}"
    q = await asyncio.to_thread(_temporal, server, "workflow", "query", "--workflow-id", job_id,
                                "--name", PENDING_QUERY)
    assert q.returncode == 0 and f"gate:{job_id}" in q.stdout, q.stderr
    assert all(e.event != "human_input_decision" for e in await h.store.read_events(job_id))


async def test_an_update_names_the_person_and_gets_their_checks(h: Harness, temporal_server):
    bob = await user_name(h, "bob")
    flow_id = await upload(h, gate_flow({"approvers": [bob]}, name="temporal-approvers"))
    job_id = (await run_suspended(h, flow_id))["job_id"]

    # no "user": it is for the run's owner, alice, who is not an approver here
    refused = await _update(temporal_server, job_id)
    assert refused.returncode != 0
    assert "NOT_AN_APPROVER" in refused.stdout + refused.stderr, (refused.stdout, refused.stderr)
    await _still_waiting(h, temporal_server, job_id)
    # a person who is no approver (by name, by id), and nobody at all
    for who in (await user_name(h, "erin"), uid(h, "dave"), "nobody-" + uuid.uuid4().hex[:6]):
        refused = await _update(temporal_server, job_id, user=who)
        assert refused.returncode != 0 and "NOT_AN_APPROVER" in refused.stdout + refused.stderr, who
    await _still_waiting(h, temporal_server, job_id)
    # "decided_by" (what the API sends) is no way around it either
    refused = await _update(temporal_server, job_id, decided_by=uid(h, "erin"))
    assert refused.returncode != 0
    await _still_waiting(h, temporal_server, job_id)

    # bob, by name, through a client that says who it is
    done = await _update(temporal_server, job_id, user=bob, identity="ops-console@host-7")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["status"] == "resuming"
    finished = await h.wait_status(job_id, JobStatus.completed)
    assert finished.result["output"]["text"] == "Refund sent"
    data = only(await events(h, "alice", job_id), "human_input_decision")
    assert data["decided_by"] == uid(h, "bob")
    assert data["via"] == "temporal" and data["client_identity"] == "ops-console@host-7"


async def test_an_update_without_a_user_is_the_owners(h: Harness, temporal_server):
    """Old commands keep working: a gate with no approvers, decided for its owner."""
    job_id = (await run_suspended(h, h.flows["refund"]))["job_id"]
    done = await _update(temporal_server, job_id, "reject", identity="legacy-script")
    assert done.returncode == 0, done.stderr
    finished = await h.wait_status(job_id, JobStatus.completed)
    assert finished.result["output"]["text"] == "Refund refused"
    data = only(await events(h, "alice", job_id), "human_input_decision")
    assert data["decided_by"] == uid(h, "alice")
    assert data["via"] == "temporal" and data["client_identity"] == "legacy-script"


async def test_the_http_decision_records_the_apis_client(h: Harness):
    job_id = (await run_suspended(h, h.flows["refund"]))["job_id"]
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    data = only(await events(h, "alice", job_id), "human_input_decision")
    assert data["decided_by"] == uid(h, "alice")
    assert data["via"] == "api" and data["client_identity"] == h.service.client.identity


async def test_a_revoked_share_refuses_the_update(h: Harness, temporal_server):
    flow_id = await upload(h, gate_flow({}, name="shared-then-revoked"))
    bob = await user_name(h, "bob")
    async with h.client("alice") as c:
        assert (await c.post(f"/api/v1/flows/{flow_id}/shares", json={"user": bob})).status_code == 201
    job_id = (await run_suspended(h, flow_id, who="bob"))["job_id"]  # bob's run of alice's flow
    async with h.client("alice") as c:
        assert (await c.delete(f"/api/v1/flows/{flow_id}/shares/{bob}")).status_code == 204

    for fields in ({"user": bob}, {"user": uid(h, "bob")}, {}):  # {}: the run's owner, bob
        refused = await _update(temporal_server, job_id, **fields)
        assert refused.returncode != 0
        assert "FORBIDDEN" in refused.stdout + refused.stderr, (fields, refused.stdout, refused.stderr)
    # alice owns the flow, not the run: she is no approver of bob's run
    refused = await _update(temporal_server, job_id, user=await user_name(h, "alice"))
    assert refused.returncode != 0 and "NOT_AN_APPROVER" in refused.stdout + refused.stderr
    await _still_waiting(h, temporal_server, job_id)
    # the same through HTTP
    r = await resume(h, "bob", job_id, "approve")
    assert r.status_code == 403 and code(r) == "FORBIDDEN", r.text

    # shared again: bob's decision through Temporal goes through (the refusals left no trace)
    async with h.client("alice") as c:
        assert (await c.post(f"/api/v1/flows/{flow_id}/shares", json={"user": bob})).status_code == 201
    done = await _update(temporal_server, job_id, user=bob)
    assert done.returncode == 0, done.stderr
    await h.wait_status(job_id, JobStatus.completed)
    frames = await events(h, "bob", job_id)
    assert only(frames, "human_input_decision")["decided_by"] == uid(h, "bob")
    assert [f["event"] for f in frames].count("human_input_required") == 1


async def test_a_signal_names_the_person_and_its_sender_is_recorded(h: Harness, temporal_server):
    bob = await user_name(h, "bob")
    flow_id = await upload(h, gate_flow({"approvers": [bob]}, name="temporal-signal"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    body = {"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}, "user": bob}
    sent = await asyncio.to_thread(_temporal, temporal_server, "workflow", "signal", "--workflow-id", job_id,
                                   "--name", RESUME, "--input", json.dumps(body), identity="signal-sender")
    assert sent.returncode == 0, sent.stderr
    await h.wait_status(job_id, JobStatus.completed)
    data = only(await events(h, "alice", job_id), "human_input_decision")
    assert data["decided_by"] == uid(h, "bob")
    assert data["via"] == "temporal" and data["client_identity"] == "signal-sender"


async def test_each_vote_records_how_it_came(h: Harness, temporal_server):
    bob, carol = await user_name(h, "bob"), await user_name(h, "carol")
    flow_id = await upload(h, gate_flow({"approvers": [bob, carol], "required_approvals": 2}, name="temporal-quorum"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    voted = await _update(temporal_server, job_id, user=bob, identity="bob-laptop")
    assert voted.returncode == 0, voted.stderr
    assert json.loads(voted.stdout)["result"]["status"] == "vote_recorded"
    again = await _update(temporal_server, job_id, user=uid(h, "bob"))  # the same person by id
    assert again.returncode != 0 and "ALREADY_VOTED" in again.stdout + again.stderr
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    frames = await events(h, "alice", job_id)
    votes = {f["data"]["user"]: f["data"] for f in frames if f["event"] == "human_input_vote"}
    assert list(votes) == [uid(h, "bob"), uid(h, "carol")]  # each vote is an event, the last one too
    assert votes[uid(h, "bob")]["via"] == "temporal" and votes[uid(h, "bob")]["client_identity"] == "bob-laptop"
    assert votes[uid(h, "carol")]["via"] == "api"
    assert votes[uid(h, "carol")]["client_identity"] == h.service.client.identity
    decision = only(frames, "human_input_decision")
    assert decision["decided_by"] == uid(h, "carol") and decision["via"] == "api"
    assert [v["user"] for v in decision["votes"]] == [uid(h, "bob"), uid(h, "carol")]
