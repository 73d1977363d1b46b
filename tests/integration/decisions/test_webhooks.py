"""Webhooks (DESIGN §9), on SQLite and PostgreSQL, through the real app, worker and Temporal dev
server, to real HTTP endpoints on 127.0.0.1 (let through by the egress allow-list, port by port):

- a registered endpoint receives the human_input_* events of its owner's runs and of the
  requests its owner may decide (required, vote, reminder, escalated, decision, expired) as JSON
  with a link to the card, each signed ``X-Signoff-Signature: sha256=<HMAC-SHA256 of the raw
  body>`` with the webhook's secret (checked here independently);
- nobody else's webhook gets them (a user of the same service registers one: it gets nothing of
  alice's runs, and cannot read alice's delivery log);
- an endpoint that answers 500 once gets the event again (the delivery log shows both
  attempts); a dead endpoint changes nothing for the run, its attempts are logged as failed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest_asyncio

from signoff.engine.models import JobStatus
from tests.helpers import eventually
from tests.integration.decisions.gate_world import (  # noqa: F401 - the world fixture
    Receiver,
    closed_port,
    deliveries,
    events,
    fast_forward,
    gate_flow,
    name_of,
    register_webhook,
    resume,
    save_flow,
    signed,
    start_suspended,
    world,
)

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
SECRET = "alice-secret-0123456789"


@pytest_asyncio.fixture
async def receivers(world) -> AsyncIterator[Any]:
    """Make receivers (``make(fail_first=0)``), each allowed by the egress policy; afterwards they
    close and every webhook of every user is deleted (the world outlives the test)."""
    h, _ = world
    made: list[Receiver] = []

    def make(fail_first: int = 0) -> Receiver:
        r = Receiver(fail_first=fail_first)
        h.egress.add(r)
        made.append(r)
        return r

    yield make
    for who in h.users:
        async with h.client(who) as c:
            for hook in (await c.get("/api/v1/webhooks")).json():
                assert (await c.delete(f"/api/v1/webhooks/{hook['id']}")).status_code == 204
    for r in made:
        r.close()


def check_delivery(h, body: dict[str, Any], stored: dict[int, Any], job_id: str, flow_id: str, secret: str) -> None:
    """One delivery as a receiver must be able to trust it: signed over the exact bytes with
    the secret, the documented fields, the same event as the run's log, a link to the card."""
    post = body["_post"]
    assert post["headers"]["x-signoff-signature"] == signed(secret, post["raw"])
    assert post["headers"]["x-signoff-signature"] != signed(secret + "x", post["raw"])
    assert post["headers"]["x-signoff-event"] == body["event"]
    assert post["headers"]["content-type"] == "application/json"
    assert post["headers"]["x-signoff-delivery"].startswith(f"{job_id}:{body['seq']}:")
    assert set(body) - {"_post"} == {"event", "seq", "at", "job_id", "flow_id", "session_id", "data", "card_url"}
    assert body["job_id"] == job_id and body["flow_id"] == flow_id
    event = stored[body["seq"]]
    assert body["event"] == event.event and body["event"].startswith("human_input_")
    assert body["data"] == event.data
    assert body["at"] == event.created_at.isoformat()
    # the decision card of that request on the person's pages
    assert body["card_url"] == f"{h.settings.effective_api_url}/runs/{job_id}/requests/gate:{job_id}"


async def open_card(h, user: str, url: str) -> str:
    """Follow a delivery's card link as ``user`` does in a browser: signed in with their API key on
    the sign-in page, then the page the link names (its HTML)."""
    path = url.removeprefix(h.settings.effective_api_url)
    assert path.startswith("/runs/"), url
    async with h.client() as c:  # a browser: no API key header, a session cookie
        r = await c.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/sign-in"), r.status_code
        r = await c.get(r.headers["location"])
        token = re.search(r'name="token" value="([^"]+)"', r.text)
        assert r.status_code == 200 and token, r.text[:500]
        r = await c.post("/sign-in", data={"token": token.group(1), "api_key": h.users[user][1], "next": path})
        assert r.status_code == 303 and r.headers["location"] == path, (r.status_code, r.headers)
        r = await c.get(path)
    assert r.status_code == 200, r.text[:500]
    return r.text


async def _stored(h, job_id: str) -> dict[int, Any]:
    return {e.seq: e for e in await h.store.read_events(job_id)}


async def _human_events(h, job_id: str) -> list[str]:
    return [name for name, _ in await events(h, job_id) if name.startswith("human_input_")]


