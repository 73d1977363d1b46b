"""The standing approval lookup an Agent asks before it pauses (engine/standing.py:
StandingLookup), on every store: a rule in force covers the call only while its maker may still
decide it (a deleted maker, a revoked share, a maker who is not the run's decider: asked again),
and each use is recorded once with what a receipt needs."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from signoff.engine.access import Access
from signoff.engine.decisions import check_remember
from signoff.engine.errors import InvalidStandingApproval
from signoff.engine.models import Decision, NewJob, PendingRequest, utcnow
from signoff.engine.standing import STANDING_EVENT, StandingLookup, make_rule, rule_id
from signoff.engine.store import Store


@pytest.fixture
def store(any_store: Store) -> Store:
    return any_store


def tool_request(n: int, **tool) -> PendingRequest:
    return PendingRequest(request_id=f"agent:run:{n}", kind="tool_approval", prompt="The agent wants to call refund",
                          allowed_decisions=["approve", "reject"], paused_at=utcnow(),
                          tool={"name": "refund", "args": {"body": "5 EUR"}, "call_id": f"c{n}", **tool})


async def world(store: Store, *, run_by_owner: bool = True):
    owner = await store.create_user(f"owner-{uuid.uuid4().hex[:8]}")
    other = await store.create_user(f"other-{uuid.uuid4().hex[:8]}")
    flow = await store.save_flow(owner.id, "f", {"name": "f", "nodes": [], "edges": []})
    runner = owner if run_by_owner else other
    job, _ = await store.create_job(NewJob(job_id=f"job-{uuid.uuid4()}", flow_id=flow.id, flow_version=flow.version,
                                           user_id=runner.id, session_id="s1"))
    return owner, other, flow, job


def remember(scope: str = "flow", seconds: float = 3600):
    return check_remember(tool_request(1), Decision(action_id="approve", remember={"scope": scope, "for": seconds}))


async def test_a_rule_in_force_approves_and_records_each_use_once(store: Store) -> None:
    owner, _, _, job = await world(store)
    rule = await store.create_standing_approval(make_rule(job, owner.id, tool_request(1), owner.id, remember(),
                                                          utcnow()))
    assert rule.id == rule_id(job.job_id, "agent:run:1")
    lookup = StandingLookup(store, Access(store), job_id=job.job_id)
    used = await lookup(tool_request(2))
    assert used is not None and used["authority"] == f"standing:{rule.id}" and used["decided_by"] == owner.id
    assert used["decided_by_name"] == owner.name and used["proposed_args"] == {"body": "5 EUR"}
    # the same request again: one event (its dedupe key is the request id), one use counted (the
    # count is written with the event, in its transaction)
    await lookup(tool_request(2))
    assert (await store.get_standing_approval(rule.id)).uses == 1
    assert [e.data["request_id"] for e in await store.read_events(job.job_id) if e.event == STANDING_EVENT] == [
        "agent:run:2"]
    # a gate (not a tool approval) is never covered
    assert await lookup(tool_request(3).model_copy(update={"kind": "node_input"})) is None
    # another tool is not covered
    assert await lookup(tool_request(4, name="wire_money")) is None

    # a retried layer: the use its earlier attempt recorded stands, even with the rule revoked
    # since, and is not counted again; a new call is looked up as always
    await store.revoke_standing_approval(rule.id, utcnow())
    again = StandingLookup(store, Access(store), job_id=job.job_id, again=True)
    assert (await again(tool_request(2)))["rule_id"] == rule.id
    assert await again(tool_request(5)) is None
    assert await lookup(tool_request(2)) is None  # a first attempt always looks the rule up
    assert (await store.get_standing_approval(rule.id)).uses == 1


async def test_a_deleted_maker_ends_the_rule(store: Store) -> None:
    owner, _, _, job = await world(store)
    await store.create_standing_approval(make_rule(job, owner.id, tool_request(1), owner.id, remember("session"),
                                                   utcnow()))
    lookup = StandingLookup(store, Access(store), job_id=job.job_id)
    assert await lookup(tool_request(2)) is not None
    assert await store.delete_user(owner.id)
    assert await lookup(tool_request(3)) is None


async def test_a_revoked_share_ends_the_rule_and_a_maker_who_may_not_decide_covers_nothing(store: Store) -> None:
    owner, other, flow, job = await world(store, run_by_owner=False)  # other runs owner's flow
    await store.grant_share(flow.id, other.id, ["execute"])
    # the flow's owner made a flow rule; the run is other's: only other decides it, so not covered
    await store.create_standing_approval(make_rule(job, owner.id, tool_request(1), owner.id, remember(), utcnow()))
    lookup = StandingLookup(store, Access(store), job_id=job.job_id)
    assert await lookup(tool_request(2)) is None
    mine = make_rule(job, owner.id, tool_request(5), other.id, remember(), utcnow())
    await store.create_standing_approval(mine)
    assert (await lookup(tool_request(6)))["rule_id"] == mine.id
    await store.revoke_share(flow.id, other.id)
    assert await lookup(tool_request(7)) is None


async def test_an_expired_rule_covers_nothing(store: Store) -> None:
    owner, _, _, job = await world(store)
    rule = make_rule(job, owner.id, tool_request(1), owner.id, remember(seconds=60), utcnow() - timedelta(minutes=2))
    await store.create_standing_approval(rule)
    assert await StandingLookup(store, Access(store), job_id=job.job_id)(tool_request(2)) is None


@pytest.mark.parametrize("remember_, action, why", [
    ({"scope": "flow", "for": 60}, "reject", "approve or an edit"),
    ({"scope": "everywhere", "for": 60}, "approve", "scope"),
    ({"scope": "flow", "for": 0}, "approve", "above 0"),
    ({"scope": "flow", "for": -5}, "approve", "negative"),
    ({"scope": "flow", "for": {"value": 2, "unit": "Weeks"}}, "approve", "unit"),
    ({"scope": "flow", "for": 60, "who": "x"}, "approve", "scope and for"),
    ({"scope": "flow", "for": 86401}, "approve", "SIGNOFF_MAX_STANDING"),
])
def test_remember_is_checked(remember_, action, why) -> None:
    with pytest.raises(InvalidStandingApproval, match=why):
        check_remember(tool_request(1), Decision(action_id=action, remember=remember_), 86400)
    assert check_remember(tool_request(1), Decision(action_id="edit", remember={"scope": "session", "for": {
        "value": 8, "unit": "Hours"}}), 86400).seconds == 8 * 3600


async def test_two_people_making_rules_at_once_each_get_their_own(store: Store) -> None:
    import asyncio

    from signoff.engine.standing import CREATED_EVENT, remember_decision

    (alice, _, _, job_a), (bob, _, _, job_b) = await world(store), await world(store)
    made = await asyncio.gather(
        remember_decision(store, job_a, tool_request(1), alice.id, remember("session")),
        remember_decision(store, job_b, tool_request(1), bob.id, remember("flow")),
        remember_decision(store, job_a, tool_request(1), alice.id, remember("session")))  # a retried activity
    assert made[0] == made[2] and made[0].id != made[1].id
    assert (made[0].maker_id, made[0].scope, made[0].job_id) == (alice.id, "session", job_a.job_id)
    assert (made[1].maker_id, made[1].scope, made[1].job_id) == (bob.id, "flow", job_b.job_id)
    assert [r.id for r in await store.list_standing_approvals(alice.id)] == [made[0].id]
    assert [r.id for r in await store.list_standing_approvals(bob.id)] == [made[1].id]
    assert [e.event for e in await store.read_events(job_a.job_id)] == [CREATED_EVENT]  # once
