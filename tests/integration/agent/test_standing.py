"""Standing approvals (DESIGN §17, docs/agent.md "Standing approvals") on a real Temporal dev
server, a real worker, the real app over HTTP, on SQLite and PostgreSQL: a tool approval's
approve with ``remember`` makes a rule; later calls of that tool in its scope run without a
pause, each recorded; revoking the rule (or the maker's share) makes the next call ask at once;
a rule covers no other session, person or flow, and an expired one nothing."""

from __future__ import annotations

import contextlib
import threading
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest

from signoff.api.app import create_app
from signoff.engine import metrics
from signoff.engine.audit.receipts import public_keys, verify_run
from signoff.engine.errors import Forbidden, InvalidStandingApproval, StandingApprovalLimit
from signoff.engine.models import Decision, JobStatus, StandingApproval, utcnow
from signoff.engine.standing import STANDING_EVENT
from tests.fixtures.fake_openai import call, say
from tests.helpers import GATE_FLOW, event_names, eventually, wait_status
from tests.integration.agent.test_agent_flow_run import agent_flow

pytestmark = pytest.mark.both_stores

HOUR = {"value": 1, "unit": "Hours"}


def _standing_used() -> float:
    """signoff_standing_approvals_used_total summed over its flow labels."""
    return sum(sample.value for family in metrics.REGISTRY.collect() for sample in family.samples
               if sample.name == "signoff_standing_approvals_used_total")


@contextlib.asynccontextmanager
async def http(settings, store, service, user):
    """The real app (its lifespan run) and a client of ``user`` speaking ASGI to it."""
    app = create_app(settings, store=store, service=service)
    key = await store.create_api_key(user.id)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                     headers={"x-api-key": key}) as client:
            yield client


def scripted(n_calls: int, hold_at: int | None = None) -> tuple[Any, threading.Event]:
    """A model that asks for ``refund`` with body ``R0``, ``R1``, ... (one call per answer) until
    ``n_calls`` tool results are in, then says "done". Its answer after ``hold_at`` tool results
    waits until the returned event is set (what the test does meanwhile happens mid-run)."""
    hold = threading.Event()

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        n = sum(1 for m in body["messages"] if m["role"] == "tool")
        if n == hold_at:
            hold.wait(60)
        if n < n_calls:
            return call("refund", {"body": f"R{n}"}, call_id=f"c{n}")
        return say("done")

    return responder, hold


async def fresh_user(store, name: str):
    return await store.create_user(f"{name}-{uuid.uuid4().hex[:8]}")


async def submit(service, user, flow, session_id: str = "s1"):
    job, _ = await service.submit(user, flow, input_value="refunds please", session_id=session_id, tweaks=None,
                                  idempotency_key=None, mode="background")
    return await service.wait_for_pause_or_end(job.job_id, timeout=60)


async def paused_at(store, job_id: str, request_id: str):
    async def check():
        j = await store.get_job(job_id)
        return j if j.status == JobStatus.suspended and j.pending and j.pending.request_id == request_id else None

    return await eventually(check, timeout=60, what=f"the pause at {request_id}")


