"""Being asked cannot be turned into a flood (docs/security.md, "Fan-out and approvers"), on SQLite
and PostgreSQL, through the real app, worker and Temporal dev server, days fast-forwarded per
workflow, to real webhook endpoints on 127.0.0.1:

- a user has at most SIGNOFF_MAX_WEBHOOKS_PER_USER webhooks: one more is 409 WEBHOOK_LIMIT;
- ``remind_every`` has a floor (SIGNOFF_MIN_REMIND_EVERY_SECONDS, 60 s): a shorter one is 422
  FLOW_INVALID naming the node and the floor, at save and through a submit's tweaks; a request
  sends at most SIGNOFF_MAX_REMINDERS reminders, then waits on unreminded;
- a person mutes a requester: that requester's requests reach neither their pending list, nor
  their inbox page, nor their webhooks; the request still waits for its other approvers;
- a requester has at most SIGNOFF_MAX_WAITING_FOR_OTHERS requests waiting on other people: the
  next run that would ask someone else fails with WAITING_ON_OTHERS_LIMIT before anyone is asked.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest_asyncio

from signoff.engine.models import TERMINAL_STATUSES, JobStatus
from signoff.workflows.types import FlowRunInput
from tests.helpers import eventually
from tests.integration.decisions.gate_world import (  # noqa: F401 - the world fixture
    Receiver,
    events,
    fast_forward,
    gate_flow,
    name_of,
    pending_ids,
    register_webhook,
    resume,
    save_flow,
    start_suspended,
    world,
)

HOUR = timedelta(hours=1)
SECRET = "fan-out-secret-0123456789"


@pytest_asyncio.fixture
async def receivers(world) -> AsyncIterator[Any]:
    """Make receivers allowed by the egress policy; afterwards every webhook and mute of every
    user goes (the world outlives the test)."""
    h, _ = world
    made: list[Receiver] = []

    def make() -> Receiver:
        r = Receiver()
        h.egress.add(r)
        made.append(r)
        return r

    yield make
    for who in h.users:
        async with h.client(who) as c:
            for hook in (await c.get("/api/v1/webhooks")).json():
                assert (await c.delete(f"/api/v1/webhooks/{hook['id']}")).status_code == 204
            for muted in (await c.get("/api/v1/users/me/mutes")).json():
                assert (await c.delete(f"/api/v1/users/me/mutes/{muted['id']}")).status_code == 204
    for r in made:
        r.close()


async def _stop(h, job_id: str, user: str = "alice") -> None:
    async with h.client(user) as c:
        r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
    assert r.status_code == 200, r.text


# ---- webhooks per user -------------------------------------------------------------------------


async def test_a_user_registers_at_most_the_webhook_limit(world, receivers):
    h, _ = world
    limit = h.settings.max_webhooks_per_user
    assert limit == 20  # the default
    rx = receivers()
    made = [await register_webhook(h, "mallory", f"{rx.url}/{i}", SECRET) for i in range(limit)]
    async with h.client("mallory") as c:
        r = await c.post("/api/v1/webhooks", json={"url": f"{rx.url}/over", "secret": SECRET})
        assert r.status_code == 409, r.text
        assert r.json()["detail"]["code"] == "WEBHOOK_LIMIT"
        assert "SIGNOFF_MAX_WEBHOOKS_PER_USER" in r.json()["detail"]["message"]
        assert len((await c.get("/api/v1/webhooks")).json()) == limit  # nothing written
        # another user's limit is their own
    await register_webhook(h, "carol", rx.url, SECRET)
    async with h.client("mallory") as c:
        assert (await c.delete(f"/api/v1/webhooks/{made[0]}")).status_code == 204
    await register_webhook(h, "mallory", f"{rx.url}/again", SECRET)  # room for one again


# ---- reminders ---------------------------------------------------------------------------------


async def test_remind_every_below_the_floor_is_refused_at_save_and_at_submit(world):
    h, _ = world
    assert h.settings.min_remind_every_seconds == 60  # the default
    for every in (0.05, 5, {"value": 59, "unit": "Seconds"}):
        async with h.client("alice") as c:
            r = await c.post("/api/v1/flows", json=gate_flow("floods", remind_every=every))
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["code"] == "FLOW_INVALID"
        problems = [p for p in detail["problems"] if "remind_every" in p["message"]]
        assert len(problems) == 1 and problems[0]["node"] == "gate", detail
        assert "floor of 60 seconds" in problems[0]["message"] and "SIGNOFF_MIN_REMIND_EVERY_SECONDS" in problems[0][
            "message"]
    flow_id = await save_flow(h, gate_flow("at the floor", remind_every={"value": 1, "unit": "Minutes"}))
    # a submit's tweaks are the flow too
    async with h.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "x", "mode": "background",
                                                     "tweaks": {"gate": {"remind_every": 1}}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["code"] == "FLOW_INVALID" and "floor" in r.text


async def test_a_request_sends_at_most_the_reminder_cap_then_waits_on(world, receivers, monkeypatch):
    h, skipper = world
    assert h.settings.max_reminders == 24 == FlowRunInput.model_fields["max_reminders"].default  # the default
    cap = 4  # the cap is the subject, not its value: each reminder is a webhook delivery through Temporal
    monkeypatch.setattr(h.settings, "max_reminders", cap)
    rx = receivers()
    await register_webhook(h, "alice", rx.url, SECRET, events=["human_input_reminder"])
    flow_id = await save_flow(h, gate_flow("reminds hourly", remind_every={"value": 1, "unit": "Hours"}))
    job_id = (await start_suspended(h, flow_id))["job_id"]

    assert await fast_forward(h, skipper, job_id, (cap + 6) * HOUR + HOUR / 2)
    reminders = [data["reminder"] for name, data in await events(h, job_id) if name == "human_input_reminder"]
    assert reminders == list(range(1, cap + 1))
    await eventually(lambda: len(rx.events(job_id)) == cap, timeout=30, what=f"{cap} reminder deliveries")
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended  # it still waits
    assert await fast_forward(h, skipper, job_id, 24 * HOUR)
    assert [name for name, _ in await events(h, job_id)].count("human_input_reminder") == cap
    assert (await resume(h, "alice", job_id, "approve")).status_code == 200
    await h.wait_status(job_id, JobStatus.completed)
    assert len(rx.events(job_id)) == cap


# ---- mutes -------------------------------------------------------------------------------------


async def _inbox_page(h, who: str) -> str:
    """``who``'s inbox page, signed in with their API key as a browser is."""
    async with h.client() as c:
        token = re.search(r'name="token" value="([^"]+)"', (await c.get("/sign-in")).text)
        assert token
        r = await c.post("/sign-in", data={"token": token.group(1), "api_key": h.users[who][1], "next": "/"})
        assert r.status_code == 303, r.text
        r = await c.get("/")
    assert r.status_code == 200, r.text[:500]
    return r.text