async def test_signed_events_reach_the_owner_and_the_approvers_only(world, receivers):
    h, skipper = world
    bob, carol, dave = [await name_of(h, who) for who in ("bob", "carol", "dave")]
    alice_rx, bob_rx, carol_rx, mallory_rx = receivers(), receivers(), receivers(), receivers()
    alice_hook = await register_webhook(h, "alice", alice_rx.url + "/hooks/alice", SECRET)
    await register_webhook(h, "bob", bob_rx.url, "bob-secret-0123456789")
    await register_webhook(h, "carol", carol_rx.url, "carol-secret-0123456789", events=["human_input_decision"])
    await register_webhook(h, "mallory", mallory_rx.url, "mallory-secret-0123456789")

    flow_id = await save_flow(h, gate_flow(
        "webhooks", approvers=[bob, carol], required_approvals=2, remind_every={"value": 1, "unit": "Days"},
        escalate_after={"value": 36, "unit": "Hours"}, escalate_to=[dave]))
    job = await start_suspended(h, flow_id)
    job_id = job["job_id"]
    await eventually(lambda: alice_rx.events(job_id) == ["human_input_required"], timeout=20,
                     what="human_input_required delivered")

    assert await fast_forward(h, skipper, job_id, DAY + HOUR)  # the first reminder
    assert await fast_forward(h, skipper, job_id, 12 * HOUR)  # the escalation (36 h)
    r = await resume(h, "bob", job_id, "approve")
    assert r.status_code == 200 and r.json()["status"] == "vote_recorded", r.text
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200 and r.json()["status"] == "resuming", r.text
    await h.wait_status(job_id, JobStatus.completed)

    expected = ["human_input_required", "human_input_reminder", "human_input_escalated", "human_input_vote",
                "human_input_vote", "human_input_decision"]  # each vote, the one that completes the quorum too
    assert await _human_events(h, job_id) == expected
    await eventually(lambda: sorted(alice_rx.events(job_id)) == sorted(expected), timeout=30,
                     what=f"alice's deliveries {expected}")
    await eventually(lambda: sorted(bob_rx.events(job_id)) == sorted(expected), timeout=30, what="bob's deliveries")
    await eventually(lambda: carol_rx.events(job_id) == ["human_input_decision"], timeout=30,
                     what="carol's decision delivery")
    stored = await _stored(h, job_id)
    for body in alice_rx.delivered(job_id):
        check_delivery(h, body, stored, job_id, flow_id, SECRET)
        assert body["_post"]["path"] == "/hooks/alice"
    for body in bob_rx.delivered(job_id):
        check_delivery(h, body, stored, job_id, flow_id, "bob-secret-0123456789")
    # the link opens the decision card of that request on the person's pages, once signed in
    card = await open_card(h, "alice", alice_rx.delivered(job_id)[0]["card_url"])
    assert "refund 42" in card and job_id in card
    by_event = {b["event"]: b for b in alice_rx.delivered(job_id)}
    votes = sorted((b["data"] for b in alice_rx.delivered(job_id) if b["event"] == "human_input_vote"),
                   key=lambda v: v["votes"])
    assert [(v["user"], v["votes"], v["required"]) for v in votes] == [
        (h.users["bob"][0], 1, 2), (h.users["carol"][0], 2, 2)]
    assert by_event["human_input_required"]["data"]["request_id"] == f"gate:{job_id}"
    assert by_event["human_input_reminder"]["data"] == {"request_id": f"gate:{job_id}", "reminder": 1}
    assert by_event["human_input_escalated"]["data"] == {"request_id": f"gate:{job_id}", "added": [dave]}
    decision = by_event["human_input_decision"]["data"]
    assert decision["action_id"] == "approve" and decision["decided_by"] == h.users["carol"][0]
    assert [v["user"] for v in decision["votes"]] == [h.users["bob"][0], h.users["carol"][0]]
    # each event once per webhook: nothing delivered twice
    assert len(alice_rx.posts) == len(alice_rx.delivered())

    # the delivery log: every attempt of alice's webhook, delivered
    async def logged():  # an attempt is logged once the endpoint has answered
        log = await deliveries(h, "alice", alice_hook)
        return log if sorted(d["event"] for d in log if d["job_id"] == job_id) == sorted(expected) else None

    log = await eventually(logged, timeout=10, what="alice's delivery log")
    assert all(d["delivered"] and d["status_code"] == 200 and d["attempt"] == 1 and d["error"] is None for d in log)
    # ... hers alone
    async with h.client("mallory") as c:
        assert (await c.get(f"/api/v1/webhooks/{alice_hook}/deliveries")).status_code == 404

    # mallory's own run reaches her webhook (it works), alice's never did
    mallory_flow = await save_flow(h, gate_flow("mallory's"), user="mallory")
    mine = await start_suspended(h, mallory_flow, user="mallory")
    await eventually(lambda: mallory_rx.events(mine["job_id"]) == ["human_input_required"], timeout=20,
                     what="mallory's own delivery")
    assert mallory_rx.delivered(job_id) == []
    assert {b["job_id"] for b in mallory_rx.delivered()} == {mine["job_id"]}
    assert alice_rx.delivered(mine["job_id"]) == [] and bob_rx.delivered(mine["job_id"]) == []
    async with h.client("mallory") as c:
        r = await c.post("/api/v2/workflows/stop", json={"job_id": mine["job_id"]})
    assert r.status_code == 200, r.text