async def test_a_standing_approval_approves_the_next_three_calls_and_stops_at_once_when_revoked(
        worker, service, store, settings, make_flow, fake_openai, tool_target):
    alice = await fresh_user(store, "alice")
    fake_openai.responder, hold = scripted(5, hold_at=4)
    flow = await make_flow(agent_flow(fake_openai, tool_target), owner=alice)
    job = await submit(service, alice, flow)
    assert job.status == JobStatus.suspended and job.pending.kind == "tool_approval"
    first = job.pending.request_id
    used_before = _standing_used()
    async with http(settings, store, service, alice) as c:
        # longer than SIGNOFF_MAX_STANDING (24 h): refused, nothing consumed
        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={"request_id": first, "decision": {
            "action_id": "approve", "remember": {"scope": "session", "for": {"value": 25, "unit": "Hours"}}}})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_STANDING_APPROVAL", r.text
        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={"request_id": first, "decision": {
            "action_id": "approve", "remember": {"scope": "forever", "for": 60}}})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_STANDING_APPROVAL", r.text
        assert (await store.get_job(job.job_id)).status == JobStatus.suspended
        assert await store.list_standing_approvals(alice.id) == []

        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={"request_id": first, "decision": {
            "action_id": "approve", "remember": {"scope": "session", "for": HOUR}}})
        assert r.status_code == 200, r.text
        # the next three calls run without a pause; the model's fifth answer waits for the test
        await eventually(lambda: len(fake_openai.requests) >= 5, timeout=60, what="the fifth model request")
        assert [h["body"] for h in tool_target.hits] == ["R0", "R1", "R2", "R3"]
        (rule,) = await store.list_standing_approvals(alice.id)
        assert (rule.maker_id, rule.flow_id, rule.tool, rule.scope, rule.session_id, rule.session_user_id) == (
            alice.id, flow.id, "refund", "session", "s1", alice.id)
        assert rule.uses == 3 and rule.request_id == first
        assert timedelta(minutes=59) < rule.expires_at - rule.created_at <= timedelta(hours=1)
        uses = [e.data for e in await store.read_events(job.job_id) if e.event == STANDING_EVENT]
        assert [u["request_id"] for u in uses] == [f"agent:{job.run_id}:{n}" for n in (2, 3, 4)]
        assert [u["proposed_args"] for u in uses] == [{"body": f"R{n}"} for n in (1, 2, 3)]
        for u in uses:  # an approve decided by the maker, on the rule's authority
            assert (u["action_id"], u["decided_by"], u["authority"], u["rule_id"], u["tool"]) == (
                "approve", alice.id, f"standing:{rule.id}", rule.id, "refund")
            assert u["executed_args"] == u["proposed_args"] and u["job_id"] == job.job_id
        assert _standing_used() - used_before == 3
        # each use has its own signed receipt, chained after the decision that made the rule
        receipts = [r.body for r in await store.read_receipts(job.job_id)]
        assert [(r["authority"], r["via"], r["decided_by"]["id"], r["request_id"]) for r in receipts] == [
            ("owner", "api", alice.id, first)] + [
            (f"standing:{rule.id}", "standing", alice.id, u["request_id"]) for u in uses]
        assert [r["executed_args"] for r in receipts[1:]] == [{"body": f"R{n}"} for n in (1, 2, 3)]
        public = (await c.get("/api/v1/audit/public-key")).json()["keys"]
        assert verify_run(receipts, public_keys(public)) is None

        listed = (await c.get("/api/v1/standing-approvals")).json()
        assert [(x["id"], x["uses"], x["status"]) for x in listed] == [(rule.id, 3, "active")]
        assert (await c.get(f"/api/v1/standing-approvals/{rule.id}")).json()["scope"] == "session"
        # revoked mid-run: the very next call asks a person
        assert (await c.delete(f"/api/v1/standing-approvals/{rule.id}")).status_code == 204
        assert (await c.get(f"/api/v1/standing-approvals/{rule.id}")).json()["status"] == "revoked"
        hold.set()
        paused = await paused_at(store, job.job_id, f"agent:{job.run_id}:5")
        assert paused.pending.tool["args"] == {"body": "R4"}
        assert [h["body"] for h in tool_target.hits] == ["R0", "R1", "R2", "R3"]
        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={
            "request_id": paused.pending.request_id, "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert [h["body"] for h in tool_target.hits] == ["R0", "R1", "R2", "R3", "R4"]
    assert await event_names(store, job.job_id) == [
        "human_input_required", "human_input_decision", "standing_approval_created",
        STANDING_EVENT, STANDING_EVENT, STANDING_EVENT, "human_input_required", "human_input_decision", "end"]
    assert (await store.get_standing_approval(rule.id)).uses == 3


async def test_a_rule_covers_no_other_session_person_or_flow_and_an_expired_one_nothing(
        worker, service, store, settings, make_flow, fake_openai, tool_target):
    alice, bob = await fresh_user(store, "alice"), await fresh_user(store, "bob")
    fake_openai.responder, _ = scripted(2)
    flow = await make_flow(agent_flow(fake_openai, tool_target), owner=alice)
    other_flow = await make_flow(agent_flow(fake_openai, tool_target), owner=alice)
    await store.grant_share(flow.id, bob.id, ["execute"])
    now = utcnow()

    def rule(**fields) -> StandingApproval:
        base = dict(id=f"sa_{uuid.uuid4().hex}", maker_id=alice.id, flow_id=flow.id, flow_owner_id=alice.id,
                    tool="refund", scope="session", session_id="s1", session_user_id=alice.id, job_id="j",
                    request_id="r", created_at=now, expires_at=now + timedelta(hours=1))
        return StandingApproval(**{**base, **fields})

    for r in (rule(expires_at=now - timedelta(seconds=1)),  # expired
              rule(session_id="s2"),  # another session of alice's
              rule(session_user_id=bob.id),  # bob's session s1, not alice's
              rule(scope="flow", flow_id=other_flow.id, session_id=None, session_user_id=None),  # another flow
              rule(scope="flow", maker_id=bob.id, session_id=None, session_user_id=None)):  # bob may not decide it
        await store.create_standing_approval(r)
    job = await submit(service, alice, flow, session_id="s1")
    assert job.status == JobStatus.suspended, job.error  # asked: none of them covers it
    assert job.pending.tool["args"] == {"body": "R0"}
    assert STANDING_EVENT not in await event_names(store, job.job_id)

    # the cap: as many rules in force as one person may have refuses the decision (nothing applied)
    for _ in range(settings.max_standing_per_user - 1):  # alice has one in force already (s2)
        await store.create_standing_approval(rule(flow_id=other_flow.id))
    with pytest.raises(StandingApprovalLimit):
        await service.resume(alice, job.job_id, job.pending.request_id,
                             Decision(action_id="approve", remember={"scope": "session", "for": 60}))
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    for r in await store.list_standing_approvals(alice.id):
        if r.flow_id == other_flow.id:
            await store.revoke_standing_approval(r.id, utcnow())

    # bob (who may see nothing of alice's run) gets 404, as for any decision
    async with http(settings, store, service, bob) as c:
        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={
            "request_id": job.pending.request_id, "decision": {"action_id": "approve", "remember": {
                "scope": "flow", "for": 60}}})
        assert r.status_code == 404, r.text
    # the positive control: a rule of this session covers the next call
    await store.create_standing_approval(rule())
    await service.resume(alice, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
    assert done.status == JobStatus.completed, done.error
    assert [h["body"] for h in tool_target.hits] == ["R0", "R1"]
    assert (await event_names(store, job.job_id)).count(STANDING_EVENT) == 1


async def test_a_revoked_share_ends_the_rule_at_once_and_refuses_its_maker(
        worker, service, store, settings, make_flow, fake_openai, tool_target):
    alice, bob = await fresh_user(store, "alice"), await fresh_user(store, "bob")
    fake_openai.responder, hold = scripted(3, hold_at=2)
    flow = await make_flow(agent_flow(fake_openai, tool_target), owner=alice)
    await store.grant_share(flow.id, bob.id, ["execute"])
    job = await submit(service, bob, flow)
    assert job.status == JobStatus.suspended, job.error
    await service.resume(bob, job.job_id, job.pending.request_id,
                         Decision(action_id="approve", remember={"scope": "flow", "for": 3600}))
    await eventually(lambda: len(fake_openai.requests) >= 3, timeout=60, what="the third model request")
    assert [h["body"] for h in tool_target.hits] == ["R0", "R1"]  # R1 by the rule
    (made,) = await store.list_standing_approvals(bob.id)
    assert made.flow_owner_id == alice.id and made.uses == 1
    assert [r.id for r in await store.list_standing_approvals(alice.id)] == [made.id]  # the flow's owner sees it
    await store.revoke_share(flow.id, bob.id)
    hold.set()
    paused = await paused_at(store, job.job_id, f"agent:{job.run_id}:3")
    assert paused.pending.tool["args"] == {"body": "R2"}
    assert [h["body"] for h in tool_target.hits] == ["R0", "R1"]
    # bob may no longer decide it, nor make a rule: 403, as any decision of his there
    with pytest.raises(Forbidden):
        await service.resume(bob, job.job_id, paused.pending.request_id,
                             Decision(action_id="approve", remember={"scope": "flow", "for": 60}))
    await service.stop(bob, job.job_id)


async def test_remember_on_a_gate_is_refused(worker, service, store, settings, make_flow):
    alice = await fresh_user(store, "alice")
    flow = await make_flow(GATE_FLOW, owner=alice)
    job = await submit(service, alice, flow)
    assert job.status == JobStatus.suspended and job.pending.kind == "node_input"
    async with http(settings, store, service, alice) as c:
        r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json={"request_id": job.pending.request_id,
                         "decision": {"action_id": "approve", "remember": {"scope": "flow", "for": 60}}})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_STANDING_APPROVAL", r.text
        assert "tool approval" in r.json()["detail"]["message"]
    with pytest.raises(InvalidStandingApproval):
        await service.resume(alice, job.job_id, job.pending.request_id,
                             Decision(action_id="approve", remember={"scope": "flow", "for": 60}))
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    assert await store.list_standing_approvals(alice.id) == []
    await service.stop(alice, job.job_id)


