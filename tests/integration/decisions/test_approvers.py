"""Approvers and groups (DESIGN §9): who sees a request, who may decide it, and what a change of
group or share does to that, over HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

from signoff.engine.models import JobStatus
from tests.helpers import signoff_cli
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import (
    code,
    events,
    gate_flow,
    only,
    pending_ids,
    resume,
    run_suspended,
    uid,
    upload,
    user_name,
)



async def _group(h: Harness, owner: str, *members: str) -> str:
    """A new group of ``owner``'s with ``members`` (by user name); its name."""
    group = f"finance-{uuid.uuid4().hex[:6]}"
    async with h.client(owner) as c:
        r = await c.post("/api/v1/groups", json={"name": group, "members": [await user_name(h, m) for m in members]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["reference"] == f"group:{group}"
    assert sorted(m["id"] for m in body["members"]) == sorted(uid(h, m) for m in members)
    return group


async def _share(h: Harness, flow_id: str, who: str) -> None:
    async with h.client("alice") as c:
        r = await c.post(f"/api/v1/flows/{flow_id}/shares", json={"user": await user_name(h, who)})
    assert r.status_code == 201, r.text


async def test_approvers_see_and_decide_others_do_not(h: Harness):
    group = await _group(h, "alice", "carol")
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob"), f"group:{group}"]}, name="assigned"))
    await _share(h, flow_id, "dave")  # dave may run alice's flow, but he is no approver
    job = await run_suspended(h, flow_id)
    job_id = job["job_id"]

    # bob (by name) and carol (by alice's group) see it although the run is alice's
    for who in ("bob", "carol"):
        assert job_id in await pending_ids(h, who), who
        async with h.client(who) as c:
            r = await c.get(f"/api/v2/workflows/{job_id}")
            assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
            p = await c.get(f"/api/v2/workflows/{job_id}/pending")
            assert p.status_code == 200 and p.json()["request_id"] == f"gate:{job_id}"
            ev = await c.get(f"/api/v2/workflows/{job_id}/events")
            assert ev.status_code == 200
    # alice sees her run but is not one of its approvers: not in her inbox, and a 403
    assert job_id not in await pending_ids(h, "alice")
    async with h.client("alice") as c:
        assert (await c.get(f"/api/v2/workflows/{job_id}")).status_code == 200
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 403 and code(r) == "NOT_AN_APPROVER", r.text
    # dave (a share holder of the flow) and erin (a stranger) cannot see it at all: 404
    for who in ("dave", "erin"):
        assert job_id not in await pending_ids(h, who)
        async with h.client(who) as c:
            r = await c.get(f"/api/v2/workflows/{job_id}")
            assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND", (who, r.text)
            assert (await c.get(f"/api/v2/workflows/{job_id}/pending")).status_code == 404
            assert (await c.get(f"/api/v2/workflows/{job_id}/events")).status_code == 404
        r = await resume(h, who, job_id, "approve")
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND", (who, r.text)
    # nothing of that changed the run
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended

    # carol decides for the group
    r = await resume(h, "carol", job_id, "reject")
    assert r.status_code == 200, r.text
    done = await h.wait_status(job_id, JobStatus.completed)
    assert done.result["outputs"]["no"]["content"] == "refund 42"
    data = only(await events(h, "alice", job_id), "human_input_decision")
    assert data["decided_by"] == uid(h, "carol") and data["action_id"] == "reject"
    # decided: out of every inbox; carol, who decided, still sees what became of the run (and a
    # second answer is a 409, not a 404); bob, who took no part, no longer sees it
    for who in ("bob", "carol"):
        assert job_id not in await pending_ids(h, who)
    async with h.client("carol") as c:
        assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["status"] == "completed"
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 409 and code(r) == "NOT_RESUMABLE", r.text
    async with h.client("bob") as c:
        assert (await c.get(f"/api/v2/workflows/{job_id}")).status_code == 404
    async with h.client("alice") as c:
        assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["status"] == "completed"

    # bob decides another run by name
    job = await run_suspended(h, flow_id)
    r = await resume(h, "bob", job["job_id"], "approve")
    assert r.status_code == 200, r.text
    done = await h.wait_status(job["job_id"], JobStatus.completed)
    assert done.result["output"]["text"] == "Refund sent"
    assert only(await events(h, "alice", job["job_id"]), "human_input_decision")["decided_by"] == uid(h, "bob")


async def test_leaving_the_group_takes_the_right_away(h: Harness):
    group = await _group(h, "alice", "carol")
    flow_id = await upload(h, gate_flow({"approvers": [f"group:{group}"]}, name="group-only"))
    job = await run_suspended(h, flow_id)
    job_id = job["job_id"]
    assert job_id in await pending_ids(h, "carol")

    async with h.client("carol") as c:  # only the group's owner changes it
        r = await c.delete(f"/api/v1/groups/{group}/members/{await user_name(h, 'carol')}")
        assert r.status_code == 404 and code(r) == "GROUP_NOT_FOUND"
    async with h.client("alice") as c:
        r = await c.delete(f"/api/v1/groups/{group}/members/{await user_name(h, 'carol')}")
    assert r.status_code == 200 and r.json()["members"] == [], r.text

    # carol is no longer assigned: the run is not hers to see (404), nor to decide
    assert job_id not in await pending_ids(h, "carol")
    async with h.client("carol") as c:
        r = await c.get(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND", r.text
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended

    # added back (erin too): both decide again; erin's decision resolves it
    async with h.client("alice") as c:
        r = await c.post(f"/api/v1/groups/{group}/members",
                         json={"users": [await user_name(h, "carol"), uid(h, "erin")]})
    assert r.status_code == 200, r.text
    assert job_id in await pending_ids(h, "carol") and job_id in await pending_ids(h, "erin")
    r = await resume(h, "erin", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert only(await events(h, "alice", job_id), "human_input_decision")["decided_by"] == uid(h, "erin")


async def test_a_group_is_its_flow_owners(h: Harness):
    """``group:NAME`` in alice's flow is alice's group, even in dave's run of it, and even when
    dave has a group of that name: nobody takes over a flow's approvers by naming a group."""
    group = await _group(h, "alice", "carol")
    async with h.client("dave") as c:
        r = await c.post("/api/v1/groups", json={"name": group, "members": [await user_name(h, "erin")]})
    assert r.status_code == 201, r.text
    async with h.client("alice") as c:
        again = await c.post("/api/v1/groups", json={"name": group})
    assert again.status_code == 409 and code(again) == "GROUP_EXISTS"
    flow_id = await upload(h, gate_flow({"approvers": [f"group:{group}"]}, name="owner-group"))
    await _share(h, flow_id, "dave")
    job = await run_suspended(h, flow_id, who="dave")
    job_id = job["job_id"]

    assert job_id in await pending_ids(h, "carol")
    assert job_id not in await pending_ids(h, "erin")
    assert job_id not in await pending_ids(h, "dave")  # his run, but not his to decide
    r = await resume(h, "erin", job_id, "approve")
    assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"
    r = await resume(h, "dave", job_id, "approve")
    assert r.status_code == 403 and code(r) == "NOT_AN_APPROVER"
    # alice owns the flow but not the run: she is not an approver of it and does not see it
    async with h.client("alice") as c:
        assert (await c.get(f"/api/v2/workflows/{job_id}")).status_code == 404
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)


async def test_self_approval(h: Harness):
    alice, bob = await user_name(h, "alice"), await user_name(h, "bob")
    # the owner named among the approvers decides (allow_self_approval defaults to true)
    flow_id = await upload(h, gate_flow({"approvers": [alice, bob]}, name="self-ok"))
    job = await run_suspended(h, flow_id)
    assert job["job_id"] in await pending_ids(h, "alice")
    r = await resume(h, "alice", job["job_id"], "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job["job_id"], JobStatus.completed)

    # allow_self_approval: false: the owner's decision is a 403 even though she is named
    flow_id = await upload(h, gate_flow({"approvers": [alice, bob], "allow_self_approval": False}, name="self-no"))
    job = await run_suspended(h, flow_id)
    r = await resume(h, "alice", job["job_id"], "approve")
    assert r.status_code == 403 and code(r) == "NOT_AN_APPROVER", r.text
    assert "allow_self_approval" in r.json()["detail"]["message"]
    assert (await h.store.get_job(job["job_id"])).status == JobStatus.suspended
    r = await resume(h, "bob", job["job_id"], "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job["job_id"], JobStatus.completed)
    assert only(await events(h, "alice", job["job_id"]), "human_input_decision")["decided_by"] == uid(h, "bob")


def _cli(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    return signoff_cli(*args, "--api-url", url, "--api-key", key)


async def test_the_cli_groups_and_pending(h: Harness, live: str):
    alice_key, bob_key, carol_key = h.users["alice"][1], h.users["bob"][1], h.users["carol"][1]
    group = f"ops-{uuid.uuid4().hex[:6]}"
    carol, bob = await user_name(h, "carol"), await user_name(h, "bob")
    made = await asyncio.to_thread(_cli, live, alice_key, "groups", "create", group, carol)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"group:{group}\t{carol}"
    flow_id = await upload(h, gate_flow({"approvers": [bob, f"group:{group}"]}, name="cli-pending"))
    own = await run_suspended(h, await upload(h, gate_flow({}, name="bobs"), who="bob"), who="bob")  # bob's own
    assigned = await run_suspended(h, flow_id)  # alice's run, assigned to bob

    listed = await asyncio.to_thread(_cli, live, bob_key, "pending", "--json")
    assert listed.returncode == 0, listed.stderr
    items = {i["job_id"]: i for i in json.loads(listed.stdout)}
    assert own["job_id"] in items and assigned["job_id"] in items
    assert items[assigned["job_id"]]["flow_id"] == flow_id
    text = await asyncio.to_thread(_cli, live, bob_key, "pending", "--flow", flow_id)
    assert text.returncode == 0 and assigned["job_id"] in text.stdout and own["job_id"] not in text.stdout

    for change in (("remove", group, carol), ("add", group, carol, bob)):
        out = await asyncio.to_thread(_cli, live, alice_key, "groups", *change)
        assert out.returncode == 0, out.stderr
        carol_sees = assigned["job_id"] in await pending_ids(h, "carol")
        assert carol_sees == (change[0] == "add")
    listed = await asyncio.to_thread(_cli, live, alice_key, "groups", "list")
    lines = dict(line.split("\t") for line in listed.stdout.splitlines())
    assert sorted(lines[f"group:{group}"].split(", ")) == sorted([carol, bob])
    carol_pending = await asyncio.to_thread(_cli, live, carol_key, "pending")
    assert assigned["job_id"] in carol_pending.stdout
    decided = await asyncio.to_thread(_cli, live, carol_key, "resume", assigned["job_id"], "--action", "approve")
    assert decided.returncode == 0, decided.stderr
    await h.wait_status(assigned["job_id"], JobStatus.completed)
    async with h.client("bob") as c:
        await c.post("/api/v2/workflows/stop", json={"job_id": own["job_id"]})


async def test_the_cli_mutes(h: Harness, live: str):
    """bob mutes alice with `signoff mutes`: her request naming him leaves his pending list, and
    comes back when he unmutes her (docs/security.md, "Fan-out and approvers")."""
    bob_key = h.users["bob"][1]
    alice, bob = await user_name(h, "alice"), await user_name(h, "bob")
    assigned = await run_suspended(h, await upload(h, gate_flow({"approvers": [bob]}, name="cli-mutes")))
    assert assigned["job_id"] in await pending_ids(h, "bob")
    muted = await asyncio.to_thread(_cli, live, bob_key, "mutes", "add", alice)
    assert muted.returncode == 0 and muted.stdout.strip() == f"muted {alice}", muted.stderr
    listed = await asyncio.to_thread(_cli, live, bob_key, "mutes", "list", "--json")
    assert listed.returncode == 0 and [m["name"] for m in json.loads(listed.stdout)] == [alice], listed.stderr
    assert assigned["job_id"] not in await pending_ids(h, "bob")
    unknown = await asyncio.to_thread(_cli, live, bob_key, "mutes", "add", "nobody-" + uuid.uuid4().hex)
    assert unknown.returncode != 0 and "USER_NOT_FOUND" in unknown.stderr
    removed = await asyncio.to_thread(_cli, live, bob_key, "mutes", "remove", alice)
    assert removed.returncode == 0, removed.stderr
    assert (await asyncio.to_thread(_cli, live, bob_key, "mutes", "list")).stdout.strip() == "(nobody muted)"
    assert assigned["job_id"] in await pending_ids(h, "bob")
    async with h.client("alice") as c:
        await c.post("/api/v2/workflows/stop", json={"job_id": assigned["job_id"]})


async def test_an_approvers_decisions_in_others_runs_are_in_their_history_and_nobody_elses(h: Harness):
    """bob decides a request of alice's run and votes on another's: both are in bob's decision
    history page (DESIGN §10, the audit a reviewer reads), with the run's other requests left
    out; carol, an approver who decided nothing, sees neither; the run stays visible to bob after
    it ended (he took part), not to carol."""
    from tests.integration.api.test_trust import signed_in

    bob, carol, erin = await user_name(h, "bob"), await user_name(h, "carol"), await user_name(h, "erin")
    flow_id = await upload(h, gate_flow({"approvers": [bob, carol]}, name=f"bob decides {uuid.uuid4().hex[:6]}"))
    quorum = await upload(h, gate_flow({"approvers": [bob, carol, erin], "required_approvals": 2},
                                       name=f"bob votes {uuid.uuid4().hex[:6]}"))
    decided = (await run_suspended(h, flow_id))["job_id"]
    voted = (await run_suspended(h, quorum))["job_id"]
    assert (await resume(h, "bob", decided, "reject")).status_code == 200
    assert (await resume(h, "bob", voted, "approve")).json()["status"] == "vote_recorded"
    assert (await resume(h, "erin", voted, "approve")).status_code == 200  # the second vote decides
    await h.wait_status(decided, JobStatus.completed)
    await h.wait_status(voted, JobStatus.completed)

    async def history(who: str) -> str:
        async with h.client() as c:  # a browser: the session cookie, no API key header
            await signed_in(c, h.users[who][1])
            r = await c.get("/history")
        assert r.status_code == 200
        return r.text

    page = await history("bob")
    assert f"/runs/{decided}/requests/gate:{decided}" in page
    assert f"/runs/{voted}/requests/gate:{voted}" in page
    page = await history("carol")
    assert decided not in page and voted not in page
    async with h.client("bob") as c:
        assert (await c.get(f"/api/v2/workflows/{decided}")).status_code == 200  # he decided it
    async with h.client("carol") as c:
        assert (await c.get(f"/api/v2/workflows/{decided}")).status_code == 404  # assigned once, decided nothing


async def test_a_name_nobody_has_matches_nobody_and_the_run_still_pauses(h: Harness):
    """A typo in ``approvers`` (a name no user has) is nobody: the request waits for the real
    approvers, and the pause is persisted as for any other gate."""
    typo = f"bbo-{uuid.uuid4().hex[:6]}"
    flow_id = await upload(h, gate_flow({"approvers": [typo, await user_name(h, "bob")]}, name="typo"))
    job = await run_suspended(h, flow_id)
    job_id = job["job_id"]
    assert job_id in await pending_ids(h, "bob")
    refused = await resume(h, "carol", job_id, "approve")
    assert refused.status_code == 404, refused.text  # not hers to see: no approver by that name
    r = await resume(h, "bob", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)


async def test_a_job_carried_past_a_change_of_its_row_is_claimed_as_it_is_then(h: Harness, monkeypatch):
    """The API seals the job it read into the check it carries (issue 33); the worker takes it
    instead of reading the job, and its claim holds only while the job's row is as the API read
    it. Here another attempt claims the request and lets it go between the API's read and the
    worker's decision: the job waits for the same request, its row changed. The decision's one
    write is refused, and the worker claims the job as it is then and applies the decision: 200,
    one decision, the run completed (and its result in the answer)."""
    flow_id = await upload(h, gate_flow({}, name="carried-job"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    backend = h.service.temporal
    sent = backend.resume

    async def after_the_read(job, request_id, decision, decided_by, **kw):
        assert kw.get("checked"), "the API carries its check, with the job"
        assert (await h.store.claim_decision(job_id, request_id, "elsewhere")).won
        assert await h.store.rollback_resume_claim(job_id, "elsewhere")
        now = await h.store.get_job(job_id)
        assert now.waits_for(request_id) and now.updated_at != job.updated_at
        return await sent(job, request_id, decision, decided_by, **kw)

    monkeypatch.setattr(backend, "resume", after_the_read)
    r = await resume(h, "alice", job_id, "approve")
    monkeypatch.undo()
    assert r.status_code == 200, r.text
    assert r.json()["run"]["status"] == "completed", r.text
    done = await h.wait_status(job_id, JobStatus.completed)
    assert r.json()["run"]["output"] is not None and done.result["output"]["text"] == r.json()["run"]["output"]["text"]
    assert len([e for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]) == 1


async def test_a_check_carried_past_a_change_of_access_is_refused_not_applied(h: Harness, monkeypatch):
    """The API checks a decision and carries that check to the worker (engine/carried.py), which
    does not read the decider again. Carol passes the API's check as a member of the group the
    request names, and leaves the group before the worker's decision: the decision's transaction
    finds her access note, writes nothing, and the worker, checking her from the store, refuses it
    (403 NOT_AN_APPROVER); the run still waits, and a member decides it. A check carried for
    another person, or not sealed with the deployment's key, is not taken: the worker checks the
    decider itself."""
    from signoff.engine.carried import Checked, seal_checked
    from signoff.engine.models import Decision, utcnow
    from signoff.engine.secrets import SecretBox

    group = await _group(h, "alice", "carol", "erin")
    flow_id = await upload(h, gate_flow({"approvers": [f"group:{group}"]}, name="carried-check"))
    job_id = (await run_suspended(h, flow_id))["job_id"]

    backend = h.service.temporal
    sent = backend.resume

    async def after_the_check(job, request_id, decision, decided_by, **kw):
        assert kw.get("checked"), "the API carries its check"
        await h.store.remove_group_members(uid(h, "alice"), group, [uid(h, "carol")])  # between check and decision
        return await sent(job, request_id, decision, decided_by, **kw)

    monkeypatch.setattr(backend, "resume", after_the_check)
    r = await resume(h, "carol", job_id, "approve")
    monkeypatch.undo()
    assert r.status_code == 403 and code(r) == "NOT_AN_APPROVER", r.text
    stored = await h.store.get_job(job_id)
    assert stored.status == JobStatus.suspended and stored.pending is not None
    assert [e for e in await h.store.read_events(job_id) if e.event == "human_input_decision"] == []

    # a stranger's decision with a check that is not theirs (carol's, for this request), or one not
    # sealed with the deployment's key: checked from the store, refused
    job = await h.store.get_job(job_id)
    box = SecretBox.for_settings(h.settings)
    carols = seal_checked(box, Checked(job_id=job_id, request_id=f"gate:{job_id}", user_id=uid(h, "carol"),
                                       name="carol", authority=f"group:{group}", checked_at=utcnow()))
    forged = SecretBox(SecretBox.for_settings(h.settings)._fernet.generate_key())  # another key
    strangers = seal_checked(forged, Checked(job_id=job_id, request_id=f"gate:{job_id}", user_id=uid(h, "dave"),
                                             name="dave", authority="approver", checked_at=utcnow()))
    for checked in (carols, strangers):
        try:
            await backend.resume(job, f"gate:{job_id}", Decision(action_id="approve"), uid(h, "dave"), checked=checked)
        except Exception as err:  # noqa: BLE001 - the refusal as the service raises it
            assert getattr(err, "code", None) == "NOT_AN_APPROVER", err
        else:
            raise AssertionError("applied on a check that was not the decider's")
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended

    r = await resume(h, "erin", job_id, "approve")  # still a member: her check carried, applied
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    decided = only(await events(h, "alice", job_id), "human_input_decision")
    assert decided["decided_by"] == uid(h, "erin")
    (receipt,) = [x.body for x in await h.store.read_receipts(job_id)]
    assert receipt["authority"] == f"group:{group}" and receipt["decided_by"]["id"] == uid(h, "erin")
