"""The Store contract for reaching the person (DESIGN §14): contacts, one-time decision links,
the notification log. Collected with tests/store_conformance.py by
tests/integration/store/test_conformance.py on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import datetime, timedelta

import pytest

from signoff.engine.models import ContactToken, DecisionLink, JobStatus, utcnow
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
    done = await store.set_contacts(alice.id, {"email": "alice@example.com", "slack": slack}, verified=True)
    assert done is not None and (done.email, done.slack) == ("alice@example.com", slack)
    assert (await store.get_user(alice.id)).email == "alice@example.com"  # type: ignore[union-attr]
    assert (await store.get_user_by_name(alice.name)).slack == slack  # type: ignore[union-attr]
    listed = {u.id: u for u in await store.list_users(limit=100000)}
    assert listed[alice.id].email == "alice@example.com" and listed[bob.id].email is None
    # only the keys given change
    done = await store.set_contacts(alice.id, {"email": "a2@example.com"}, verified=True)
    assert done is not None and (done.email, done.slack) == ("a2@example.com", slack)
    assert (await store.user_by_slack(slack)).id == alice.id  # type: ignore[union-attr]
    assert await store.user_by_slack("U" + uid()) is None
    done = await store.set_contacts(alice.id, {"slack": None}, verified=True)
    assert done is not None and done.slack is None and done.email == "a2@example.com"
    assert await store.user_by_slack(slack) is None
    assert (await store.get_user(bob.id)).email is None  # type: ignore[union-attr]
    assert await store.set_contacts(uid(), {"email": "x@example.com"}, verified=False) is None  # no such user
    # a Slack id is one user's: another who claims one verified is refused, nothing of theirs changed
    theirs = "U" + uid().replace("-", "")[:20].upper()
    assert await store.set_contacts(bob.id, {"slack": theirs}, verified=True)
    for verified in (False, True):
        with pytest.raises(StoreConflict):
            await store.set_contacts(alice.id, {"email": "x@example.com", "slack": theirs}, verified=verified)
    assert (await store.get_user(alice.id)).email == "a2@example.com"  # type: ignore[union-attr]
    assert (await store.user_by_slack(theirs)).id == bob.id  # type: ignore[union-attr]
    assert await store.set_contacts(bob.id, {"slack": theirs}, verified=False)  # one's own again is fine
    assert (await store.get_user(bob.id)).slack_verified  # type: ignore[union-attr]  # (and stays verified)
    with pytest.raises(ValueError):
        await store.set_contacts(alice.id, {"email": "z@example.com", "phone": "1"}, verified=True)
    assert (await store.get_user(alice.id)).email == "a2@example.com"  # type: ignore[union-attr]


async def test_a_contact_set_unverified_is_pending_and_a_change_makes_it_pending_again(store: Store) -> None:
    alice, squatter = await new_user(store), await new_user(store)
    slack = "U" + uid().replace("-", "")[:20].upper()
    done = await store.set_contacts(alice.id, {"email": "alice@example.com", "slack": slack}, verified=False)
    assert done is not None and (done.email_verified, done.slack_verified) == (False, False)
    assert done.reach("email") is None and done.contact_state("email") == "pending"
    # set again unverified: still pending; by an operator (verified): verified
    done = await store.set_contacts(alice.id, {"email": "alice@example.com"}, verified=True)
    assert done is not None and done.email_verified and done.reach("email") == "alice@example.com"
    assert not done.slack_verified  # only the contacts given change
    # the same value again, unverified, keeps it verified; another value is pending
    done = await store.set_contacts(alice.id, {"email": "alice@example.com"}, verified=False)
    assert done is not None and done.email_verified
    done = await store.set_contacts(alice.id, {"email": "other@example.com"}, verified=False)
    assert done is not None and not done.email_verified and done.contact_state("email") == "pending"
    got = await store.get_user(alice.id)
    assert got is not None and not got.email_verified
    assert [u for u in await store.list_users(limit=100000) if u.id == alice.id][0].email_verified is False
    # cleared: not verified, no state
    done = await store.set_contacts(alice.id, {"email": None}, verified=True)
    assert done is not None and done.email is None and not done.email_verified and done.contact_state("email") is None
    # a pending Slack claim holds nothing: another user takes it (the first loses it)
    taken = await store.set_contacts(squatter.id, {"slack": slack}, verified=False)
    assert taken is not None and taken.slack == slack and not taken.slack_verified
    assert (await store.get_user(alice.id)).slack is None  # type: ignore[union-attr]
    assert (await store.user_by_slack(slack)).id == squatter.id  # type: ignore[union-attr]


def _contact_token(user_id: str, address: str, *, channel: str = "email", expires_in: float = 3600,
                   at: datetime | None = None) -> ContactToken:
    now = at or utcnow()
    return ContactToken(token_hash=hashlib.sha256(uid().encode()).hexdigest(), user_id=user_id, channel=channel,
                        address=address, csrf=uid(), created_at=now, expires_at=now + timedelta(seconds=expires_in))


async def test_a_contact_token_verifies_its_users_address_once(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    address = f"a-{uid()}@example.com"
    await store.set_contacts(alice.id, {"email": address}, verified=False)
    await store.set_contacts(bob.id, {"email": address}, verified=False)  # the same address: bob's stays pending
    token = _contact_token(alice.id, address)
    since = utcnow() - timedelta(hours=1)
    assert await store.create_contact_token(token, since=since, max_per_user=5, max_per_address=5)
    got = await store.get_contact_token(token.token_hash)
    assert got is not None and got.used_at is None and (got.attempts, got.delivered, got.error) == (0, False, None)
    assert got.model_dump(exclude={"used_at"}) == token.model_dump(exclude={"used_at"})
    await store.finish_contact_token(token.token_hash, attempts=2, delivered=True, error=None)
    got = await store.get_contact_token(token.token_hash)
    assert got is not None and (got.attempts, got.delivered) == (2, True)
    # the newest of a user's channel
    assert (await store.last_contact_token(alice.id, "email")).token_hash == token.token_hash  # type: ignore[union-attr]
    newer = _contact_token(alice.id, address, at=utcnow() + timedelta(seconds=1))
    assert await store.create_contact_token(newer, since=since, max_per_user=5, max_per_address=5)
    assert (await store.last_contact_token(alice.id, "email")).token_hash == newer.token_hash  # type: ignore[union-attr]
    assert await store.last_contact_token(alice.id, "slack") is None
    assert (await store.last_contact_token(bob.id, "email")) is None
    assert await store.use_contact_token(hashlib.sha256(b"guess").hexdigest(), utcnow()) is None
    now = utcnow()
    verified = await store.use_contact_token(token.token_hash, now)
    assert verified is not None and verified.id == alice.id and verified.email_verified
    assert (await store.get_user(alice.id)).reach("email") == address  # type: ignore[union-attr]
    assert not (await store.get_user(bob.id)).email_verified  # type: ignore[union-attr]
    assert await store.use_contact_token(token.token_hash, now + timedelta(seconds=1)) is None  # once
    assert (await store.get_contact_token(token.token_hash)).used_at == now  # type: ignore[union-attr]


async def test_a_contact_token_is_refused_expired_or_once_the_address_changed(store: Store) -> None:
    alice = await new_user(store)
    slack = "U" + uid().replace("-", "")[:20].upper()
    address = f"a-{uid()}@example.com"
    await store.set_contacts(alice.id, {"email": address, "slack": slack}, verified=False)
    since = utcnow() - timedelta(hours=1)
    expired = _contact_token(alice.id, address, expires_in=-1)
    assert await store.create_contact_token(expired, since=since, max_per_user=5, max_per_address=5)
    assert await store.use_contact_token(expired.token_hash, utcnow()) is None
    # the Slack id changed after the token was sent: it verifies nothing, not even the new one
    stale = _contact_token(alice.id, slack, channel="slack")
    assert await store.create_contact_token(stale, since=since, max_per_user=5, max_per_address=5)
    other = "U" + uid().replace("-", "")[:20].upper()
    await store.set_contacts(alice.id, {"slack": other}, verified=False)
    assert await store.use_contact_token(stale.token_hash, utcnow()) is None
    user = await store.get_user(alice.id)
    assert user is not None and not user.slack_verified and not user.email_verified
    assert (await store.get_contact_token(stale.token_hash)).used_at is None  # type: ignore[union-attr]
    # swept once expired
    assert await store.delete_expired_contact_tokens(utcnow()) >= 1
    assert await store.get_contact_token(expired.token_hash) is None
    assert await store.get_contact_token(stale.token_hash) is not None
    # deleting the user deletes their tokens
    await store.delete_user(alice.id)
    assert await store.get_contact_token(stale.token_hash) is None


async def test_contact_tokens_are_capped_per_user_and_per_address(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    victim = f"victim-{uid()}@example.com"
    now = utcnow()
    since = now - timedelta(hours=1)
    old = _contact_token(alice.id, victim, at=now - timedelta(hours=2), expires_in=24 * 3600)
    assert await store.create_contact_token(old, since=since, max_per_user=2, max_per_address=3)

    async def make(user_id: str, address: str) -> bool:
        return await store.create_contact_token(_contact_token(user_id, address), since=since, max_per_user=2,
                                                max_per_address=3)

    assert [await make(alice.id, victim) for _ in range(3)] == [True, True, False]  # alice's cap (the old one not counted)
    assert await make(bob.id, victim)
    # the address's cap holds across users: bob (or anyone) cannot add more mail to it this hour
    assert not await make(bob.id, victim)
    assert await make(bob.id, f"bob-{uid()}@example.com")


async def test_concurrent_contact_tokens_stay_within_the_cap(store: Store) -> None:
    alice = await new_user(store)
    since = utcnow() - timedelta(hours=1)
    made = await asyncio.gather(*(store.create_contact_token(_contact_token(alice.id, f"a{i}-{uid()}@example.com"),
                                                             since=since, max_per_user=3, max_per_address=3)
                                  for i in range(8)))
    assert sum(made) == 3


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
