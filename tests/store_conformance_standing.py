"""The Store contract for standing approvals (DESIGN §17, engine/standing.py), on every backend
(tests/integration/store/test_conformance.py imports these)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from signoff.engine.models import StandingApproval, utcnow
from signoff.engine.store import Store


def _rule(**fields) -> StandingApproval:
    now = utcnow()
    base = dict(id=f"sa_{uuid.uuid4().hex}", maker_id=f"user-{uuid.uuid4()}", flow_id=f"flow-{uuid.uuid4()}",
                flow_owner_id=f"owner-{uuid.uuid4()}", tool="send_refund", scope="flow", job_id=f"job-{uuid.uuid4()}",
                request_id="agent:r:1", created_at=now, expires_at=now + timedelta(hours=1))
    base.update(fields)
    return StandingApproval(**base)


async def test_standing_approvals_are_stored_read_and_listed_for_maker_and_flow_owner(store: Store) -> None:
    rule = _rule(scope="session", session_id="s1", session_user_id="u1")
    made = await store.create_standing_approval(rule)
    assert made == rule.model_copy(update={"uses": 0})
    assert await store.get_standing_approval(rule.id) == made
    assert await store.get_standing_approval("sa_nope") is None
    # made twice (a retried activity): the first is kept
    again = await store.create_standing_approval(rule.model_copy(update={"tool": "other"}))
    assert again.tool == "send_refund"
    later = await store.create_standing_approval(_rule(maker_id=rule.maker_id, created_at=rule.created_at
                                                       + timedelta(seconds=1)))
    assert [r.id for r in await store.list_standing_approvals(rule.maker_id)] == [later.id, rule.id]
    assert [r.id for r in await store.list_standing_approvals(rule.flow_owner_id)] == [rule.id]
    assert await store.list_standing_approvals("someone-else") == []
    assert len(await store.list_standing_approvals(rule.maker_id, limit=1)) == 1


async def test_standing_approvals_found_only_in_their_scope_while_in_force(store: Store) -> None:
    now = utcnow()
    flow = _rule(scope="flow")
    session = _rule(scope="session", flow_id=flow.flow_id, session_id="s1", session_user_id="alice",
                    created_at=now + timedelta(seconds=1))
    expired = _rule(scope="flow", flow_id=flow.flow_id, expires_at=now - timedelta(seconds=1))
    for r in (flow, session, expired):
        await store.create_standing_approval(r)
    found = await store.find_standing_approvals(flow.flow_id, "send_refund", "s1", "alice", now)
    assert [r.id for r in found] == [session.id, flow.id]  # newest first; the expired one never
    # another session, or the same session id of another person: the flow rule only
    assert [r.id for r in await store.find_standing_approvals(flow.flow_id, "send_refund", "s2", "alice", now)] \
        == [flow.id]
    assert [r.id for r in await store.find_standing_approvals(flow.flow_id, "send_refund", "s1", "bob", now)] \
        == [flow.id]
    # another tool, another flow: nothing
    assert await store.find_standing_approvals(flow.flow_id, "other_tool", "s1", "alice", now) == []
    assert await store.find_standing_approvals("flow-other", "send_refund", "s1", "alice", now) == []
    # past its expiry: nothing
    assert await store.find_standing_approvals(flow.flow_id, "send_refund", "s1", "alice",
                                               now + timedelta(hours=2)) == []
    assert len(await store.find_standing_approvals(flow.flow_id, "send_refund", "s1", "alice", now, limit=1)) == 1


async def test_a_revoked_standing_approval_covers_nothing_and_counts_no_more(store: Store) -> None:
    now = utcnow()
    rule = await store.create_standing_approval(_rule())
    other = await store.create_standing_approval(_rule(maker_id=rule.maker_id, expires_at=now - timedelta(1)))
    assert other.id
    assert await store.count_standing_approvals(rule.maker_id, now) == 1  # the expired one does not count
    assert await store.revoke_standing_approval(rule.id, now)
    assert not await store.revoke_standing_approval(rule.id, now + timedelta(seconds=5))  # the first is kept
    assert not await store.revoke_standing_approval("sa_nope", now)
    got = await store.get_standing_approval(rule.id)
    assert got is not None and got.revoked_at == now
    assert await store.find_standing_approvals(rule.flow_id, rule.tool, "", "", now) == []
    assert await store.count_standing_approvals(rule.maker_id, now) == 0


async def test_standing_approval_uses_are_counted(store: Store) -> None:
    rule = await store.create_standing_approval(_rule())
    at = utcnow()
    await asyncio.gather(*(store.use_standing_approval(rule.id, at) for _ in range(3)))
    await store.use_standing_approval("sa_nope", at)  # nothing
    got = await store.get_standing_approval(rule.id)
    assert got is not None and got.uses == 3 and got.last_used_at == at