async def test_expired_and_timed_out_decision_are_delivered(world, receivers):
    h, skipper = world
    rx = receivers()
    await register_webhook(h, "alice", rx.url, SECRET, events=["human_input_expired", "human_input_decision"])
    flow_id = await save_flow(h, gate_flow("expires", timeout=3600, on_timeout="default", default_action="reject"))
    job = await start_suspended(h, flow_id)
    job_id = job["job_id"]
    await fast_forward(h, skipper, job_id, 2 * HOUR)
    await h.wait_status(job_id, JobStatus.completed)
    await eventually(lambda: sorted(rx.events(job_id)) == ["human_input_decision", "human_input_expired"],
                     timeout=30, what="expired and decision delivered")
    stored = await _stored(h, job_id)
    for body in rx.delivered(job_id):
        check_delivery(h, body, stored, job_id, flow_id, SECRET)
    by_event = {b["event"]: b["data"] for b in rx.delivered(job_id)}
    assert by_event["human_input_decision"]["timed_out"] is True
    assert by_event["human_input_decision"]["decided_by"] is None
    assert by_event["human_input_expired"]["rerouted_to"] == "reject"
    assert len(rx.posts) == 2  # the events it did not subscribe to were not sent


async def test_an_endpoint_that_fails_once_gets_a_retry(world, receivers):
    h, _ = world
    rx = receivers(fail_first=1)
    hook = await register_webhook(h, "alice", rx.url, SECRET, events=["human_input_required"])
    flow_id = await save_flow(h, gate_flow("retried"))
    job = await start_suspended(h, flow_id)
    job_id = job["job_id"]
    await eventually(lambda: rx.events(job_id) == ["human_input_required"], timeout=30, what="the retried delivery")
    assert rx.answers == [500, 200]
    # the same bytes, signed the same, both times
    assert rx.posts[0]["raw"] == rx.posts[1]["raw"]
    assert rx.posts[1]["headers"]["x-signoff-signature"] == signed(SECRET, rx.posts[1]["raw"])
    check_delivery(h, rx.delivered(job_id)[0], await _stored(h, job_id), job_id, flow_id, SECRET)

    async def logged():
        log = await deliveries(h, "alice", hook)
        return log if len(log) == 2 else None

    log = await eventually(logged, timeout=10, what="both attempts logged")
    newest, first = log
    assert (first["attempt"], first["delivered"], first["status_code"]) == (1, False, 500)
    assert "500" in first["error"]
    assert (newest["attempt"], newest["delivered"], newest["status_code"], newest["error"]) == (2, True, 200, None)
    assert first["seq"] == newest["seq"] and first["event"] == newest["event"] == "human_input_required"

    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)


async def test_an_events_webhooks_are_one_delivery_and_its_retry_goes_to_those_that_did_not_take_it(
        world, receivers):
    """Issue 28: a pause reaching four webhooks is one deliver_event activity (not four); one
    webhook answers 500 once: the retry POSTs to it alone, the three that took the event get it
    once, and every attempt is logged."""
    h, _ = world
    steady, flaky = receivers(), receivers(fail_first=1)
    hooks = [await register_webhook(h, "alice", f"{steady.url}/{i}", SECRET, events=["human_input_required"])
             for i in range(3)]
    shaky = await register_webhook(h, "alice", flaky.url, SECRET, events=["human_input_required"])
    flow_id = await save_flow(h, gate_flow("one delivery"))
    job_id = (await start_suspended(h, flow_id))["job_id"]
    await eventually(lambda: flaky.events(job_id) == ["human_input_required"], timeout=30, what="the retried delivery")
    assert flaky.answers == [500, 200]
    assert sorted(p["path"] for p in steady.posts) == ["/0", "/1", "/2"]  # once each, retry or not
    assert all(p["code"] == 200 for p in steady.posts)

    async def logged():
        log = await deliveries(h, "alice", shaky)
        return log if len(log) == 2 else None

    newest, first = await eventually(logged, timeout=10, what="both attempts logged")
    assert (first["attempt"], first["delivered"], first["status_code"]) == (1, False, 500)
    assert (newest["attempt"], newest["delivered"], newest["status_code"]) == (2, True, 200)
    for hook in hooks:
        assert [(d["attempt"], d["delivered"]) for d in await deliveries(h, "alice", hook)] == [(1, True)]
    history = await h.service.client.get_workflow_handle(job_id).fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled.count("deliver_event") == 1 and "deliver_webhook" not in scheduled, scheduled

    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)