async def test_the_mutes_api(world, receivers):
    h, _ = world
    alice, mallory = await name_of(h, "alice"), await name_of(h, "mallory")
    async with h.client("bob") as c:
        assert (await c.get("/api/v1/users/me/mutes")).json() == []
        r = await c.put(f"/api/v1/users/me/mutes/{mallory}")
        assert r.status_code == 200 and r.json() == {"id": h.users["mallory"][0], "name": mallory}, r.text
        assert (await c.put(f"/api/v1/users/me/mutes/{h.users['alice'][0]}")).status_code == 200  # by id
        assert (await c.put(f"/api/v1/users/me/mutes/{alice}")).status_code == 200  # twice: the same
        assert [m["name"] for m in (await c.get("/api/v1/users/me/mutes")).json()] == [mallory, alice]
        r = await c.put("/api/v1/users/me/mutes/nobody-by-that-name")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "USER_NOT_FOUND"
        r = await c.put("/api/v1/users/me/mutes/a%00b")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "USER_NOT_FOUND"
        r = await c.put(f"/api/v1/users/me/mutes/{await name_of(h, 'bob')}")
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST"
        assert (await c.delete(f"/api/v1/users/me/mutes/{mallory}")).status_code == 204
        assert (await c.delete(f"/api/v1/users/me/mutes/{mallory}")).status_code == 204  # idempotent
        assert [m["name"] for m in (await c.get("/api/v1/users/me/mutes")).json()] == [alice]
    async with h.client("carol") as c:
        assert (await c.get("/api/v1/users/me/mutes")).json() == []  # bob's are his
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app), base_url="http://t") as anon:
        assert (await anon.get("/api/v1/users/me/mutes")).status_code == 401


