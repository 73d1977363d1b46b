"""The Store contract for reaching the person (DESIGN §14): contacts, one-time decision links,
the notification log. Collected with tests/store_conformance.py by
tests/integration/store/test_conformance.py on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta

import pytest

from signoff.engine.models import DecisionLink, JobStatus, utcnow
from signoff.engine.store import Store, StoreConflict
from tests.store_conformance import new_job, new_user, uid


def _link(job_id: str, user_id: str, *, expires_in: float = 3600, request_id: str | None = None) -> DecisionLink:
    now = utcnow()
    return DecisionLink(token_hash=hashlib.sha256(uid().encode()).hexdigest(), job_id=job_id,
                        request_id=request_id or f"gate:{job_id}", user_id=user_id, channel="email", csrf=uid(),
                        created_at=now, expires_at=now + timedelta(seconds=expires_in))


async def test_contacts_are_set_kept_cleared_and_listed(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    assert (alice.email, alice.slack) == (None, None)
    slack = "U" + uid().replace("-", "")[:20].upper()
    done = await store.set_contacts(alice.id, {"email": "alice@example.com", "slack": slack})
    assert done is not None and (done.email, done.slack) == ("alice@example.com", slack)
    assert (await store.get_user(alice.id)).email == "alice@example.com"  # type: ignore[union-attr]
    assert (await store.get_user_by_name(alice.name)).slack == slack  # type: ignore[union-attr]
    listed = {u.id: u for u in await store.list_users(limit=100000)}
    assert listed[alice.id].email == "alice@example.com" and listed[bob.id].email is None
    # only the keys given change
    done = await store.set_contacts(alice.id, {"email": "a2@example.com"})
    assert done is not None and (done.email, done.slack) == ("a2@example.com", slack)
    assert (await store.user_by_slack(slack)).id == alice.id  # type: ignore[union-attr]
    assert await store.user_by_slack("U" + uid()) is None
    done = await store.set_contacts(alice.id, {"slack": None})
    assert done is not None and done.slack is None and done.email == "a2@example.com"
    assert await store.user_by_slack(slack) is None
    assert (await store.get_user(bob.id)).email is None  # type: ignore[union-attr]
    assert await store.set_contacts(uid(), {"email": "x@example.com"}) is None  # no such user
    # a Slack id is one user's: another who claims it is refused, nothing of theirs changed
    theirs = "U" + uid().replace("-", "")[:20].upper()
    assert await store.set_contacts(bob.id, {"slack": theirs})
    with pytest.raises(StoreConflict):
        await store.set_contacts(alice.id, {"email": "x@example.com", "slack": theirs})
    assert (await store.get_user(alice.id)).email == "a2@example.com"  # type: ignore[union-attr]
    assert (await store.user_by_slack(theirs)).id == bob.id  # type: ignore[union-attr]
    assert await store.set_contacts(bob.id, {"slack": theirs})  # setting one's own again is fine
    with pytest.raises(ValueError):
        await store.set_contacts(alice.id, {"email": "z@example.com", "phone": "1"})
    assert (await store.get_user(alice.id)).email == "a2@example.com"  # type: ignore[union-attr]


async def test_a_link_is_stored_by_its_hash_and_used_once(store: Store) -> None:
    user = await new_user(store)
    job_id = await new_job(store, user.id)
    link = _link(job_id, user.id)
    await store.create_link(link)
    got = await store.get_link(link.token_hash)
    assert got is not None and got.used_at is None and got.model_dump(exclude={"used_at"}) == link.model_dump(
        exclude={"used_at"})
    assert await store.get_link(hashlib.sha256(b"guess").hexdigest()) is None
    now = utcnow()
    assert await store.use_link(link.token_hash, now)
    assert not await store.use_link(link.token_hash, now + timedelta(seconds=1))  # used: once
    assert (await store.get_link(link.token_hash)).used_at == now  # type: ignore[union-attr]
    # a use given back (its decision refused before it was sent) only by the use that took it
    assert not await store.unuse_link(link.token_hash, now + timedelta(seconds=5))
    assert await store.unuse_link(link.token_hash, now)
    assert await store.use_link(link.token_hash, now + timedelta(seconds=2))
    assert not await store.use_link(hashlib.sha256(b"guess").hexdigest(), now)


async def test_an_expired_link_is_never_used_and_is_swept(store: Store) -> None:
    user = await new_user(store)
    job_id = await new_job(store, user.id)
    link, live = _link(job_id, user.id, expires_in=60), _link(job_id, user.id, expires_in=3600)
    await store.create_link(link)
    await store.create_link(live)
    assert not await store.use_link(link.token_hash, link.expires_at)  # at expires_at: over
    assert not await store.use_link(link.token_hash, link.expires_at + timedelta(days=1))
    assert await store.delete_expired_links(link.expires_at + timedelta(seconds=1)) >= 1
    assert await store.get_link(link.token_hash) is None and await store.get_link(live.token_hash) is not None


async def test_concurrent_uses_of_one_link_have_one_winner(store: Store) -> None:
    user = await new_user(store)
    link = _link(await new_job(store, user.id), user.id)
    await store.create_link(link)
    now = utcnow()
    won = await asyncio.gather(*[store.use_link(link.token_hash, now) for _ in range(10)])
    assert sum(won) == 1


async def test_notifications_are_logged_newest_first_per_job(store: Store) -> None:
    user = await new_user(store)
    job_id, other = await new_job(store, user.id), await new_job(store, user.id)
    first = await store.log_notification(job_id=job_id, request_id="r", seq=1, event="human_input_required",
                                         channel="email", user_id=user.id, attempt=1, delivered=False,
                                         error="refused ✗")
    second = await store.log_notification(job_id=job_id, request_id="r", seq=1, event="human_input_required",
                                          channel="slack", user_id=user.id, attempt=2, delivered=True, error=None,
                                          ref="D024BE91L 1700000000.000100")
    await store.log_notification(job_id=other, request_id="r", seq=3, event="human_input_reminder",
                                 channel="slack", user_id=user.id, attempt=1, delivered=True, error=None)
    listed = await store.list_notifications(job_id)
    assert [n.id for n in listed] == [second.id, first.id]
    assert (listed[1].attempt, listed[1].delivered, listed[1].error, listed[1].channel) == (1, False, "refused ✗",
                                                                                              "email")
    assert (listed[0].request_id, listed[0].ref, listed[1].ref) == ("r", "D024BE91L 1700000000.000100", None)
    assert [n.id for n in await store.list_notifications(job_id, limit=1)] == [second.id]
    assert await store.list_notifications(uid()) == []


async def test_deleting_a_user_or_a_run_takes_its_links_and_notifications(store: Store) -> None:
    owner, approver = await new_user(store), await new_user(store)
    job_id = await new_job(store, owner.id)
    kept_job = await new_job(store, owner.id)
    theirs, owners, kept = _link(job_id, approver.id), _link(job_id, owner.id), _link(kept_job, owner.id)
    for link in (theirs, owners, kept):
        await store.create_link(link)
    for who in (owner.id, approver.id):
        await store.log_notification(job_id=job_id, request_id="r", seq=1, event="e", channel="email", user_id=who,
                                     attempt=1, delivered=True, error=None)
    await store.log_notification(job_id=kept_job, request_id="r", seq=1, event="e", channel="email",
                                 user_id=owner.id, attempt=1, delivered=True, error=None)
    assert await store.delete_user(approver.id)
    assert await store.get_link(theirs.token_hash) is None and await store.get_link(owners.token_hash) is not None
    assert [n.user_id for n in await store.list_notifications(job_id)] == [owner.id]
    assert await store.set_status(job_id, JobStatus.cancelled)
    assert await store.delete_run(job_id)
    assert await store.get_link(owners.token_hash) is None and await store.list_notifications(job_id) == []
    assert await store.get_link(kept.token_hash) is not None and len(await store.list_notifications(kept_job)) == 1


async def test_a_notification_is_claimed_once_and_a_failed_claim_lets_go(store: Store) -> None:
    """claim_notification: of concurrent claims one wins; a delivered or unfinished claim holds
    the (job, request, seq, channel, user); one finished as failed does not (a retry sends)."""
    user, other = await new_user(store), await new_user(store)
    job_id = await new_job(store, user.id)
    key = dict(job_id=job_id, request_id="r", seq=4, event="human_input_required", channel="email")
    got = await asyncio.gather(*[store.claim_notification(**key, user_id=user.id, attempt=1) for _ in range(8)])
    claims = [c for c, _ in got if c is not None]
    assert len(claims) == 1 and all(h is not None and h.id == claims[0].id for c, h in got if c is None)
    claim = claims[0]
    assert (claim.delivered, claim.error, claim.attempt) == (False, None, 1)
    # unfinished (its outcome unknown): still held
    again, holder = await store.claim_notification(**key, user_id=user.id, attempt=2)
    assert again is None and holder is not None and holder.id == claim.id and not holder.delivered
    # another person, channel, seq or request is another notification
    for other_key in (dict(key, channel="slack"), dict(key, seq=5), dict(key, request_id="r2")):
        assert (await store.claim_notification(**other_key, user_id=user.id, attempt=1))[0] is not None
    assert (await store.claim_notification(**key, user_id=other.id, attempt=1))[0] is not None
    # failed: let go, the next attempt claims it
    await store.finish_notification(claim.id, delivered=False, error="451 try later")
    retry, _ = await store.claim_notification(**key, user_id=user.id, attempt=2)
    assert retry is not None and retry.id != claim.id
    # delivered: held for good, with its ref
    await store.finish_notification(retry.id, delivered=True, error=None, ref="D1 17.01")
    third, holder = await store.claim_notification(**key, user_id=user.id, attempt=3)
    assert third is None and holder is not None and (holder.id, holder.delivered, holder.ref) == (retry.id, True,
                                                                                                   "D1 17.01")
    logged = {n.id: n for n in await store.list_notifications(job_id)}
    assert (logged[claim.id].delivered, logged[claim.id].error) == (False, "451 try later")
    assert (logged[retry.id].delivered, logged[retry.id].error, logged[retry.id].ref) == (True, None, "D1 17.01")