@contextlib.asynccontextmanager
async def signed_in(settings, store, service, user):
    """``user`` signed in to the pages of the real app (its lifespan run)."""
    import re

    app = create_app(settings, store=store, service=service)
    key = await store.create_api_key(user.id)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as page:
            token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
            r = await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})
            assert r.status_code == 303, r.text
            yield page


async def test_the_card_makes_a_rule_without_javascript_and_the_page_lists_and_revokes_it(
        worker, service, store, settings, make_flow, fake_openai, tool_target):
    import re

    alice = await fresh_user(store, "alice")
    fake_openai.responder, _ = scripted(2)
    flow = await make_flow(agent_flow(fake_openai, tool_target), owner=alice)
    job = await submit(service, alice, flow)
    card = f"/runs/{job.job_id}/requests/{job.pending.request_id}"
    async with signed_in(settings, store, service, alice) as page:
        html = (await page.get(card)).text
        assert "Approve and don’t ask again for this session" in html
        durations = re.findall(r'<select id="remember-for" name="remember_for">(.*?)</select>', html, re.S)[0]
        assert re.findall(r'value="(\d+)"', durations) == ["3600", "28800", "86400"]  # within SIGNOFF_MAX_STANDING
        csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
        # a made-up duration is refused on the card, nothing sent
        r = await page.post(card, data={"csrf": csrf, "action_id": "approve", "remember": "session",
                                        "remember_for": "999999"})
        assert r.status_code == 422 and "SIGNOFF_MAX_STANDING" in r.text
        r = await page.post(card, data={"csrf": csrf, "action_id": "approve", "remember": "session",
                                        "remember_for": "3600", "arg.body": "R0"})
        assert r.status_code == 303, r.text
        done = await wait_status(store, job.job_id, JobStatus.completed, JobStatus.failed, timeout=60)
        assert done.status == JobStatus.completed, done.error
        assert [h["body"] for h in tool_target.hits] == ["R0", "R1"]  # R1 by the rule, no second pause
        (rule,) = await store.list_standing_approvals(alice.id)
        assert (rule.scope, rule.session_id, rule.uses) == ("session", "s1", 1)
        assert rule.expires_at - rule.created_at == timedelta(hours=1)

        listing = (await page.get("/standing-approvals")).text
        assert f'data-rule="{rule.id}"' in listing and "<code>refund</code>" in listing
        assert 'href="/standing-approvals"' in listing  # linked from the header
        # without the form's token: refused, still active
        r = await page.post(f"/standing-approvals/{rule.id}/revoke", data={})
        assert r.status_code == 403
        assert (await store.get_standing_approval(rule.id)).revoked_at is None
        r = await page.post(f"/standing-approvals/{rule.id}/revoke", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/standing-approvals?revoked=1"
        assert (await store.get_standing_approval(rule.id)).revoked_at is not None
        # someone else's rule (or none): not found
        r = await page.post("/standing-approvals/sa_nope/revoke", data={"csrf": csrf})
        assert r.status_code == 404