async def test_a_muted_requester_reaches_neither_the_inbox_nor_the_webhooks(world, receivers):
    h, _ = world
    bob, carol = await name_of(h, "bob"), await name_of(h, "carol")
    bob_rx, carol_rx = receivers(), receivers()
    await register_webhook(h, "bob", bob_rx.url, SECRET)
    await register_webhook(h, "carol", carol_rx.url, SECRET)
    async with h.client("bob") as c:
        assert (await c.put(f"/api/v1/users/me/mutes/{await name_of(h, 'alice')}")).status_code == 200

    flow_id = await save_flow(h, gate_flow("asks bob and carol", approvers=[bob, carol]))
    job_id = (await start_suspended(h, flow_id))["job_id"]
    await eventually(lambda: carol_rx.events(job_id) == ["human_input_required"], timeout=20,
                     what="carol's delivery")
    assert job_id in await pending_ids(h, "carol") and job_id in await _inbox_page(h, "carol")
    assert job_id not in await pending_ids(h, "bob")
    assert job_id not in await _inbox_page(h, "bob")
    # the request still waits for its other approver
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    await eventually(lambda: carol_rx.events(job_id) == ["human_input_required", "human_input_decision"], timeout=20,
                     what="carol's decision delivery")
    assert bob_rx.delivered(job_id) == [] and bob_rx.posts == []  # nothing of it, ever

    # muting one requester mutes no one else: mallory's request reaches bob
    mallory_flow = await save_flow(h, gate_flow("mallory asks bob", approvers=[bob]), user="mallory")
    theirs = (await start_suspended(h, mallory_flow, user="mallory"))["job_id"]
    await eventually(lambda: bob_rx.events(theirs) == ["human_input_required"], timeout=20, what="bob's delivery")
    assert theirs in await pending_ids(h, "bob")
    await _stop(h, theirs, "mallory")

    # unmuted: alice's waiting requests show again, and reach his webhooks
    again = (await start_suspended(h, flow_id))["job_id"]
    assert again not in await pending_ids(h, "bob")
    async with h.client("bob") as c:
        assert (await c.delete(f"/api/v1/users/me/mutes/{await name_of(h, 'alice')}")).status_code == 204
    assert again in await pending_ids(h, "bob") and again in await _inbox_page(h, "bob")
    assert (await resume(h, "bob", again, "reject")).status_code == 200
    await h.wait_status(again, JobStatus.completed)
    await eventually(lambda: bob_rx.events(again) == ["human_input_decision"], timeout=20, what="bob's delivery")


# ---- requests waiting on others ----------------------------------------------------------------


async def _waiting(h, flow_id: str) -> str:
    """A background run of alice's in a session of its own (a run in the same session would
    supersede the one that waits there), once it waits at its gate."""
    async with h.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 42",
                                                     "mode": "background", "session_id": uuid.uuid4().hex})
    assert r.status_code == 200, r.text
    job = await h.wait_status(r.json()["job_id"], JobStatus.suspended, *TERMINAL_STATUSES)
    assert job.status == JobStatus.suspended, job.status
    return job.job_id