async def test_a_webhook_that_cannot_be_sent_fails_alone_and_the_others_are_logged_and_not_sent_again(
        world, receivers):
    """One webhook of an event whose secret cannot be opened (sealed under another key): its
    attempts are logged as failed, the other webhook takes the event once and is logged, and the
    retries go to the broken one alone."""
    h, _ = world
    rx = receivers()
    good = await register_webhook(h, "alice", f"{rx.url}/good", SECRET, events=["human_input_required"])
    broken = await register_webhook(h, "alice", f"{rx.url}/broken", SECRET, events=["human_input_required"])
    async with h.store._tx(write=True) as tx:  # the secret as another deployment key sealed it
        await tx.execute("UPDATE webhooks SET secret_ciphertext = ? WHERE id = ?", (b"gAAAAA-not-this-key", broken))
    job_id = (await start_suspended(h, await save_flow(h, gate_flow("broken secret"))))["job_id"]

    async def failed_twice():
        log = await deliveries(h, "alice", broken)
        return log if len(log) >= 2 else None

    log = await eventually(failed_twice, timeout=30, what="the broken webhook's retry logged")
    assert all(not d["delivered"] and d["error"] and d["status_code"] is None for d in log)
    assert [(d["attempt"], d["delivered"]) for d in await deliveries(h, "alice", good)] == [(1, True)]
    assert [p["path"] for p in rx.posts] == ["/good"]  # once, though the event was retried
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)


async def test_a_dead_endpoint_changes_nothing_for_the_run(world, receivers):
    h, skipper = world
    port = closed_port()
    h.egress.add(f"127.0.0.1:{port}")
    rx = receivers()  # a live webhook alongside: it gets everything
    dead = await register_webhook(h, "alice", f"http://127.0.0.1:{port}/hook", SECRET)
    await register_webhook(h, "alice", rx.url, SECRET)
    flow_id = await save_flow(h, gate_flow("dead endpoint"))
    job = await start_suspended(h, flow_id)
    job_id = job["job_id"]
    r = await resume(h, "alice", job_id, "approve")
    assert r.status_code == 200, r.text
    done = await h.wait_status(job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "approved"
    await eventually(lambda: sorted(rx.events(job_id)) == ["human_input_decision", "human_input_required"],
                     timeout=30, what="the live webhook's deliveries")

    async def failed():
        log = await deliveries(h, "alice", dead)
        return log if {d["event"] for d in log} == {"human_input_required", "human_input_decision"} else None

    log = await eventually(failed, timeout=30, what="the dead endpoint's attempts logged")
    assert all(not d["delivered"] and d["status_code"] is None and d["error"] for d in log)
    assert all(d["job_id"] == job_id for d in log)

    # the retries run out (days of backoff skipped): the run's workflow ends completed all the same
    handle = h.service.client.get_workflow_handle(job_id)
    await skipper.fast_forward(handle, timedelta(hours=2))
    assert (await handle.result())["status"] == "completed"
    log = await deliveries(h, "alice", dead)
    assert all(not d["delivered"] for d in log)
    # every attempt of the retry policy, each logged, none delivered
    assert sorted((d["event"], d["attempt"]) for d in log) == sorted(
        (event, n) for event in ("human_input_required", "human_input_decision") for n in range(1, 13))
    assert (await h.store.get_job(job_id)).status == JobStatus.completed


async def test_a_webhook_must_be_reachable_under_the_egress_policy(world):
    """The deliveries dial through the egress policy: an endpoint it does not let through is
    refused when the webhook is registered (a local port nobody allowed), as are unknown events
    and short secrets; nothing is stored."""
    h, _ = world
    port = closed_port()
    async with h.client("mallory") as c:
        r = await c.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/x", "secret": SECRET})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST", r.text
        r = await c.post("/api/v1/webhooks", json={"url": "http://169.254.169.254/latest", "secret": SECRET})
        assert r.status_code == 422, r.text
        h.egress.add(f"127.0.0.1:{port}")
        r = await c.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/x", "secret": SECRET,
                                                   "events": ["run_completed"]})
        assert r.status_code == 422, r.text
        r = await c.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/x", "secret": "short"})
        assert r.status_code == 422, r.text
        assert (await c.get("/api/v1/webhooks")).json() == []
        r = await c.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/x", "secret": SECRET})
        assert r.status_code == 201, r.text
        assert (await c.delete(f"/api/v1/webhooks/{r.json()['id']}")).status_code == 204