async def test_requests_waiting_on_others_are_capped_per_requester(world, receivers, monkeypatch):
    h, _ = world
    assert h.settings.max_waiting_for_others == 100  # the default; 2 here
    monkeypatch.setattr(h.settings, "max_waiting_for_others", 2)
    bob = await name_of(h, "bob")
    bob_rx = receivers()
    await register_webhook(h, "bob", bob_rx.url, SECRET)
    asks_bob = await save_flow(h, gate_flow("asks bob", approvers=[bob]))
    asks_herself = await save_flow(h, gate_flow("asks alice"))
    waiting = [await _waiting(h, asks_bob) for _ in range(2)]
    mine = await _waiting(h, asks_herself)  # her own requests do not count

    async with h.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": asks_bob, "input_value": "one more",
                                                     "mode": "background", "session_id": uuid.uuid4().hex})
        assert r.status_code == 200, r.text
        over = r.json()["job_id"]
        job = await h.wait_status(over, JobStatus.suspended, *TERMINAL_STATUSES)
        assert job.status == JobStatus.failed, job.status
        assert job.error["type"] == "WaitingOnOthersLimit", job.error
        assert "SIGNOFF_MAX_WAITING_FOR_OTHERS=2" in job.error["error"]
        r = await c.get(f"/api/v2/workflows/{over}")
        assert r.status_code == 200 and r.json()["status"] == "failed", r.text
    names = [name for name, _ in await events(h, over)]
    assert "human_input_required" not in names and "run_failed" in names, names
    assert over not in await pending_ids(h, "bob")
    await eventually(lambda: sorted(b["job_id"] for b in bob_rx.delivered()) == sorted(waiting), timeout=20,
                     what="bob's deliveries of the two that wait")
    assert bob_rx.delivered(over) == []

    # another requester's budget is their own
    theirs = (await start_suspended(h, await save_flow(h, gate_flow("m asks bob", approvers=[bob]), user="mallory"),
                                    user="mallory"))["job_id"]
    await _stop(h, theirs, "mallory")
    # one decided: room for one again
    assert (await resume(h, "bob", waiting[0], "approve")).status_code == 200
    await h.wait_status(waiting[0], JobStatus.completed)
    again = await _waiting(h, asks_bob)
    for job_id in (waiting[1], again, mine):
        await _stop(h, job_id)



async def test_the_waiting_cap_holds_at_a_gate_reached_after_a_decision(world, receivers, monkeypatch):
    """The budget is checked at every pause, also the one a decision leads to: alice decides her
    own first gate, the second would ask bob while her budget is spent, so the run fails there
    with WAITING_ON_OTHERS_LIMIT; her decision was taken (the resume says so) and bob is not
    asked."""
    h, _ = world
    monkeypatch.setattr(h.settings, "max_waiting_for_others", 1)
    bob = await name_of(h, "bob")
    bob_rx = receivers()
    await register_webhook(h, "bob", bob_rx.url, SECRET)
    spent = await _waiting(h, await save_flow(h, gate_flow("asks bob first", approvers=[bob])))
    two = await save_flow(h, {
        "name": "alice, then bob",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "then", "type": "HumanInput", "params": {"decisions": ["Ship"], "approvers": [bob]}},
            {"id": "done", "type": "ChatOutput", "params": {"text": "shipped"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "then.prompt"},
            {"from": "then.branch_ship", "to": "done.input_value"},
        ],
    })
    job_id = await _waiting(h, two)
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    job = await h.wait_status(job_id, *TERMINAL_STATUSES)
    assert job.status == JobStatus.failed, job.status
    assert job.error["type"] == "WaitingOnOthersLimit", job.error
    names = [name for name, _ in await events(h, job_id)]
    assert names.count("human_input_required") == 1 and "human_input_decision" in names, names
    assert job_id not in await pending_ids(h, "bob")
    await eventually(lambda: [b["job_id"] for b in bob_rx.delivered()] == [spent], timeout=20,
                     what="bob's delivery of the one that waits")
    await _stop(h, spent)
