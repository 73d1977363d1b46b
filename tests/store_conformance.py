"""The Store contract: what every backend of engine/store/base.py must do, as tests.

A test module runs the contract on a backend by providing a ``store`` fixture (a set-up store,
closed after the test) and importing the tests::

    from tests.store_conformance import *  # noqa: F403

    @pytest.fixture
    def store(any_store: Store) -> Store:
        return any_store

tests/integration/store/test_conformance.py does that for the in-memory store, SQLite and
PostgreSQL (``any_store``, tests/fixtures/db.py). What only a database shared by several
connections or processes can show (migrations, durability across a restart or a SIGKILL, races
between store instances and processes) stays in the other modules of tests/integration/store/.

Ids are unique per test, so tests share the session's PostgreSQL database without seeing each
other. The helpers (``new_job``, ``suspended_job``, ...) are for those modules too.
"""

from __future__ import annotations

import asyncio
import json
import contextlib
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from signoff.engine.models import (
    DeliveryAttempt,
    Group,
    JobStatus,
    Message,
    NewJob,
    Option,
    PendingRequest,
    SecretInfo,
    SecretRecord,
    SpanRecord,
    Webhook,
    WebhookDelivery,
    WebhookRecord,
    utcnow,
)
from signoff.engine.audit.events import event_sha256, verify_chain
from signoff.engine.errors import RunsInFlightLimit, StorageLimit
from signoff.engine.store import Store, StoreConflict, StoreError
from signoff.engine.store.base import DecisionReads, PauseCheckpoint, SubmitReads


def uid(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4()}"


async def new_user(store: Store):
    return await store.create_user(uid("user-"))


async def new_job(store: Store, user_id: str | None = None, **fields) -> str:
    user_id = user_id or (await new_user(store)).id
    job = NewJob(
        job_id=fields.pop("job_id", uid("job-")),
        flow_id=fields.pop("flow_id", uid("flow-")),
        flow_version=1,
        user_id=user_id,
        **fields,
    )
    created, was_new = await store.create_job(job)
    assert was_new
    return created.job_id


def pending(request_id: str, **fields) -> PendingRequest:
    return PendingRequest(
        request_id=request_id,
        prompt=fields.pop("prompt", "Approve the refund?"),
        options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")],
        allowed_decisions=["approve", "reject"],
        paused_at=fields.pop("paused_at", None) or utcnow(),
        **fields,
    )


async def suspended_job(store: Store, **fields) -> tuple[str, str]:
    job_id = await new_job(store, **fields)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    assert await store.mark_suspended(job_id, pending(request_id))
    return job_id, request_id


def utc(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


ERROR = {"error": "the process running it stopped", "type": "LeaseExpired", "vertex_id": None}


async def run_job(store: Store, *, lease: bool = True, seconds: float = 30) -> str:
    """A job as RunService makes one: an inline run whose lease ends in ``seconds`` or, with
    ``lease=False``, a run for Temporal (no lease)."""
    user = await store.create_user(f"user-{uuid.uuid4()}")
    job_id = str(uuid.uuid4())
    await store.create_job(NewJob(
        job_id=job_id, flow_id=f"flow-{uuid.uuid4()}", flow_version=1, user_id=user.id,
        request={"runner": "inline" if lease else "temporal"},
        lease_until=utcnow() + timedelta(seconds=seconds) if lease else None,
    ))
    return job_id


# ---- lifecycle ------------------------------------------------------------------------------


async def test_setup_twice_is_safe(store: Store) -> None:
    await store.setup()
    await store.setup()
    await store.ping()


async def test_a_closed_store_refuses_calls(store: Store) -> None:
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.get_job(uid())
    await store.close()  # closing again is harmless


# ---- users and keys -------------------------------------------------------------------------


async def test_users_and_hashed_api_keys(store: Store) -> None:
    user = await new_user(store)
    assert utc(user.created_at)
    assert await store.get_user(user.id) == user
    assert await store.get_user_by_name(user.name) == user
    with pytest.raises(StoreConflict):
        await store.create_user(user.name)
    assert await store.get_or_create_user(user.name) == user

    key = await store.create_api_key(user.id)
    assert len(key) > 30
    assert (await store.user_for_api_key(key)) == user
    assert await store.user_for_api_key(key + "x") is None
    # the plain key is nowhere in the database
    assert await store.user_for_api_key("") is None

    chosen = uid("dev-key-")
    assert await store.create_api_key(user.id, chosen) == chosen
    assert await store.create_api_key(user.id, chosen) == chosen  # re-registering is idempotent
    other = await new_user(store)
    with pytest.raises(StoreConflict):
        await store.create_api_key(other.id, chosen)
    assert await store.revoke_api_key(chosen)
    assert await store.user_for_api_key(chosen) is None


async def test_list_users_by_name_up_to_the_limit(store: Store) -> None:
    prefix = uid("lister-")
    made = [await store.create_user(f"{prefix}-{c}") for c in "cab"]
    listed = [u for u in await store.list_users(limit=1_000_000) if u.name.startswith(prefix)]
    assert listed == sorted(made, key=lambda u: u.name)
    assert len(await store.list_users(limit=2)) == 2


async def test_revoke_api_keys_forgets_every_key_of_the_user_only(store: Store) -> None:
    user, other = await new_user(store), await new_user(store)
    keys = [await store.create_api_key(user.id) for _ in range(3)]
    kept = await store.create_api_key(other.id)
    assert await store.revoke_api_keys(user.id) == 3
    assert [await store.user_for_api_key(k) for k in keys] == [None, None, None]
    assert await store.user_for_api_key(kept) == other
    assert await store.revoke_api_keys(user.id) == 0
    assert await store.revoke_api_keys(uid("nobody-")) == 0
    assert await store.get_user(user.id) == user  # the user stays
    again = await store.create_api_key(user.id)  # and may get a new key
    assert await store.user_for_api_key(again) == user


async def test_delete_user_takes_keys_shares_and_secrets_and_leaves_flows_and_jobs(store: Store) -> None:
    doomed, friend, bystander = await new_user(store), await new_user(store), await new_user(store)
    key = await store.create_api_key(doomed.id)
    friend_key = await store.create_api_key(friend.id)
    own_flow = await store.save_flow(doomed.id, "mine", {"nodes": []})
    friend_flow = await store.save_flow(friend.id, "theirs", {"nodes": []})
    await store.grant_share(own_flow.id, friend.id, ["execute"])  # a share of a flow they own
    await store.grant_share(friend_flow.id, doomed.id, ["execute"])  # a share granted to them
    await store.grant_share(friend_flow.id, bystander.id, ["view"])  # nothing to do with them
    await store.put_secret(doomed.id, "OPENAI_KEY", b"c1")
    await store.put_secret(friend.id, "OPENAI_KEY", b"c2")
    job_id = await new_job(store, doomed.id, flow_id=own_flow.id)

    assert await store.delete_user(doomed.id)
    assert await store.get_user(doomed.id) is None
    assert await store.get_user_by_name(doomed.name) is None
    assert await store.user_for_api_key(key) is None
    assert await store.revoke_api_keys(doomed.id) == 0
    assert not await store.has_permission(friend_flow.id, doomed.id)
    assert not await store.revoke_share(friend_flow.id, doomed.id)
    assert not await store.has_permission(own_flow.id, friend.id)  # the shares of their flows went
    assert not await store.revoke_share(own_flow.id, friend.id)
    assert [f.id for f in await store.list_flows(friend.id)] == [friend_flow.id]
    assert await store.list_secrets(doomed.id) == [] and await store.get_secret(doomed.id, "OPENAI_KEY") is None
    # everyone else's rows are untouched
    assert await store.user_for_api_key(friend_key) == friend
    assert await store.has_permission(friend_flow.id, bystander.id, "view")
    assert (await store.get_secret(friend.id, "OPENAI_KEY")).ciphertext == b"c2"
    # flows and jobs are the caller's: still there
    assert (await store.get_flow(own_flow.id)).owner_id == doomed.id
    assert (await store.get_job(job_id)).user_id == doomed.id

    assert not await store.delete_user(doomed.id)  # once
    # the name is free again, for a new user with a new id who inherits nothing
    reborn = await store.create_user(doomed.name)
    assert reborn.id != doomed.id
    assert await store.user_for_api_key(key) is None and await store.list_secrets(reborn.id) == []


async def test_delete_user_of_an_unknown_id_still_clears_what_hangs_on_it(store: Store) -> None:
    ghost = uid("ghost-")  # rows under an id without a user row (e.g. a caller that wrote them first)
    key = await store.create_api_key(ghost)
    flow = await store.save_flow(ghost, "orphan", {})
    other = await new_user(store)
    await store.grant_share(flow.id, other.id, ["execute"])
    await store.put_secret(ghost, "s", b"x")
    assert not await store.delete_user(ghost)
    assert await store.revoke_api_keys(ghost) == 0 and await store.revoke_api_key(key) is False
    assert not await store.has_permission(flow.id, other.id)
    assert await store.list_secrets(ghost) == []
    assert not await store.delete_user(uid("nobody-"))


# ---- secrets --------------------------------------------------------------------------------


async def test_put_secret_creates_then_replaces_keeping_created_at(store: Store) -> None:
    owner = await new_user(store)
    first = await store.put_secret(owner.id, "GITHUB_TOKEN", b"cipher-1")
    assert isinstance(first, SecretRecord)
    assert (first.owner_id, first.name, first.ciphertext) == (owner.id, "GITHUB_TOKEN", b"cipher-1")
    assert utc(first.created_at) and first.updated_at == first.created_at
    assert await store.get_secret(owner.id, "GITHUB_TOKEN") == first

    await asyncio.sleep(0.002)  # timestamps have microseconds: make "changes" observable everywhere
    second = await store.put_secret(owner.id, "GITHUB_TOKEN", b"cipher-2")
    assert second.ciphertext == b"cipher-2"
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert await store.get_secret(owner.id, "GITHUB_TOKEN") == second
    assert [(i.name, i.created_at, i.updated_at) for i in await store.list_secrets(owner.id)] == [
        ("GITHUB_TOKEN", first.created_at, second.updated_at)]

    assert await store.delete_secret(owner.id, "GITHUB_TOKEN")
    assert not await store.delete_secret(owner.id, "GITHUB_TOKEN")
    assert await store.get_secret(owner.id, "GITHUB_TOKEN") is None
    assert await store.list_secrets(owner.id) == []
    # put again after a delete: a new secret, with a new created_at
    await asyncio.sleep(0.002)
    third = await store.put_secret(owner.id, "GITHUB_TOKEN", b"cipher-3")
    assert third.created_at > first.created_at and third.updated_at == third.created_at


async def test_secrets_of_one_owner_are_invisible_to_another(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    await store.put_secret(alice.id, "API_KEY", b"alice's")
    assert await store.get_secret(bob.id, "API_KEY") is None
    assert await store.list_secrets(bob.id) == []
    assert not await store.delete_secret(bob.id, "API_KEY")
    # the same name under another owner is another secret: neither replaces the other
    await store.put_secret(bob.id, "API_KEY", b"bob's")
    assert (await store.get_secret(alice.id, "API_KEY")).ciphertext == b"alice's"
    assert (await store.get_secret(bob.id, "API_KEY")).ciphertext == b"bob's"
    assert await store.delete_secret(bob.id, "API_KEY")
    assert (await store.get_secret(alice.id, "API_KEY")).ciphertext == b"alice's"
    # an owner id or name that looks like a pattern matches nothing
    for hostile in ("%", "_", "*", "' OR '1'='1", ""):
        assert await store.get_secret(hostile, "API_KEY") is None
        assert await store.get_secret(alice.id, hostile) is None
        assert await store.list_secrets(hostile) == []
        assert not await store.delete_secret(alice.id, hostile)
    assert await store.get_secret(alice.id, "api_key") is None  # names are exact: case counts
    assert await store.get_secret(alice.id, "API_KEY ") is None  # and so do spaces
    assert [s.name for s in await store.list_secrets(alice.id)] == ["API_KEY"]


async def test_list_secrets_gives_names_and_times_sorted_never_the_ciphertext(store: Store) -> None:
    owner = await new_user(store)
    names = ["b", "B", "a", "a b", "ab", "A", "_x", "é", "z", "😀", "10", "9"]
    for name in names:
        await store.put_secret(owner.id, name, f"never listed {name}".encode())
    listed = await store.list_secrets(owner.id)
    assert [s.name for s in listed] == sorted(names)  # code-point order, whatever the collation
    assert [s.name for s in listed][:4] == ["10", "9", "A", "B"]
    for info in listed:
        assert type(info) is SecretInfo and info.owner_id == owner.id and utc(info.created_at)
        assert "ciphertext" not in info.model_dump() and "never listed" not in repr(info)
    record = await store.get_secret(owner.id, "a")
    assert "never listed" not in repr(record) and "never listed" not in str(record)  # not in logs either


async def test_secret_ciphertext_is_kept_as_opaque_bytes(store: Store) -> None:
    owner = await new_user(store)
    every_byte = bytes(range(256)) * 16
    big = bytes(range(256)) * 4096  # 1 MiB
    for name, value in [("every", every_byte), ("empty", b""), ("nul", b"\x00"), ("big", big),
                        ("not-utf8", b"\xff\xfe\xc3\x28"), ("bytearray", bytearray(b"ba")),
                        ("memoryview", memoryview(b"mv"))]:
        record = await store.put_secret(owner.id, name, value)
        assert type(record.ciphertext) is bytes and record.ciphertext == bytes(value)
        got = await store.get_secret(owner.id, name)
        assert type(got.ciphertext) is bytes and got.ciphertext == bytes(value)
    # anything but bytes is refused before a change: a str is a value nobody encrypted
    await store.put_secret(owner.id, "kept", b"original")
    for wrong in ("plain text", None, 42, ["a"]):
        with pytest.raises(TypeError):
            await store.put_secret(owner.id, "kept", wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.put_secret(owner.id, "new-" + str(wrong), wrong)  # type: ignore[arg-type]
    assert (await store.get_secret(owner.id, "kept")).ciphertext == b"original"
    assert len(await store.list_secrets(owner.id)) == 8


async def test_concurrent_puts_of_one_secret_make_one(store: Store) -> None:
    owner = await new_user(store)
    records = await asyncio.gather(*(store.put_secret(owner.id, "shared", bytes([i])) for i in range(12)))
    [info] = await store.list_secrets(owner.id)
    assert len({r.created_at for r in records}) == 1 and info.created_at == records[0].created_at
    assert (await store.get_secret(owner.id, "shared")).ciphertext in {bytes([i]) for i in range(12)}


# ---- flows and shares -----------------------------------------------------------------------


async def test_flows_versions_and_shares(store: Store) -> None:
    owner, guest, stranger = await new_user(store), await new_user(store), await new_user(store)
    spec = {"name": "Refund", "nodes": [{"id": "a", "type": "ChatInput"}], "edges": []}
    flow = await store.save_flow(owner.id, "Refund", spec)
    assert flow.version == 1 and flow.spec == spec and flow.owner_id == owner.id
    spec2 = {**spec, "nodes": [*spec["nodes"], {"id": "b", "type": "ChatOutput"}]}
    flow2 = await store.save_flow(owner.id, "Refund v2", spec2, flow_id=flow.id)
    assert flow2.version == 2 and flow2.created_at == flow.created_at and flow2.updated_at >= flow.updated_at
    assert (await store.get_flow(flow.id)).spec == spec2
    assert (await store.get_flow(flow.id, version=1)).spec == spec
    assert await store.get_flow(flow.id, version=3) is None

    assert await store.has_permission(flow.id, owner.id, "delete")
    assert not await store.has_permission(flow.id, guest.id)
    await store.grant_share(flow.id, guest.id, ["execute"])
    await store.grant_share(flow.id, guest.id, ["view"])
    assert await store.has_permission(flow.id, guest.id, "execute")
    assert await store.has_permission(flow.id, guest.id, "view")
    assert not await store.has_permission(flow.id, stranger.id)
    assert [f.id for f in await store.list_flows(guest.id)] == [flow.id]
    assert await store.list_flows(stranger.id) == []
    assert await store.list_shares(flow.id) == [(guest.id, ["execute", "view"])]
    await store.grant_share(flow.id, stranger.id, ["execute"])
    assert await store.list_shares(flow.id) == sorted([(guest.id, ["execute", "view"]), (stranger.id, ["execute"])])
    assert len(await store.list_shares(flow.id, limit=1)) == 1 and await store.list_shares("nope") == []
    assert await store.revoke_share(flow.id, stranger.id)
    assert await store.revoke_share(flow.id, guest.id)
    assert not await store.has_permission(flow.id, guest.id)
    assert not await store.revoke_share(flow.id, guest.id)
    assert await store.list_shares(flow.id) == []

    assert await store.delete_flow(flow.id)
    assert await store.get_flow(flow.id) is None
    assert not await store.has_permission(flow.id, owner.id)
    assert not await store.delete_flow(flow.id)


async def test_deleting_a_flow_keeps_its_jobs_and_their_pending_requests(store: Store) -> None:
    owner, guest = await new_user(store), await new_user(store)
    flow = await store.save_flow(owner.id, "Refund", {"nodes": [{"id": "a"}]})
    await store.save_flow(owner.id, "Refund", {"nodes": [{"id": "b"}]}, flow_id=flow.id)
    await store.grant_share(flow.id, guest.id, ["execute"])
    job_id, request_id = await suspended_job(store, user_id=guest.id, flow_id=flow.id)
    running = await new_job(store, owner.id, flow_id=flow.id)

    assert await store.delete_flow(flow.id)
    assert await store.get_flow(flow.id) is None and await store.get_flow(flow.id, version=1) is None
    assert not await store.has_permission(flow.id, guest.id) and await store.list_flows(guest.id) == []
    # the jobs are the caller's: the waiting one still waits with its request, and can be ended
    [waiting] = await store.list_pending(guest.id, flow_id=flow.id)
    assert waiting.job_id == job_id and waiting.pending.request_id == request_id
    assert [j.job_id for j in await store.find_suspended(flow.id, guest.id, flow.id)] == [job_id]
    assert {j.job_id for j in await store.list_active_jobs(flow.id)} == {job_id, running}
    assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "flow deleted"}))
    assert await store.list_pending(guest.id) == []
    assert [j.job_id for j in await store.list_active_jobs(flow.id)] == [running]

    # a flow saved again under the deleted id starts over: version 1, no old versions nor shares
    again = await store.save_flow(owner.id, "Refund again", {"nodes": []}, flow_id=flow.id)
    assert again.version == 1 and await store.get_flow(flow.id, version=2) is None
    assert not await store.has_permission(flow.id, guest.id)


# ---- jobs and claims ------------------------------------------------------------------------


async def test_create_and_get_job(store: Store) -> None:
    user = await new_user(store)
    job = NewJob(
        job_id=uid("job-"),
        flow_id=uid("flow-"),
        flow_version=3,
        user_id=user.id,
        session_id="s1",
        request={"input_value": "hi", "tweaks": {"a": {"b": 1}}},
    )
    created, was_new = await store.create_job(job)
    assert was_new
    got = await store.get_job(job.job_id)
    assert got == created
    assert got.run_id == job.job_id and got.status == JobStatus.queued and got.flow_version == 3
    assert got.request == job.request and got.pending is None and got.finished_at is None
    assert utc(got.created_at) and utc(got.updated_at)
    # the same job again (an activity retry) is not an error and inserts nothing
    again, was_new = await store.create_job(job)
    assert not was_new and again.job_id == job.job_id
    # a different job under an existing id is
    with pytest.raises(StoreConflict):
        await store.create_job(job.model_copy(update={"flow_id": "other"}))
    assert await store.get_job(uid()) is None


async def test_idempotency_key_is_unique_per_user(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    flow_id = uid("flow-")
    first, created = await store.create_job(
        NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=alice.id, idempotency_key="k1")
    )
    assert created
    second, created = await store.create_job(
        NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=alice.id, idempotency_key="k1")
    )
    assert not created and second.job_id == first.job_id
    # another user may use the same key
    _, created = await store.create_job(
        NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=bob.id, idempotency_key="k1")
    )
    assert created


async def test_status_transitions(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress, expect=[JobStatus.queued])
    assert not await store.set_status(job_id, JobStatus.in_progress, expect=[JobStatus.queued])
    assert await store.set_status(job_id, JobStatus.completed, result={"text": "done"})
    job = await store.get_job(job_id)
    assert job.status == JobStatus.completed and job.result == {"text": "done"} and utc(job.finished_at)
    # a terminal status never changes again, whatever expect says
    assert not await store.set_status(job_id, JobStatus.cancelled)
    assert not await store.set_status(job_id, JobStatus.failed, expect=[JobStatus.completed])
    assert (await store.get_job(job_id)).status == JobStatus.completed

    failed = await new_job(store)
    assert await store.set_status(failed, JobStatus.failed, error={"error": "boom", "type": "ValueError"})
    assert (await store.get_job(failed)).error == {"error": "boom", "type": "ValueError"}
    assert not await store.set_status(uid(), JobStatus.completed)


async def test_suspend_resume_claim_and_rollback(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    job = await store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == request_id
    assert job.pending.options[0].label == "Approve" and utc(job.pending.paused_at)

    assert await store.claim_suspended_for_resume(job_id, "gate:stale") is None
    token = await store.claim_suspended_for_resume(job_id, request_id)
    assert token
    assert await store.claim_suspended_for_resume(job_id, request_id) is None
    assert not await store.claim_suspended_for_cancel(job_id)  # not suspended any more
    job = await store.get_job(job_id)
    assert job.status == JobStatus.in_progress and job.pending.request_id == request_id  # pending kept

    assert not await store.rollback_resume_claim(job_id, "not-the-token")
    assert await store.rollback_resume_claim(job_id, token)
    assert not await store.rollback_resume_claim(job_id, token)  # only once
    job = await store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == request_id

    # the decision is applied: a later rollback of that claim must not resurrect it
    token = await store.claim_suspended_for_resume(job_id, request_id)
    await store.clear_pending(job_id)
    assert (await store.get_job(job_id)).pending is None
    assert await store.mark_suspended(job_id, pending(f"gate2:{job_id}"))
    assert not await store.rollback_resume_claim(job_id, token)
    assert (await store.get_job(job_id)).pending.request_id == f"gate2:{job_id}"


async def test_resume_claim_with_a_token_is_idempotent_for_its_holder(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-1") == "upd-1"
    assert (await store.get_job(job_id)).status == JobStatus.in_progress
    # a retry of the same claimant (its first attempt committed) wins again; nobody else does
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-1") == "upd-1"
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-2") is None
    assert await store.claim_suspended_for_resume(job_id, request_id) is None
    # still held once the decision is applied (pending cleared), until the run moves on
    await store.clear_pending(job_id)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-1") == "upd-1"
    # and never rolled back then: the job would wait for no request
    assert not await store.rollback_resume_claim(job_id, "upd-1")
    assert (await store.get_job(job_id)).status == JobStatus.in_progress

    # the run paused again (new request): the old claim is not held any more
    job_id, request_id = await suspended_job(store)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-1") == "upd-1"
    assert await store.mark_suspended(job_id, pending(f"gate2:{job_id}"))
    assert await store.claim_suspended_for_resume(job_id, request_id, token="upd-1") is None
    assert (await store.get_job(job_id)).status == JobStatus.suspended
    # once the run ended, the holder learns it (it gets its token back, the job says completed);
    # nobody else wins anything and the status stays terminal
    assert await store.claim_suspended_for_resume(job_id, f"gate2:{job_id}", token="upd-3") == "upd-3"
    assert await store.set_status(job_id, JobStatus.completed)
    assert await store.claim_suspended_for_resume(job_id, f"gate2:{job_id}", token="upd-3") == "upd-3"
    assert await store.claim_suspended_for_resume(job_id, f"gate2:{job_id}", token="upd-4") is None
    assert not await store.rollback_resume_claim(job_id, "upd-3")
    assert (await store.get_job(job_id)).status == JobStatus.completed
    cancelled, cancelled_request = await suspended_job(store)
    assert await store.claim_suspended_for_cancel(cancelled)
    assert await store.claim_suspended_for_resume(cancelled, cancelled_request, token="upd-5") is None
    # a token held on one job wins nothing on another
    other, other_request = await suspended_job(store)
    assert await store.claim_suspended_for_resume(other, other_request, token="x") == "x"
    assert await store.claim_suspended_for_resume(job_id, request_id, token="x") is None


async def test_cancel_claim_clears_pending(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    assert await store.claim_suspended_for_cancel(job_id)
    assert not await store.claim_suspended_for_cancel(job_id)
    job = await store.get_job(job_id)
    assert job.status == JobStatus.cancelled and job.pending is None and job.finished_at is not None
    assert await store.claim_suspended_for_resume(job_id, request_id) is None
    assert not await store.mark_suspended(job_id, pending(request_id))  # a cancelled job stays cancelled


async def test_cancel_claim_writes_its_event_in_the_same_transaction(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    await store.append_event(job_id, "human_input_required", {"request_id": request_id})
    event = ("run_cancelled", {"reason": "superseded", "superseded_by": "job-2"})
    assert await store.claim_suspended_for_cancel(job_id, event=event)
    # the loser (a second stop, a late supersede) writes nothing at all
    assert not await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    job = await store.get_job(job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    assert [(e.seq, e.event, e.data) for e in await store.read_events(job_id)] == [
        (1, "human_input_required", {"request_id": request_id}),
        (2, "run_cancelled", {"reason": "superseded", "superseded_by": "job-2"}),
    ]

    # a resume that won first: the cancel claim with its event changes nothing
    resumed, resumed_request = await suspended_job(store)
    assert await store.claim_suspended_for_resume(resumed, resumed_request)
    assert not await store.claim_suspended_for_cancel(resumed, event=("run_cancelled", {"reason": "stopped"}))
    assert await store.read_events(resumed) == []
    assert (await store.get_job(resumed)).status == JobStatus.in_progress


async def test_cancel_claim_and_its_event_commit_together_or_not_at_all(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    # the event insert fails inside the claim's transaction (event is NOT NULL): the status
    # change is rolled back with it, so the job is never cancelled without its event
    with pytest.raises(Exception):
        await store.claim_suspended_for_cancel(job_id, event=(None, {"reason": "stopped"}))  # type: ignore[arg-type]
    job = await store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == request_id
    assert await store.read_events(job_id) == []
    assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    assert [(e.seq, e.event) for e in await store.read_events(job_id)] == [(1, "run_cancelled")]


async def test_concurrent_cancel_claims_write_one_event(store: Store) -> None:
    job_id, _ = await suspended_job(store)
    won = await asyncio.gather(*(store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"n": i}))
                                 for i in range(20)))
    assert won.count(True) == 1
    events = await store.read_events(job_id)
    assert [(e.seq, e.event, e.data) for e in events] == [(1, "run_cancelled", {"n": won.index(True)})]


async def test_find_suspended_by_effective_session(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    flow_id, other_flow = uid("flow-"), uid("flow-")
    a1, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")
    a2, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")
    await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s2")
    await suspended_job(store, user_id=bob.id, flow_id=flow_id, session_id="s1")
    await suspended_job(store, user_id=alice.id, flow_id=other_flow, session_id="s1")
    running = await new_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")
    no_session, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id)

    assert [j.job_id for j in await store.find_suspended(flow_id, alice.id, "s1")] == [a1, a2]
    assert [j.job_id for j in await store.find_suspended(flow_id, alice.id, flow_id)] == [no_session]
    assert running not in [j.job_id for j in await store.find_suspended(flow_id, alice.id, "s1")]

    mine = await store.list_pending(alice.id)
    assert len(mine) == 5 and all(j.user_id == alice.id and j.pending for j in mine)
    assert len(await store.list_pending(alice.id, flow_id=other_flow)) == 1
    assert len(await store.list_pending(bob.id)) == 1


async def _jobs_in_every_status(store: Store, flow_id: str, user_id: str, tag: str) -> dict[JobStatus, str]:
    """One job per status, created in the order of JobStatus; ids sort in that order too (a tie
    on created_at falls back on job_id)."""
    jobs = {}
    for i, status in enumerate(JobStatus):
        job_id = await new_job(store, user_id, flow_id=flow_id, job_id=f"{tag}-{i}-{uuid.uuid4()}")
        if status != JobStatus.queued:
            assert await store.set_status(job_id, JobStatus.in_progress)
        if status == JobStatus.suspended:
            assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"))
        elif status not in (JobStatus.queued, JobStatus.in_progress):
            assert await store.set_status(job_id, status)
        jobs[status] = job_id
    return jobs


ACTIVE = [JobStatus.queued, JobStatus.in_progress, JobStatus.suspended]


async def test_list_active_jobs_of_a_flow_every_user_oldest_first(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    flow_id, other_flow = uid("flow-"), uid("flow-")
    a = await _jobs_in_every_status(store, flow_id, alice.id, "a")
    b = await _jobs_in_every_status(store, flow_id, bob.id, "b")
    await _jobs_in_every_status(store, other_flow, alice.id, "c")

    active = await store.list_active_jobs(flow_id)
    assert [j.job_id for j in active] == [a[s] for s in ACTIVE] + [b[s] for s in ACTIVE]
    assert all(j.flow_id == flow_id and j.status in ACTIVE for j in active)
    assert [j.job_id for j in active] == [j.job_id for j in sorted(active, key=lambda j: (j.created_at, j.job_id))]
    assert active[2].pending is not None and active[2].pending.request_id == f"gate:{a[JobStatus.suspended]}"
    # a job that ends leaves the list; a resumed one stays
    assert await store.claim_suspended_for_resume(a[JobStatus.suspended], f"gate:{a[JobStatus.suspended]}")
    assert await store.set_status(b[JobStatus.queued], JobStatus.cancelled)
    assert [j.job_id for j in await store.list_active_jobs(flow_id)] == [
        a[JobStatus.queued], a[JobStatus.in_progress], a[JobStatus.suspended], b[JobStatus.in_progress],
        b[JobStatus.suspended]]
    assert await store.list_active_jobs(uid("flow-")) == []
    assert await store.list_active_jobs("%") == [] and await store.list_active_jobs("") == []


async def test_list_user_active_jobs_of_every_flow_oldest_first(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    first_flow, second_flow = uid("flow-"), uid("flow-")
    one = await _jobs_in_every_status(store, first_flow, alice.id, "a")
    two = await _jobs_in_every_status(store, second_flow, alice.id, "b")
    await _jobs_in_every_status(store, first_flow, bob.id, "c")

    active = await store.list_user_active_jobs(alice.id)
    assert [j.job_id for j in active] == [one[s] for s in ACTIVE] + [two[s] for s in ACTIVE]
    assert all(j.user_id == alice.id for j in active)
    assert len(await store.list_user_active_jobs(bob.id)) == 3
    assert await store.list_user_active_jobs(uid("user-")) == []
    assert await store.list_user_active_jobs("%") == []


# ---- the pause and its event ----------------------------------------------------------------


async def test_mark_suspended_writes_its_event_with_the_status(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    event = ("human_input_required", {"request_id": request_id})
    assert await store.mark_suspended(job_id, pending(request_id), event=event, dedupe_key=f"pause:1:{request_id}")
    assert (await store.get_job(job_id)).status == JobStatus.suspended
    assert [(e.seq, e.event, e.data) for e in await store.read_events(job_id)] == [
        (1, "human_input_required", {"request_id": request_id})]


async def test_mark_suspended_of_an_ended_job_writes_no_event(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.set_status(job_id, JobStatus.cancelled, event=("run_cancelled", {"reason": "stopped"}))
    request_id = f"gate:{job_id}"
    assert not await store.mark_suspended(job_id, pending(request_id),
                                          event=("human_input_required", {"request_id": request_id}))
    job = await store.get_job(job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    assert [e.event for e in await store.read_events(job_id)] == ["run_cancelled"]  # nothing after the end


async def test_mark_suspended_with_a_used_dedupe_key_writes_the_event_once(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    key = f"pause:1:{request_id}"
    # an earlier attempt (before the event moved into this write) appended the event, then died
    await store.append_event(job_id, "human_input_required", {"request_id": request_id}, dedupe_key=key)
    assert await store.mark_suspended(job_id, pending(request_id),
                                      event=("human_input_required", {"request_id": request_id}), dedupe_key=key)
    assert (await store.get_job(job_id)).status == JobStatus.suspended
    assert [e.event for e in await store.read_events(job_id)] == ["human_input_required"]
    # the sequence goes on without a gap
    assert await store.append_event(job_id, "next", {}) == 2


async def test_record_decision_writes_a_decision_in_one_step_and_once(store: Store) -> None:
    carol, dave = await new_user(store), await new_user(store)
    job_id = await new_job(store)
    request_id = f"gate:{job_id}"
    assert await store.mark_suspended(job_id, pending(request_id), event=("human_input_required", {"n": 1}))
    card = Message(id=uid(), session_id=uid("session-"), flow_id=uid("flow-"), job_id=job_id, sender="Machine",
                   sender_name="gate", kind="card", card={"prompt": "?", "options": [], "request_id": request_id},
                   created_at=utcnow())
    await store.add_message(card)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="t1") == "t1"
    events = [("human_input_vote", {"user": dave.id}, f"vote:{request_id}:{dave.id}"),
              ("human_input_expired", {"rerouted_to": "reject"}, "t1:expired"),
              ("human_input_decision", {"action_id": "reject"}, "t1:decision")]
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="reject",
                                       participants=[carol.id, dave.id, carol.id]) == [2, 3, 4]
    job = await store.get_job(job_id)
    assert job.pending is None and job.status == JobStatus.in_progress  # the claim's status is kept
    # a recorded decision is never rolled back: the job would wait for no request
    assert not await store.rollback_resume_claim(job_id, "t1")
    assert (await store.get_job(job_id)).status == JobStatus.in_progress
    assert (await store.list_messages(card.session_id))[0].card["submitted_action"] == "reject"
    assert await store.took_part(job_id, carol.id) and await store.took_part(job_id, dave.id)
    # another attempt with the same token sends its own: nothing is written (it goes on from this one)
    other_decision = [("human_input_decision", {"action_id": "approve"}, "t1:decision")]
    assert await store.record_decision(job_id, other_decision, token="t1", request_id=request_id,
                                       action_id="approve", participants=[carol.id]) is None
    assert [(e.seq, e.event) for e in await store.read_events(job_id)] == [
        (1, "human_input_required"), (2, "human_input_vote"), (3, "human_input_expired"), (4, "human_input_decision")]
    assert await store.append_event(job_id, "end", {}) == 5  # no gap
    assert (await store.claim_decision(job_id, request_id, "t1")).recorded["decision"].data == {"action_id": "reject"}
    # one key used already (the vote's, say): that event keeps its seq, the others are written
    other, other_request = await suspended_job(store)
    assert await store.claim_suspended_for_resume(other, other_request, token="t2") == "t2"
    await store.append_event(other, "human_input_vote", {"user": dave.id}, dedupe_key="vote:r:d")
    assert await store.record_decision(other, [("human_input_vote", {}, "vote:r:d"),
                                               ("human_input_decision", {}, "t2:decision")],
                                       token="t2", request_id="r", action_id="approve", participants=[]) == [1, 2]
    assert [e.event for e in await store.read_events(other)] == ["human_input_vote", "human_input_decision"]


async def test_read_events_named_is_the_jobs_events_of_that_name_in_order(store: Store) -> None:
    """A decision's record found by its name among the job's events (the API finds the decision an
    Update carried, its answer lost: a decision recorded is a decision answered as applied), those
    of a stopped run too; another job's, another name's are not among them."""
    job_id, request_id = await suspended_job(store)
    other, _ = await suspended_job(store)
    assert await store.read_events_named(job_id, "human_input_decision") == []
    await store.append_event(other, "human_input_decision", {"update_id": "u-other"})
    assert await store.claim_suspended_for_resume(job_id, request_id, token="t1") == "t1"
    assert await store.record_decision(job_id, [("human_input_decision", {"update_id": "u1"}, "t1:decision")],
                                       token="t1", request_id=request_id, action_id="approve",
                                       participants=[]) == [1]
    assert await store.mark_suspended(job_id, pending("gate2"))
    assert await store.claim_suspended_for_resume(job_id, "gate2", token="t2") == "t2"
    assert await store.record_decision(job_id, [("human_input_decision", {"update_id": "u2"}, "t2:decision")],
                                       token="t2", request_id="gate2", action_id="reject", participants=[]) == [2]
    assert await store.set_status(job_id, JobStatus.cancelled, event=("run_cancelled", {"reason": "stopped"}))
    found = await store.read_events_named(job_id, "human_input_decision")
    assert [(e.job_id, e.seq, e.event, e.data) for e in found] == [
        (job_id, 1, "human_input_decision", {"update_id": "u1"}), (job_id, 2, "human_input_decision", {"update_id": "u2"})]
    assert [e.seq for e in await store.read_events_named(job_id, "run_cancelled")] == [3]
    assert await store.read_events_named(job_id, "end") == []
    assert await store.read_events_named(uid("job-"), "human_input_decision") == []


async def test_every_way_of_appending_chains_the_event_to_the_one_before(store: Store) -> None:
    """The event log's hash chain (docs/audit.md): append_event, a deduped append (nothing new),
    mark_suspended's event, append_event_if_waiting, record_decision's events and set_status's
    each carry sha256 over {job_id, seq, event, data, at, prev_sha256} with the previous event's
    hash; the counter says how far the log goes; another job's chain is its own."""
    job_id = await new_job(store)
    assert await store.last_event_seq(job_id) == 0
    await store.append_event(job_id, "progress", {"n": 1.5, "text": "é\u2028", "list": [1, {"b": 2, "a": None}]})
    await store.append_event(job_id, "progress", {}, dedupe_key="once")
    assert await store.append_event(job_id, "progress", {"other": 1}, dedupe_key="once") == 2
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.mark_suspended(job_id, pending("gate"), event=("human_input_required", {"request_id": "gate"}))
    assert await store.append_event_if_waiting(job_id, "gate", "human_input_vote", {"user": "u"},
                                               dedupe_key="vote:gate:u") is not None
    assert await store.claim_suspended_for_resume(job_id, "gate", token="t1") == "t1"
    assert await store.record_decision(job_id, [("human_input_expired", {}, "t1:expired"),
                                                ("human_input_decision", {"action_id": "ok"}, "t1:decision")],
                                       token="t1", request_id="gate", action_id="ok", participants=[]) is not None
    assert await store.set_status(job_id, JobStatus.completed, event=("end", {"status": "completed"}))
    events = await store.read_events(job_id)
    assert len(events) == await store.last_event_seq(job_id) == 7
    prev = None
    for e in events:
        assert e.prev_sha256 == prev and e.sha256 == event_sha256(job_id, e.seq, e.event, e.data, e.created_at, prev)
        prev = e.sha256
    assert verify_chain(events, last_seq=7).ok
    named = await store.read_events_named(job_id, "human_input_decision")
    assert [(e.sha256, e.prev_sha256) for e in named] == [(events[5].sha256, events[4].sha256)]
    other = await new_job(store)
    await store.append_event(other, "progress", {"n": 1.5, "text": "é\u2028", "list": [1, {"b": 2, "a": None}]})
    first = (await store.read_events(other))[0]
    assert first.prev_sha256 is None and first.sha256 != events[0].sha256  # the job id is hashed


async def test_pending_ages_count_the_waiting_requests_of_each_flow_by_age(store: Store) -> None:
    """What signoff_pending_age_seconds reports: per flow, the requests waiting, how many within
    each bound, the oldest pause; running and ended jobs are not waiting; most waiting first."""
    a, b = uid("flow-a-"), uid("flow-b-")
    before = {p.flow_id for p in await store.pending_ages(utcnow(), [60])}
    t0 = utcnow()
    for flow in (a, a, b):
        await suspended_job(store, flow_id=flow)
    await new_job(store, flow_id=a)  # queued
    ended, _ = await suspended_job(store, flow_id=b)
    assert await store.set_status(ended, JobStatus.completed)
    t1 = utcnow()
    found = {p.flow_id: p for p in await store.pending_ages(t1 + timedelta(minutes=30), [60, 3600])
             if p.flow_id not in before}
    assert {f: (p.count, p.within) for f, p in found.items()} == {a: (2, (0, 2)), b: (1, (0, 1))}
    assert all(t0 - timedelta(seconds=1) <= p.oldest <= t1 for p in found.values())
    # the ages added up: each waited between 30 minutes (and what the test took) at that instant
    assert 2 * 1800 <= found[a].seconds <= 2 * (1800 + (t1 - t0).total_seconds() + 1)
    assert 1800 <= found[b].seconds <= 1800 + (t1 - t0).total_seconds() + 1
    now = [p for p in await store.pending_ages(t1 + timedelta(seconds=1), [60]) if p.flow_id in (a, b)]
    assert [(p.flow_id, p.within) for p in now] == [(a, (2,)), (b, (1,))]
    assert await store.pending_ages(t1, []) and all(p.within == () for p in await store.pending_ages(t1, []))


async def test_record_decision_writes_nothing_once_the_claim_is_not_the_callers(store: Store) -> None:
    """A stop that ended the claimed job first: the decision is not recorded after run_cancelled,
    its card is not stamped, the pending request and the participants are as they were."""
    dave = await new_user(store)
    job_id, request_id = await suspended_job(store)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="t1") == "t1"
    assert await store.set_status(job_id, JobStatus.cancelled, expect=[JobStatus.in_progress],
                                  event=("run_cancelled", {"reason": "stopped"}))
    events = [("human_input_decision", {"action_id": "approve"}, "t1:decision")]
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="approve",
                                       participants=[dave.id]) is None
    assert [e.event for e in await store.read_events(job_id)] == ["run_cancelled"]
    assert not await store.took_part(job_id, dave.id)
    # nor under a token that does not hold the claim
    running, running_request = await suspended_job(store)
    assert await store.claim_suspended_for_resume(running, running_request, token="t1") == "t1"
    assert await store.record_decision(running, events, token="t2", request_id=running_request,
                                       action_id="approve", participants=[]) is None
    assert await store.read_events(running) == []
    assert (await store.get_job(running)).pending is not None


async def test_record_decision_with_the_claim_claims_and_records_in_one_write(store: Store) -> None:
    """``claim=True`` (issue 33): the claim of a job waiting for the request and the decision's
    records in one transaction; refused (None, nothing written, the job as it was) when the job
    does not wait for that request, and when every key was used (the claim rolled back too)."""
    dave = await new_user(store)
    job_id, request_id = await suspended_job(store)
    events = [("human_input_decision", {"action_id": "approve"}, "t1:decision")]
    # another request: nothing claimed, nothing written
    assert await store.record_decision(job_id, events, token="t1", request_id="other", action_id="approve",
                                       participants=[dave.id], claim=True) is None
    job = await store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.waits_for(request_id)
    assert await store.read_events(job_id) == [] and not await store.took_part(job_id, dave.id)
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="approve",
                                       participants=[dave.id], claim=True) == [1]
    job = await store.get_job(job_id)
    assert job.status == JobStatus.in_progress and job.pending is None and await store.took_part(job_id, dave.id)
    claim = await store.claim_decision(job_id, request_id, "t1", claim=False)
    assert claim.won and claim.recorded["decision"].data == {"action_id": "approve"}
    # the same token again (a twin attempt): its own claim is held, every key used: nothing more
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="reject",
                                       participants=[], claim=True) is None
    # a rival token: the job no longer waits, so no claim, nothing written
    assert await store.record_decision(job_id, [("human_input_decision", {}, "t2:decision")], token="t2",
                                       request_id=request_id, action_id="reject", participants=[], claim=True) is None
    assert [e.seq for e in await store.read_events(job_id)] == [1]
    # every key used by an earlier write: the claim is not taken either (rolled back with the rest)
    other, other_request = await suspended_job(store)
    await store.append_event(other, "human_input_decision", {}, dedupe_key="t3:decision")
    assert await store.record_decision(other, [("human_input_decision", {}, "t3:decision")], token="t3",
                                       request_id=other_request, action_id="approve", participants=[],
                                       claim=True) is None
    assert (await store.get_job(other)).waits_for(other_request)
    with pytest.raises(StoreError):
        await store.record_decision(other, events, token="", request_id=other_request, action_id="approve",
                                    participants=[], claim=True)


async def test_record_decision_with_a_stamp_claims_only_the_row_as_it_was_read(store: Store) -> None:
    """``stamp`` (issue 33: a job carried from the API's read): the claim is taken only while the
    job's row still has the ``updated_at`` that read saw; a row changed since (here a claim let go
    of: the job waits for the same request again) gets nothing written, the job as it was."""
    job_id, request_id = await suspended_job(store)
    read = await store.get_job(job_id)
    events = [("human_input_decision", {"action_id": "approve"}, "t1:decision")]
    assert (await store.claim_decision(job_id, request_id, "t0")).won  # another attempt's claim ...
    assert await store.rollback_resume_claim(job_id, "t0")  # ... let go of: waiting again, a new stamp
    moved = await store.get_job(job_id)
    assert moved.waits_for(request_id) and moved.updated_at != read.updated_at
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="approve",
                                       participants=[], claim=True, stamp=read.updated_at) is None
    assert await store.read_events(job_id) == [] and (await store.get_job(job_id)).waits_for(request_id)
    assert not (await store.claim_decision(job_id, request_id, "t1", claim=False)).won
    # the row as read now: claimed and recorded in the one write
    assert await store.record_decision(job_id, events, token="t1", request_id=request_id, action_id="approve",
                                       participants=[], claim=True, stamp=moved.updated_at) == [1]
    job = await store.get_job(job_id)
    assert job.status == JobStatus.in_progress and job.pending is None


async def test_get_job_with_flow_reads_both_in_one_call(store: Store) -> None:
    """The job and its flow's latest version (a decision's check, issue 33); a deleted flow is
    None beside its job; no job, nothing."""
    owner = await new_user(store)
    spec = {"name": "Refund", "nodes": [{"id": "a", "type": "ChatInput"}], "edges": []}
    flow = await store.save_flow(owner.id, "Refund", spec)
    flow = await store.save_flow(owner.id, "Refund v2", {**spec, "name": "Refund v2"}, flow_id=flow.id)
    job_id = await new_job(store, owner.id, flow_id=flow.id)
    job, got = await store.get_job_with_flow(job_id)
    assert job == await store.get_job(job_id)
    assert got == await store.get_flow(flow.id) and got.version == 2 and got.spec["name"] == "Refund v2"
    assert got.owner_id == owner.id and utc(got.created_at) and utc(got.updated_at)
    assert await store.delete_flow(flow.id)
    assert await store.get_job_with_flow(job_id) == (job, None)
    assert await store.get_job_with_flow(uid("job-")) == (None, None)


async def test_record_decision_racing_appends_keeps_seqs_gap_free(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="t") == "t"

    def decision(i: int):
        return store.record_decision(job_id, [("human_input_decision", {"i": i}, f"t:decision{i}"),
                                              ("extra", {"i": i}, f"t:extra{i}")],
                                     token="t", request_id=request_id, action_id="approve", participants=[])

    decisions = [decision(i) for i in range(10)]
    appends = [store.append_event(job_id, "progress", {"i": i}) for i in range(10)]
    again = [decision(i) for i in range(10)]
    results = await asyncio.gather(*decisions, *appends, *again)
    seqs = [e.seq for e in await store.read_events(job_id)]
    assert seqs == list(range(1, 31))  # 10 decisions of two events and 10 appends, each once
    for first, second in zip(results[:10], results[20:]):  # each decision sent twice at once: written once
        assert sorted([first is None, second is None]) == [False, True]


# ---- leases of inline runs (docs/inline.md) -------------------------------------------------


async def test_renew_lease_reports_running_cancel_requested_and_ended(store: Store) -> None:
    job_id = await run_job(store)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "running"
    assert await store.set_status(job_id, JobStatus.in_progress, expect=[JobStatus.queued])
    assert await store.request_cancel(job_id)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "cancel_requested"
    assert await store.set_status(job_id, JobStatus.cancelled)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "ended"
    assert not await store.request_cancel(job_id)


async def test_lease_state_reads_what_a_renewal_would_answer_and_renews_nothing(store: Store) -> None:
    job_id = await run_job(store, seconds=-1)  # a lease that ran out, not swept yet
    assert await store.lease_state(job_id) == "running"
    assert job_id in [j for j in await store.fail_expired_leases(utcnow(), ERROR)]  # the read renewed nothing
    assert await store.lease_state(job_id) == "ended"
    running = await run_job(store, seconds=60)
    await store.set_status(running, JobStatus.in_progress, expect=[JobStatus.queued])
    assert await store.request_cancel(running)
    assert await store.lease_state(running) == "cancel_requested"
    assert await store.lease_state(await run_job(store, lease=False)) == "ended"  # a run for Temporal: no lease
    assert await store.lease_state("no-such-job") == "ended"


async def test_a_job_without_lease_is_never_renewed_nor_swept(store: Store) -> None:
    job_id = await run_job(store, lease=False)
    assert await store.renew_lease(job_id, utcnow()) == "ended"
    assert not await store.request_cancel(job_id)
    assert job_id not in await store.fail_expired_leases(utcnow() + timedelta(days=1), ERROR)
    assert (await store.get_job(job_id)).status == JobStatus.queued


async def test_sweep_fails_expired_leases_once_with_the_event(store: Store) -> None:
    expired = await run_job(store, seconds=-1)
    await store.set_status(expired, JobStatus.in_progress, expect=[JobStatus.queued])
    alive = await run_job(store, seconds=60)
    ended = await store.fail_expired_leases(utcnow(), ERROR)
    assert expired in ended and alive not in ended
    job = await store.get_job(expired)
    assert job.status == JobStatus.failed and job.error == ERROR and job.finished_at is not None
    events = await store.read_events(expired)
    assert [(e.seq, e.event, e.data) for e in events] == [
        (1, "run_failed", {"error": "the process running it stopped", "type": "LeaseExpired", "vertex_id": None})
    ]
    # a second sweep finds nothing more to do; the live job is untouched
    assert expired not in await store.fail_expired_leases(utcnow(), ERROR)
    assert len(await store.read_events(expired)) == 1
    assert (await store.get_job(alive)).status == JobStatus.queued


async def test_a_renewal_before_the_sweep_wins(store: Store) -> None:
    job_id = await run_job(store, seconds=-1)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=60)) == "running"
    assert job_id not in await store.fail_expired_leases(utcnow(), ERROR)
    assert (await store.get_job(job_id)).status == JobStatus.queued


async def test_list_unstarted_finds_old_queued_runs_for_temporal_only(store: Store) -> None:
    temporal = await run_job(store, lease=False)  # queued, no lease: waits for its workflow
    inline = await run_job(store, lease=True)  # leased: an inline run, never a workflow's
    started = await run_job(store, lease=False)
    assert await store.set_status(started, JobStatus.in_progress)
    later = utcnow() + timedelta(seconds=1)
    found = {j.job_id for j in await store.list_unstarted(later, limit=100_000)}
    assert temporal in found and inline not in found and started not in found
    # created after the cut-off: not (yet) a candidate
    assert temporal not in {j.job_id for j in await store.list_unstarted(utcnow() - timedelta(hours=1), limit=100_000)}


# ---- events ---------------------------------------------------------------------------------


async def test_event_log(store: Store) -> None:
    job_id = await new_job(store)
    other = await new_job(store)
    assert await store.append_event(job_id, "human_input_required", {"request_id": "r"}) == 1
    assert await store.append_event(other, "end", {}) == 1
    assert await store.append_event(job_id, "human_input_decision", {"action_id": "approve"}) == 2
    assert await store.append_event(job_id, "end", {"status": "completed"}) == 3
    events = await store.read_events(job_id)
    assert [(e.seq, e.event) for e in events] == [(1, "human_input_required"), (2, "human_input_decision"), (3, "end")]
    assert events[1].data == {"action_id": "approve"} and utc(events[0].created_at)
    assert [e.seq for e in await store.read_events(job_id, after_seq=1)] == [2, 3]
    assert [e.seq for e in await store.read_events(job_id, after_seq=1, limit=1)] == [2]
    assert await store.read_events(job_id, after_seq=3) == []


async def test_event_dedupe_key_appends_once_and_keeps_seq_gap_free(store: Store) -> None:
    job_id, other = await new_job(store), await new_job(store)
    assert await store.append_event(job_id, "human_input_required", {"n": 1}, dedupe_key="pause:1") == 1
    assert await store.append_event(job_id, "human_input_decision", {"n": 2}, dedupe_key="t1:decision") == 2
    assert await store.append_event(job_id, "human_input_decision", {"n": 3}, dedupe_key="t1:decision") == 2
    assert await store.append_event(job_id, "human_input_required", {"n": 4}, dedupe_key="pause:1") == 1
    assert await store.append_event(job_id, "progress", {"n": 5}) == 3  # no key: always appended
    assert await store.append_event(job_id, "progress", {"n": 6}) == 4
    assert await store.append_event(other, "human_input_required", {}, dedupe_key="pause:1") == 1  # per job
    events = await store.read_events(job_id)
    assert [(e.seq, e.event, e.data) for e in events] == [
        (1, "human_input_required", {"n": 1}),
        (2, "human_input_decision", {"n": 2}),
        (3, "progress", {"n": 5}),
        (4, "progress", {"n": 6}),
    ]


async def test_status_change_and_its_event_are_one_write(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress],
                                  result={"ok": True}, event=("end", {"status": "completed"}))
    # a second attempt (e.g. a retried activity) changes nothing and writes no second event
    assert not await store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress],
                                      event=("end", {"status": "completed"}))
    assert not await store.set_status(job_id, JobStatus.failed, event=("run_failed", {}))
    assert [(e.seq, e.event, e.data) for e in await store.read_events(job_id)] == [(1, "end", {"status": "completed"})]
    assert await store.append_event(job_id, "late", {}) == 2


# ---- concurrent callers on one store --------------------------------------------------------


async def test_50_concurrent_appends_on_one_store_give_seqs_1_to_50(store: Store) -> None:
    job_id = await new_job(store)
    seqs = await asyncio.gather(*(store.append_event(job_id, "progress", {"i": i}) for i in range(50)))
    assert sorted(seqs) == list(range(1, 51))
    events = await store.read_events(job_id)
    assert [e.seq for e in events] == list(range(1, 51))
    assert sorted(e.data["i"] for e in events) == list(range(50))


async def test_concurrent_resume_claims_on_one_store_have_one_winner(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    tokens = await asyncio.gather(*(store.claim_suspended_for_resume(job_id, request_id) for _ in range(20)))
    assert len([t for t in tokens if t is not None]) == 1
    assert (await store.get_job(job_id)).status == JobStatus.in_progress


async def test_concurrent_token_claims_on_one_store_win_once_with_their_retries(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    results = await asyncio.gather(
        *(store.claim_suspended_for_resume(job_id, request_id, token=f"t{i}") for i in range(10) for _ in range(2)))
    winners = {r for r in results if r is not None}
    assert len(winners) == 1 and results.count(winners.pop()) == 2


async def test_claim_decision_tells_what_an_earlier_attempt_of_the_token_did(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    first = await store.claim_decision(job_id, request_id, "wf-1")
    assert first.won and first.job.status == JobStatus.in_progress and first.recorded == {}
    await store.append_event(job_id, "unrelated", {}, dedupe_key="wf-10:decision")  # another token, same prefix
    await store.append_event(job_id, "unrelated", {}, dedupe_key="wf-1:other")  # not one of a decision's keys
    assert await store.record_decision(job_id, [("human_input_expired", {"n": 1}, "wf-1:expired"),
                                                ("human_input_decision", {"action_id": "reject"}, "wf-1:decision")],
                                       token="wf-1", request_id=request_id, action_id="reject",
                                       participants=[]) == [3, 4]
    look = await store.claim_decision(job_id, request_id, "wf-1", claim=False)  # only looks
    assert look.won and set(look.recorded) == {"expired", "decision"}
    again = await store.claim_decision(job_id, request_id, "wf-1")  # the same attempt once more: its claim
    assert again.won and again.job.pending is None
    assert {k: (e.seq, e.event, e.data) for k, e in again.recorded.items()} == {
        "expired": (3, "human_input_expired", {"n": 1}), "decision": (4, "human_input_decision", {"action_id": "reject"})}
    other = await store.claim_decision(job_id, request_id, "wf-2")  # another token wins nothing, sees nothing
    assert not other.won and other.recorded == {} and other.job.status == JobStatus.in_progress
    # the run reached its next pause (the claim cleared): the token no longer holds, its record stays
    assert await store.mark_suspended(job_id, pending(f"next:{job_id}"))
    later = await store.claim_decision(job_id, request_id, "wf-1")
    assert not later.won and later.job.pending.request_id == f"next:{job_id}" and "decision" in later.recorded
    missing = await store.claim_decision("no-such-job", request_id, "wf-1")
    assert not missing.won and missing.job is None and missing.recorded == {}
    # looking takes no claim: a suspended job stays suspended
    waiting, waiting_request = await suspended_job(store)
    look = await store.claim_decision(waiting, waiting_request, "wf-1", claim=False)
    assert not look.won and look.job.status == JobStatus.suspended


async def test_resume_claim_against_cancel_claim_on_one_store_never_both_win(store: Store) -> None:
    for _ in range(20):
        job_id, request_id = await suspended_job(store)
        token, cancelled = await asyncio.gather(
            store.claim_suspended_for_resume(job_id, request_id), store.claim_suspended_for_cancel(job_id))
        assert (token is not None) != cancelled


async def test_concurrent_idempotency_collisions_on_one_store_make_one_job(store: Store) -> None:
    user = await new_user(store)
    flow_id, key = uid("flow-"), uid("key-")
    results = await asyncio.gather(*(
        store.create_job(NewJob(job_id=uid("job-"), flow_id=flow_id, flow_version=1, user_id=user.id, idempotency_key=key))
        for _ in range(20)))
    assert sum(created for _, created in results) == 1
    assert len({job.job_id for job, _ in results}) == 1


async def test_create_job_with_max_in_flight_stops_at_it_for_that_user_only(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    first = await new_job(store, alice.id, idempotency_key="k1")
    second = await new_job(store, alice.id)
    await suspended_job(store, user_id=alice.id)  # paused at a gate: not in flight
    ended = await new_job(store, alice.id)
    assert await store.set_status(ended, JobStatus.completed)
    third = await new_job(store, alice.id, status=JobStatus.in_progress)
    with pytest.raises(RunsInFlightLimit) as refused:
        await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id), max_in_flight=3)
    assert refused.value.code == "RUNS_IN_FLIGHT_LIMIT" and refused.value.details["retry_after"] >= 1
    assert len(await store.list_user_active_jobs(alice.id)) == 4  # nothing inserted
    # a repeat of a job already made answers it, as without a limit
    again, created = await store.create_job(
        NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id, idempotency_key="k1"), max_in_flight=3)
    assert (again.job_id, created) == (first, False)
    # another user, a higher limit, no limit: inserted
    for user_id, limit in ((bob.id, 3), (alice.id, 4), (alice.id, 0)):
        _, created = await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=user_id),
                                            max_in_flight=limit)
        assert created
    # one ends, one pauses: two places free
    assert await store.set_status(second, JobStatus.failed)
    assert await store.mark_suspended(third, pending(f"gate:{third}"))
    for _ in range(2):
        _, created = await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id),
                                            max_in_flight=5)
        assert created
    with pytest.raises(RunsInFlightLimit):
        await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id), max_in_flight=5)


async def test_create_job_reads_the_runs_it_supersedes_in_its_insert(store: Store) -> None:
    """Issue 33: a submit's look for the runs it supersedes rides in the job's insert
    (``reads``), as find_suspended reads them: this user's suspended runs of the flow in the
    job's effective session, oldest first, not the new job; a repeat reads nothing."""
    alice, bob = await new_user(store), await new_user(store)
    flow_id = uid("flow-")
    a1, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")
    a2, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")
    await suspended_job(store, user_id=alice.id, flow_id=flow_id, session_id="s2")
    await suspended_job(store, user_id=bob.id, flow_id=flow_id, session_id="s1")
    await suspended_job(store, user_id=alice.id, flow_id=uid("flow-"), session_id="s1")
    await new_job(store, user_id=alice.id, flow_id=flow_id, session_id="s1")  # running: not superseded
    no_session, _ = await suspended_job(store, user_id=alice.id, flow_id=flow_id)

    reads = SubmitReads()
    job, created = await store.create_job(NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=alice.id,
                                                 session_id="s1", idempotency_key="k"), reads=reads)
    assert created and [j.job_id for j in reads.suspended] == [a1, a2]
    assert reads.suspended == await store.find_suspended(flow_id, alice.id, "s1")
    reads = SubmitReads()
    await store.create_job(NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=alice.id), reads=reads)
    assert [j.job_id for j in reads.suspended] == [no_session]  # no session: the flow's id is its session
    again = SubmitReads()
    first, created = await store.create_job(NewJob(job_id=uid(), flow_id=flow_id, flow_version=1, user_id=alice.id,
                                                   session_id="s1", idempotency_key="k"), reads=again)
    assert (first.job_id, created, again.suspended) == (job.job_id, False, None)


async def test_create_job_with_max_stored_bytes_refuses_a_full_user_first(store: Store) -> None:
    """Issue 33: the stored bytes' check (409 STORAGE_LIMIT) in the job's insert: a user who
    keeps the limit or more is refused, a repeated key too, and nothing is inserted."""
    alice, bob = await new_user(store), await new_user(store)
    first = await new_job(store, alice.id, idempotency_key="k1")  # its request is counted
    keeps = await store.stored_bytes(alice.id)
    assert keeps > 0
    for key in (None, "k1"):
        with pytest.raises(StorageLimit) as refused:
            await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id,
                                          idempotency_key=key), max_stored_bytes=keeps)
        assert refused.value.code == "STORAGE_LIMIT" and refused.value.details["used"] == keeps
    assert [j.job_id for j in await store.list_user_active_jobs(alice.id)] == [first]  # nothing inserted
    assert await store.stored_bytes(alice.id) == keeps
    _, created = await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=alice.id),
                                        max_stored_bytes=keeps + 1)  # under it: inserted
    assert created
    _, created = await store.create_job(NewJob(job_id=uid(), flow_id=uid(), flow_version=1, user_id=bob.id),
                                        max_stored_bytes=keeps)  # another user's count
    assert created


async def test_concurrent_creations_never_pass_the_stored_bytes_budget(store: Store) -> None:
    """With the runs-in-flight limit on (the user's row locked first), one user's creations at
    the same moment each read the stored bytes the one before charged: exactly as many pass as
    the budget holds (a review saw 60 at once on PostgreSQL pass 1,190 bytes over it when the
    count was read before the lock)."""
    for _ in range(3):  # rounds: a pool's connections open while the first ones race
        user = await new_user(store)
        request = {"input_value": "x" * 200}
        await store.create_job(NewJob(job_id=uid("job-"), flow_id=uid("flow-"), flow_version=1, user_id=user.id,
                                      request=request))
        each = await store.stored_bytes(user.id)
        results = await asyncio.gather(*(
            store.create_job(NewJob(job_id=uid("job-"), flow_id=uid("flow-"), flow_version=1, user_id=user.id,
                                    request=request), max_in_flight=100, max_stored_bytes=each * 5)
            for _ in range(16)), return_exceptions=True)
        assert sum(1 for r in results if isinstance(r, tuple) and r[1]) == 4, results
        assert sum(1 for r in results if isinstance(r, StorageLimit)) == 12, results
        assert await store.stored_bytes(user.id) == each * 5


async def test_concurrent_creations_never_pass_the_runs_in_flight_limit(store: Store) -> None:
    for _ in range(5):  # rounds: a pool's connections open while the first ones race
        user = await new_user(store)
        results = await asyncio.gather(*(
            store.create_job(NewJob(job_id=uid("job-"), flow_id=uid("flow-"), flow_version=1, user_id=user.id),
                             max_in_flight=5)
            for _ in range(16)), return_exceptions=True)
        assert sum(1 for r in results if isinstance(r, tuple) and r[1]) == 5, results
        assert sum(1 for r in results if isinstance(r, RunsInFlightLimit)) == 11, results
        assert len(await store.list_user_active_jobs(user.id)) == 5


async def test_concurrent_get_or_create_user_on_one_store_makes_one_user(store: Store) -> None:
    name = uid("dev-")
    users = await asyncio.gather(*(store.get_or_create_user(name) for _ in range(12)))
    assert len({u.id for u in users}) == 1


async def test_concurrent_appends_with_one_dedupe_key_on_one_store_write_one_event(store: Store) -> None:
    job_id = await new_job(store)
    results = await asyncio.gather(
        *(store.append_event(job_id, "human_input_decision", {}, dedupe_key="t:decision") for _ in range(10)),
        *(store.append_event(job_id, "progress", {}) for _ in range(10)))
    assert len(set(results[:10])) == 1
    events = await store.read_events(job_id)
    assert [e.seq for e in events] == list(range(1, 12))
    assert [e.event for e in events].count("human_input_decision") == 1


# ---- checkpoints ----------------------------------------------------------------------------


async def test_checkpoints(store: Store) -> None:
    run_id = uid("run-")
    first = await store.save_checkpoint(run_id, {"step": 1})
    second = await store.save_checkpoint(
        run_id, {"step": 2, "outputs": {"z": 1, "a": 2}}, job_id=run_id, expires_at=utcnow() + timedelta(days=1)
    )
    latest = await store.load_latest_checkpoint(run_id)
    assert latest.id == second and latest.data == {"step": 2, "outputs": {"z": 1, "a": 2}}
    assert list(latest.data["outputs"]) == ["z", "a"]  # key order kept
    assert latest.job_id == run_id and utc(latest.expires_at) and utc(latest.created_at)
    assert (await store.load_checkpoint(first)).data == {"step": 1}
    assert await store.load_checkpoint(uid()) is None
    assert await store.load_latest_checkpoint(uid()) is None

    old_run = uid("run-")
    await store.save_checkpoint(old_run, {"x": 1}, expires_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert await store.delete_expired_checkpoints(utcnow()) >= 1
    assert await store.load_latest_checkpoint(old_run) is None
    assert (await store.load_latest_checkpoint(run_id)).id == second

    assert await store.delete_checkpoints(run_id) == 2
    assert await store.load_latest_checkpoint(run_id) is None



async def test_the_checkpoints_of_ended_runs_go_and_give_their_bytes_back(store: Store) -> None:
    """The sweep's backstop (RunService.recover): a job in every status, each with a checkpoint;
    those of the ended ones go (and their bytes with them), those of the queued, running and
    suspended stay."""
    alice = await new_user(store)
    jobs = await _jobs_in_every_status(store, uid("flow-"), alice.id, uid("ended-"))
    before = await store.stored_bytes(alice.id)
    for job_id in jobs.values():
        await store.save_checkpoint(job_id, {"at": job_id}, job_id=job_id)
    charged = await store.stored_bytes(alice.id) - before
    assert await store.delete_checkpoints_of_ended_runs() >= 4
    for status, job_id in jobs.items():
        kept = await store.load_latest_checkpoint(job_id)
        assert (kept is None) == status.terminal, status
    assert await store.stored_bytes(alice.id) - before == charged * 3 // 7  # 3 of 7 equal checkpoints stay

# ---- chat history ---------------------------------------------------------------------------


async def test_messages_and_card_stamps(store: Store) -> None:
    session, flow_id = uid("session-"), uid("flow-")
    job_a, job_b = uid("job-"), uid("job-")
    t0 = utcnow()
    user_msg = Message(
        id=uid(), session_id=session, flow_id=flow_id, job_id=job_a, sender="User", sender_name="User",
        text="refund please", created_at=t0,
    )
    card_a = Message(
        id=uid(), session_id=session, flow_id=flow_id, job_id=job_a, sender="Machine", sender_name="gate",
        kind="card", card={"prompt": "Approve?", "options": [{"action_id": "approve", "label": "Approve"}],
                           "request_id": f"gate:{job_a}"},
        created_at=t0 + timedelta(milliseconds=1),
    )
    card_b = card_a.model_copy(update={"id": uid(), "job_id": job_b, "card": {**card_a.card, "request_id": f"gate:{job_b}"},
                                       "created_at": t0 + timedelta(milliseconds=2)})
    for m in (user_msg, card_a, card_b):
        stored = await store.add_message(m)
        assert stored == m
    assert await store.add_message(user_msg) == user_msg  # a retried write adds nothing
    other_flow_msg = user_msg.model_copy(update={"id": uid(), "flow_id": uid("flow-"), "created_at": t0 + timedelta(seconds=1)})
    await store.add_message(other_flow_msg)

    assert await store.stamp_card(f"gate:{job_a}", "approve") == 1
    assert await store.supersede_cards(job_a) == 0  # answered cards are never superseded
    assert await store.supersede_cards(job_b) == 1
    assert await store.supersede_cards(job_b) == 0

    # a stopped run's card says stopped, not superseded (there is no new run), and once closed
    # it is closed: neither closing changes the other's card
    job_c = uid("job-")
    card_c = card_a.model_copy(update={"id": uid(), "job_id": job_c, "card": {**card_a.card, "request_id": f"gate:{job_c}"},
                                       "created_at": t0 + timedelta(milliseconds=3)})
    await store.add_message(card_c)
    assert await store.supersede_cards(job_c, stopped=True) == 1
    assert await store.supersede_cards(job_c, stopped=True) == 0
    assert await store.supersede_cards(job_c) == 0
    assert await store.supersede_cards(job_b, stopped=True) == 0
    stopped_again = card_c.model_copy(update={"id": uid(), "card": {**card_c.card, "stopped": True}})
    assert (await store.add_message(stopped_again)).card == stopped_again.card  # the stamp round-trips

    history = await store.list_messages(session, flow_id=flow_id)
    assert [m.id for m in history][:4] == [user_msg.id, card_a.id, card_b.id, card_c.id]
    assert history[1].card["submitted_action"] == "approve" and "superseded" not in history[1].card
    assert history[2].card["superseded"] is True and "submitted_action" not in history[2].card
    assert "stopped" not in history[2].card and "stopped" not in history[1].card
    assert history[3].card["stopped"] is True and "superseded" not in history[3].card
    assert history[1].card["options"] == card_a.card["options"]
    assert len(await store.list_messages(session)) == 6
    assert await store.list_messages(uid()) == []


# ---- spans ----------------------------------------------------------------------------------


async def test_spans_upsert_and_traces(store: Store) -> None:
    trace, flow_id = uid("trace-"), uid("flow-")
    t0 = utcnow()
    root = SpanRecord(trace_id=trace, span_id="root", name="Refund approval", type="flow", start_time=t0,
                      run_id=trace, flow_id=flow_id)
    child = SpanRecord(trace_id=trace, span_id="gate", parent_id="root", name="Human In The Loop — Approve",
                       start_time=t0 + timedelta(milliseconds=5), inputs={"prompt": "ok?"}, run_id=trace, flow_id=flow_id)
    await store.save_spans([root, child])
    await store.save_spans([])
    ended_child = child.model_copy(update={"end_time": t0 + timedelta(seconds=1), "status": "ok", "outputs": {"a": 1}})
    ended_root = root.model_copy(update={"end_time": t0 + timedelta(seconds=2), "status": "ok"})
    await store.save_spans([ended_child, ended_root])
    spans = await store.get_trace(trace)
    assert spans == [ended_root, ended_child]
    assert await store.get_trace(uid()) == []

    traces = await store.list_traces(flow_id=flow_id)
    assert traces == [
        {"trace_id": trace, "run_id": trace, "flow_id": flow_id, "name": "Refund approval", "status": "ok",
         "start_time": t0, "end_time": t0 + timedelta(seconds=2)}
    ]
    failed = uid("trace-")
    await store.save_spans([SpanRecord(trace_id=failed, span_id="r", name="x", start_time=t0 + timedelta(seconds=9),
                                       end_time=t0 + timedelta(seconds=10), status="error", flow_id=flow_id)])
    listed = await store.list_traces(flow_id=flow_id)
    assert [t["trace_id"] for t in listed] == [failed, trace] and listed[0]["status"] == "error"
    assert len(await store.list_traces(flow_id=flow_id, limit=1)) == 1


TRACE_ROW = {"trace_id", "run_id", "flow_id", "name", "status", "start_time", "end_time"}


async def _run_trace(store: Store, user_id: str, flow_id: str, start: datetime, **span) -> str:
    """A job of the user and its trace (trace id = run id = job id), spans as the tracer writes them."""
    job_id = await new_job(store, user_id, flow_id=flow_id)
    await store.save_spans([SpanRecord(trace_id=span.pop("trace_id", job_id), span_id="root", name="run",
                                       start_time=start, end_time=start + timedelta(seconds=1), status="ok",
                                       flow_id=flow_id, **{"run_id": job_id, **span})])
    return job_id


async def test_list_traces_of_a_user_is_filtered_before_the_limit(store: Store) -> None:
    mine, others = await new_user(store), await new_user(store)
    flow_id = uid("flow-")
    t0 = utcnow()
    # two runs of mine, then many more recent runs of someone else on the same flow
    old, new = [await _run_trace(store, mine.id, flow_id, t0 + timedelta(seconds=i)) for i in (1, 2)]
    theirs = [await _run_trace(store, others.id, flow_id, t0 + timedelta(minutes=i)) for i in range(1, 8)]

    # without the user, the limit is filled with their runs: filtering afterwards would find none
    assert {t["trace_id"] for t in await store.list_traces(flow_id=flow_id, limit=2)} <= set(theirs)
    listed = await store.list_traces(user_id=mine.id, limit=2)
    assert [t["trace_id"] for t in listed] == [new, old]
    assert set(listed[0]) == TRACE_ROW
    assert listed[0] == {"trace_id": new, "run_id": new, "flow_id": flow_id, "name": "run", "status": "ok",
                         "start_time": t0 + timedelta(seconds=2), "end_time": t0 + timedelta(seconds=3)}
    assert [t["trace_id"] for t in await store.list_traces(user_id=mine.id, limit=1)] == [new]
    assert [t["trace_id"] for t in await store.list_traces(flow_id=flow_id, user_id=mine.id, limit=2)] == [new, old]
    assert await store.list_traces(flow_id=uid("flow-"), user_id=mine.id) == []  # both filters hold
    assert [t["trace_id"] for t in await store.list_traces(user_id=others.id, limit=3)] == theirs[::-1][:3]
    assert len(await store.list_traces(user_id=others.id)) == 7
    for nobody in (uid("user-"), "%", "' OR '1'='1", ""):
        assert await store.list_traces(user_id=nobody) == []


async def test_list_traces_of_a_user_follows_the_run_of_each_trace(store: Store) -> None:
    mine, others = await new_user(store), await new_user(store)
    flow_id = uid("flow-")
    t0 = utcnow()
    # spans without a run id: the trace id is the run
    bare = await _run_trace(store, mine.id, flow_id, t0, run_id=None)
    # a trace id that is my job's, but whose spans say they belong to their run: theirs
    their_job = await new_job(store, others.id, flow_id=flow_id)
    my_job = await _run_trace(store, mine.id, flow_id, t0 + timedelta(seconds=1), run_id=their_job)
    # spans of no job at all: nobody's
    await store.save_spans([SpanRecord(trace_id=uid("orphan-"), span_id="r", name="x", start_time=t0,
                                       end_time=t0, status="ok", flow_id=flow_id)])
    # a run with many spans is one row, whatever spans the limit would have counted
    many = await _run_trace(store, mine.id, flow_id, t0 + timedelta(seconds=2))
    await store.save_spans([SpanRecord(trace_id=many, span_id=f"c{i}", parent_id="root", name=f"c{i}",
                                       start_time=t0 + timedelta(seconds=3), run_id=many, flow_id=flow_id)
                            for i in range(5)])

    listed = await store.list_traces(user_id=mine.id)
    assert [t["trace_id"] for t in listed] == [many, bare]
    assert listed[0]["end_time"] is None and listed[1]["run_id"] is None
    assert [(t["trace_id"], t["run_id"]) for t in await store.list_traces(user_id=others.id)] == [(my_job, their_job)]
    assert len(await store.list_traces(flow_id=flow_id)) == 4


# ---- blobs ----------------------------------------------------------------------------------


async def test_blobs(store: Store) -> None:
    prefix = uid("run-") + "/"
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    await store.put_blob(prefix + "a", payload)
    await store.put_blob(prefix + "b", b"")
    await store.put_blob(prefix + "b", b"second")
    await store.put_blob(prefix[:-1] + "x", b"not under the prefix")
    assert await store.get_blob(prefix + "a") == payload
    assert await store.get_blob(prefix + "b") == b"second"
    assert await store.get_blob(uid()) is None
    assert await store.delete_blobs(prefix) == 2
    assert await store.get_blob(prefix + "a") is None
    assert await store.get_blob(prefix[:-1] + "x") == b"not under the prefix"
    with pytest.raises(ValueError):
        await store.delete_blobs("")


# ---- groups of approvers (DESIGN §9) -------------------------------------------------------


async def test_groups_are_their_owners_and_a_name_is_unique_per_owner(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    finance = await store.create_group(alice.id, "finance")
    assert isinstance(finance, Group) and utc(finance.created_at)
    assert (finance.owner_id, finance.name, finance.members) == (alice.id, "finance", [])
    assert await store.get_group(alice.id, "finance") == finance
    with pytest.raises(StoreConflict):
        await store.create_group(alice.id, "finance")
    assert await store.list_groups(alice.id) == [finance]  # the loser changed nothing

    # bob's "finance" is another group: creating it squats nothing of alice's, and neither sees
    # the other's members
    bobs = await store.create_group(bob.id, "finance")
    assert await store.add_group_members(bob.id, "finance", [bob.id]) is not None
    assert (await store.get_group(alice.id, "finance")).members == []
    assert await store.add_group_members(alice.id, "finance", [alice.id]) is not None
    assert (await store.get_group(bob.id, "finance")).members == [bob.id]
    assert bobs.created_at >= finance.created_at

    # names are exact: case and spaces count
    assert await store.get_group(alice.id, "Finance") is None and await store.get_group(alice.id, "finance ") is None
    await store.create_group(alice.id, "Finance")
    names = ["b", "B", "a", "a b", "ab", "_x", "é", "z", "😀", "10", "9"]
    for name in names:
        await store.create_group(alice.id, name)
    assert [g.name for g in await store.list_groups(alice.id)] == sorted([*names, "finance", "Finance"])
    assert [g.name for g in await store.list_groups(bob.id)] == ["finance"]
    assert await store.list_groups(uid("nobody-")) == []
    for hostile in ("%", "_", "*", "' OR '1'='1", ""):
        assert await store.get_group(hostile, "finance") is None
        assert await store.get_group(alice.id, hostile + "fin%") is None
        assert await store.list_groups(hostile) == []
        assert not await store.delete_group(alice.id, hostile + "%")


async def test_group_members_are_added_once_sorted_and_removed(store: Store) -> None:
    owner = await new_user(store)
    await store.create_group(owner.id, "ops")
    group = await store.add_group_members(owner.id, "ops", ["u-3", "u-1", "u-3"])
    assert group.members == ["u-1", "u-3"]
    group = await store.add_group_members(owner.id, "ops", iter(["u-2", "u-1"]))  # any iterable
    assert group.members == ["u-1", "u-2", "u-3"]
    assert (await store.add_group_members(owner.id, "ops", [])).members == ["u-1", "u-2", "u-3"]
    assert await store.get_group(owner.id, "ops") == group
    assert [g.members for g in await store.list_groups(owner.id)] == [["u-1", "u-2", "u-3"]]

    group = await store.remove_group_members(owner.id, "ops", ["u-2", "not-a-member", "u-2"])
    assert group.members == ["u-1", "u-3"]
    assert (await store.remove_group_members(owner.id, "ops", [])).members == ["u-1", "u-3"]
    # no such group: None, and nothing written
    assert await store.add_group_members(owner.id, "nope", ["u-1"]) is None
    assert await store.remove_group_members(owner.id, "nope", ["u-1"]) is None
    assert await store.get_group(owner.id, "nope") is None
    assert await store.add_group_members(uid("other-"), "ops", ["u-9"]) is None
    assert (await store.get_group(owner.id, "ops")).members == ["u-1", "u-3"]


async def test_group_members_must_be_strings_never_one_string(store: Store) -> None:
    owner = await new_user(store)
    await store.create_group(owner.id, "ops")
    await store.add_group_members(owner.id, "ops", ["kept"])
    for wrong in ("alice", b"alice", ["ok", 42], [None]):
        with pytest.raises(TypeError):
            await store.add_group_members(owner.id, "ops", wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.remove_group_members(owner.id, "ops", wrong)  # type: ignore[arg-type]
    assert (await store.get_group(owner.id, "ops")).members == ["kept"]  # nothing changed
    assert await store.groups_of("o") == [] and await store.groups_of("ok") == []


async def test_a_group_deleted_and_created_again_starts_empty(store: Store) -> None:
    owner, member = await new_user(store), await new_user(store)
    await store.create_group(owner.id, "ops")
    await store.add_group_members(owner.id, "ops", [member.id])
    assert await store.delete_group(owner.id, "ops")
    assert not await store.delete_group(owner.id, "ops")
    assert await store.get_group(owner.id, "ops") is None and await store.list_groups(owner.id) == []
    assert await store.groups_of(member.id) == []
    again = await store.create_group(owner.id, "ops")
    assert again.members == [] and await store.groups_of(member.id) == []


async def test_groups_of_lists_every_membership_of_the_user(store: Store) -> None:
    alice, bob, carol = await new_user(store), await new_user(store), await new_user(store)
    for owner, name in [(alice.id, "finance"), (alice.id, "legal"), (bob.id, "finance"), (bob.id, "x")]:
        await store.create_group(owner, name)
    await store.add_group_members(alice.id, "finance", [carol.id, bob.id])
    await store.add_group_members(alice.id, "legal", [carol.id])
    await store.add_group_members(bob.id, "finance", [carol.id])
    assert await store.groups_of(carol.id) == sorted([(alice.id, "finance"), (alice.id, "legal"), (bob.id, "finance")])
    assert await store.groups_of(bob.id) == [(alice.id, "finance")]
    assert await store.groups_of(alice.id) == []  # owning a group is not being a member of it
    await store.remove_group_members(alice.id, "legal", [carol.id])
    assert await store.groups_of(carol.id) == sorted([(alice.id, "finance"), (bob.id, "finance")])
    for hostile in ("%", "_", "' OR '1'='1", ""):
        assert await store.groups_of(hostile) == []


async def test_delete_user_takes_their_memberships_and_the_groups_they_own(store: Store) -> None:
    doomed, friend, member = await new_user(store), await new_user(store), await new_user(store)
    await store.create_group(doomed.id, "mine")
    await store.add_group_members(doomed.id, "mine", [member.id, friend.id])
    await store.create_group(friend.id, "theirs")
    await store.add_group_members(friend.id, "theirs", [doomed.id, member.id])
    assert await store.delete_user(doomed.id)
    assert await store.list_groups(doomed.id) == [] and await store.get_group(doomed.id, "mine") is None
    assert await store.groups_of(doomed.id) == []
    assert (await store.get_group(friend.id, "theirs")).members == [member.id]  # theirs stays, without them
    assert await store.groups_of(member.id) == [(friend.id, "theirs")]
    # an id without a user row loses what hangs on it too; a new group of that name starts empty
    ghost = uid("ghost-")
    await store.create_group(ghost, "g")
    await store.add_group_members(ghost, "g", [member.id])
    assert not await store.delete_user(ghost)
    assert await store.get_group(ghost, "g") is None
    assert (await store.create_group(ghost, "g")).members == []


async def test_concurrent_group_writes_on_one_store(store: Store) -> None:
    owner = await new_user(store)
    results = await asyncio.gather(*(store.create_group(owner.id, "race") for _ in range(10)), return_exceptions=True)
    assert sum(isinstance(r, Group) for r in results) == 1
    assert all(isinstance(r, (Group, StoreConflict)) for r in results)
    await asyncio.gather(*(store.add_group_members(owner.id, "race", [f"u-{i:02}"]) for i in range(20)))
    assert (await store.get_group(owner.id, "race")).members == [f"u-{i:02}" for i in range(20)]
    # additions racing a delete: whatever the order, no member outlives the group
    for round_ in range(5):
        name = f"churn-{round_}"
        await store.create_group(owner.id, name)
        await asyncio.gather(*(store.add_group_members(owner.id, name, [f"m-{i}"]) for i in range(5)),
                             store.delete_group(owner.id, name),
                             *(store.add_group_members(owner.id, name, [f"n-{i}"]) for i in range(5)))
        assert await store.get_group(owner.id, name) is None
        assert (await store.create_group(owner.id, name)).members == []
        assert (await store.get_group(owner.id, name)).members == []


# ---- who may decide a pending request -------------------------------------------------------


async def test_request_approvers_are_replaced_added_and_kept_in_order(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    assert await store.request_approvers(job_id, request_id) == []
    await store.set_request_approvers(job_id, request_id, ["user:u-2", "group:o-1/finance", "user:u-2", "user:u-1"])
    assert await store.request_approvers(job_id, request_id) == ["user:u-2", "group:o-1/finance", "user:u-1"]
    await store.set_request_approvers(job_id, request_id, ["user:u-9", "user:u-2"])  # replaces
    assert await store.request_approvers(job_id, request_id) == ["user:u-9", "user:u-2"]
    # escalation adds: those already there stay once, in their place
    assert await store.add_request_approvers(job_id, request_id, ["group:o-1/legal", "user:u-2", "user:u-0"]) == [
        "user:u-9", "user:u-2", "group:o-1/legal", "user:u-0"]
    assert await store.add_request_approvers(job_id, request_id, []) == [
        "user:u-9", "user:u-2", "group:o-1/legal", "user:u-0"]
    # another request of the job is another list
    assert await store.request_approvers(job_id, "other") == []
    assert await store.add_request_approvers(job_id, "other", ["user:u-5"]) == ["user:u-5"]
    await store.set_request_approvers(job_id, "other", [])
    assert await store.request_approvers(job_id, "other") == []
    assert await store.request_approvers(job_id, request_id) == ["user:u-9", "user:u-2", "group:o-1/legal", "user:u-0"]
    # a group name may hold a slash: the reference splits at its first one
    await store.set_request_approvers(job_id, "slash", ["group:o-1/a/b", "group:o-1/"])
    assert await store.request_approvers(job_id, "slash") == ["group:o-1/a/b", "group:o-1/"]
    # no job needed (the store does not check), and none of another job
    assert await store.add_request_approvers(uid("job-"), request_id, ["user:x"]) == ["user:x"]
    assert await store.request_approvers(uid("job-"), request_id) == []


async def test_malformed_approver_references_are_refused_before_any_change(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    await store.set_request_approvers(job_id, request_id, ["user:kept"])
    for wrong in (["finance"], ["group:finance"], ["group:/finance"], ["user:"], ["User:x"], [""],
                  ["user:ok", "bad"], ["user:ok", "group:"]):
        with pytest.raises(ValueError):
            await store.set_request_approvers(job_id, request_id, wrong)
        with pytest.raises(ValueError):
            await store.add_request_approvers(job_id, request_id, wrong)
    for wrong in ("user:alice", ["user:ok", 7], [None]):
        with pytest.raises(TypeError):
            await store.set_request_approvers(job_id, request_id, wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.add_request_approvers(job_id, request_id, wrong)  # type: ignore[arg-type]
    assert await store.request_approvers(job_id, request_id) == ["user:kept"]


async def _assigned(store: Store, user_id: str, **kwargs) -> list[str]:
    return [j.job_id for j in await store.list_assigned_pending(user_id, **kwargs)]


async def test_assigned_pending_by_user_and_by_group_with_membership_read_now(store: Store) -> None:
    owner, approver, member, stranger = [await new_user(store) for _ in range(4)]
    by_user, by_user_request = await suspended_job(store, user_id=owner.id)
    by_group, by_group_request = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(by_user, by_user_request, [f"user:{approver.id}"])
    await store.create_group(owner.id, "finance")
    await store.set_request_approvers(by_group, by_group_request, [f"group:{owner.id}/finance"])

    assert await _assigned(store, approver.id) == [by_user]
    assert await _assigned(store, member.id) == []
    # a member added later sees it; a removed one no longer does
    await store.add_group_members(owner.id, "finance", [member.id, approver.id])
    assert await _assigned(store, member.id) == [by_group]
    assert set(await _assigned(store, approver.id)) == {by_user, by_group}
    [job] = await store.list_assigned_pending(member.id)
    assert job.status == JobStatus.suspended and job.pending.request_id == by_group_request and job.user_id == owner.id
    await store.remove_group_members(owner.id, "finance", [member.id])
    assert await _assigned(store, member.id) == []
    # the group deleted: nobody; created again: empty until members are added
    await store.add_group_members(owner.id, "finance", [member.id])
    await store.delete_group(owner.id, "finance")
    assert await _assigned(store, member.id) == []
    await store.create_group(owner.id, "finance")
    assert await _assigned(store, member.id) == []
    await store.add_group_members(owner.id, "finance", [member.id])
    assert await _assigned(store, member.id) == [by_group]
    # the owner of the run is not an approver unless named; a stranger sees nothing
    assert await _assigned(store, owner.id) == [] and await _assigned(store, stranger.id) == []
    await store.add_request_approvers(by_group, by_group_request, [f"user:{stranger.id}"])  # escalation
    assert await _assigned(store, stranger.id) == [by_group]
    for hostile in ("%", "_", "' OR '1'='1", "", "*"):
        assert await _assigned(store, hostile) == []


async def test_another_owners_group_of_the_same_name_assigns_nothing(store: Store) -> None:
    alice, mallory, victim_approver = [await new_user(store) for _ in range(3)]
    job_id, request_id = await suspended_job(store, user_id=alice.id)
    await store.create_group(alice.id, "finance")
    await store.add_group_members(alice.id, "finance", [victim_approver.id])
    await store.set_request_approvers(job_id, request_id, [f"group:{alice.id}/finance"])
    # mallory makes a group of the same name (and names that spell alice's reference) and joins it
    for name in ("finance", f"{alice.id}/finance", f"/{alice.id}/finance"):
        await store.create_group(mallory.id, name)
        await store.add_group_members(mallory.id, name, [mallory.id])
    # a group whose owner and name spell the reference otherwise: owner "alice-id/fin", name "ance"
    await store.create_group(f"{alice.id}/fin", "ance")
    await store.add_group_members(f"{alice.id}/fin", "ance", [mallory.id])
    await store.create_group(alice.id[:-1], f"{alice.id[-1]}/finance")
    await store.add_group_members(alice.id[:-1], f"{alice.id[-1]}/finance", [mallory.id])
    assert await _assigned(store, mallory.id) == []
    assert await _assigned(store, victim_approver.id) == [job_id]


async def test_assigned_pending_follows_the_current_request_and_the_status(store: Store) -> None:
    owner, approver = await new_user(store), await new_user(store)
    job_id, request_id = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(job_id, request_id, [f"user:{approver.id}"])
    assert await _assigned(store, approver.id) == [job_id]

    # claimed for a resume: not waiting; rolled back: waiting again
    token = await store.claim_suspended_for_resume(job_id, request_id)
    assert await _assigned(store, approver.id) == []
    assert await store.rollback_resume_claim(job_id, token)
    assert await _assigned(store, approver.id) == [job_id]
    # the run went on and paused at another gate: the old request's rows stay, but list nothing
    await store.claim_suspended_for_resume(job_id, request_id)
    assert await store.mark_suspended(job_id, pending("gate-2"))
    assert await store.request_approvers(job_id, request_id) == [f"user:{approver.id}"]
    assert await _assigned(store, approver.id) == []
    await store.set_request_approvers(job_id, "gate-2", [f"user:{approver.id}"])
    assert await _assigned(store, approver.id) == [job_id]
    # the pending request cleared (a run that is no longer waiting): nothing
    await store.clear_pending(job_id)
    assert await _assigned(store, approver.id) == []


@pytest.mark.parametrize("end", ["cancel", "complete", "fail", "expire"])
async def test_an_ended_job_is_assigned_to_nobody_and_loses_its_references(store: Store, end: str) -> None:
    approver = await new_user(store)
    if end == "expire":  # an inline run's lease ran out (it never paused: rows set by hand)
        job_id = await run_job(store, seconds=-5)
        request_id = "gate"
    else:
        job_id, request_id = await suspended_job(store)
    await store.set_request_approvers(job_id, request_id, [f"user:{approver.id}"])
    await store.set_request_approvers(job_id, "older", [f"user:{approver.id}"])
    if end == "cancel":
        assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    elif end == "complete":
        token = await store.claim_suspended_for_resume(job_id, request_id)
        assert token and await store.set_status(job_id, JobStatus.completed, event=("end", {}))
    elif end == "fail":
        assert await store.set_status(job_id, JobStatus.failed, error={"error": "x"})
    else:
        assert job_id in await store.fail_expired_leases(utcnow(), ERROR)
    assert await _assigned(store, approver.id) == []
    assert await store.request_approvers(job_id, request_id) == []
    assert await store.request_approvers(job_id, "older") == []
    # a status change that is not an end keeps them
    kept, kept_request = await suspended_job(store)
    await store.set_request_approvers(kept, kept_request, [f"user:{approver.id}"])
    token = await store.claim_suspended_for_resume(kept, kept_request)
    assert not await store.set_status(kept, JobStatus.in_progress, expect=[JobStatus.queued])
    await store.rollback_resume_claim(kept, token)
    assert await store.request_approvers(kept, kept_request) == [f"user:{approver.id}"]


async def test_assigned_pending_newest_first_and_by_flow(store: Store) -> None:
    approver = await new_user(store)
    flow_a, flow_b = uid("flow-"), uid("flow-")
    jobs = []
    for flow_id in (flow_a, flow_b, flow_a):
        job_id, request_id = await suspended_job(store, flow_id=flow_id)
        await store.set_request_approvers(job_id, request_id, [f"user:{approver.id}"])
        jobs.append((job_id, request_id))
        await asyncio.sleep(0.002)
    assert await _assigned(store, approver.id) == [jobs[2][0], jobs[1][0], jobs[0][0]]
    assert await _assigned(store, approver.id, flow_id=flow_a) == [jobs[2][0], jobs[0][0]]
    assert await _assigned(store, approver.id, flow_id=flow_b) == [jobs[1][0]]
    assert await _assigned(store, approver.id, flow_id=uid("flow-")) == []
    # a job paused again moves to the top (its updated_at)
    token = await store.claim_suspended_for_resume(*jobs[0])
    await store.rollback_resume_claim(jobs[0][0], token)
    assert await _assigned(store, approver.id) == [jobs[0][0], jobs[2][0], jobs[1][0]]
    # named twice (by user and by a group) is listed once
    owner = await new_user(store)
    await store.create_group(owner.id, "g")
    await store.add_group_members(owner.id, "g", [approver.id])
    await store.add_request_approvers(jobs[1][0], jobs[1][1], [f"group:{owner.id}/g"])
    assert sorted(await _assigned(store, approver.id)) == sorted(j for j, _ in jobs)


# ---- the inbox a page at a time (Store.inbox, inbox_count, inbox_flows) ----------------------


async def _paused(store: Store, user_id: str, at: datetime, **fields) -> tuple[str, str]:
    """A job of ``user_id`` suspended with a request paused at ``at`` (``approvers``, ``kind``...)."""
    job_id = await new_job(store, user_id=user_id, **{k: fields.pop(k) for k in ("flow_id", "session_id") if k in fields})
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    request = pending(request_id, **fields)
    assert await store.mark_suspended(job_id, request.model_copy(update={"paused_at": at}))
    return job_id, request_id


async def _inbox(store: Store, user_id: str, **kwargs) -> list[str]:
    return [j.job_id for j in await store.inbox(user_id, **kwargs)]


async def test_inbox_is_what_waits_for_the_user_newest_first(store: Store) -> None:
    me, other, stranger = [await new_user(store) for _ in range(3)]
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    at = [t0 + timedelta(minutes=i) for i in range(8)]
    mine, _ = await _paused(store, me.id, at[0])
    names_others, names_others_request = await _paused(store, me.id, at[1], approvers=["bob"],
                                                       approver_refs=[f"user:{other.id}"])
    await store.set_request_approvers(names_others, names_others_request, [f"user:{other.id}"])
    names_me, names_me_request = await _paused(store, me.id, at[2], approvers=["me"], approver_refs=[f"user:{me.id}"])
    await store.set_request_approvers(names_me, names_me_request, [f"user:{me.id}"])
    theirs, theirs_request = await _paused(store, other.id, at[3], approvers=["me"])
    await store.set_request_approvers(theirs, theirs_request, [f"user:{me.id}"])
    await store.create_group(stranger.id, "finance")
    await store.add_group_members(stranger.id, "finance", [me.id])
    by_group, by_group_request = await _paused(store, stranger.id, at[4], approvers=["group:finance"])
    await store.set_request_approvers(by_group, by_group_request, [f"group:{stranger.id}/finance"])
    not_mine, _ = await _paused(store, other.id, at[5])  # another's run naming nobody: the owner's
    ended, ended_request = await _paused(store, me.id, at[6])
    assert await store.claim_suspended_for_resume(ended, ended_request)  # no longer waiting

    assert await _inbox(store, me.id) == [by_group, theirs, names_me, mine]
    assert await _inbox(store, other.id) == [not_mine, names_others]
    assert await _inbox(store, stranger.id) == []
    # a page at a time, in the same order
    assert await _inbox(store, me.id, limit=2) == [by_group, theirs]
    assert await _inbox(store, me.id, limit=2, offset=2) == [names_me, mine]
    assert await _inbox(store, me.id, limit=2, offset=4) == []
    assert await _inbox(store, me.id, limit=0) == []
    # oldest first (the inbox's "waiting longest" sort): the same set reversed, paged the same way
    assert await _inbox(store, me.id, oldest=True) == [mine, names_me, theirs, by_group]
    assert await _inbox(store, me.id, oldest=True, limit=2, offset=1) == [names_me, theirs]
    # an escalation that names the user in a request of another: it comes in
    await store.add_request_approvers(not_mine, f"gate:{not_mine}", [f"user:{me.id}"])
    assert await _inbox(store, me.id) == [not_mine, by_group, theirs, names_me, mine]
    # the requests of a requester the user muted are not theirs to see (their own still are)
    await store.mute(me.id, other.id)
    assert await _inbox(store, me.id) == [by_group, names_me, mine]
    await store.mute(me.id, me.id)
    assert me.id in await store.list_mutes(me.id)
    assert await _inbox(store, me.id) == [by_group, names_me, mine]
    jobs = await store.inbox(me.id)
    # the same, as keys and filter columns (no job read)
    entries = await store.inbox_entries(me.id, limit=100)
    assert [(e.job_id, e.request_id, e.paused_at, e.flow_id, e.session_id, e.kind) for e in entries] == \
        [(j.job_id, j.pending.request_id, j.pending.paused_at, j.flow_id, j.session_id, j.pending.kind) for j in jobs]
    assert [e.job_id for e in await store.inbox_entries(me.id, limit=2)] == [j.job_id for j in jobs[:2]]
    assert await store.inbox_entries(stranger.id, limit=100) == []
    assert await store.inbox_count(me.id) == 3 and await store.inbox_count(stranger.id) == 0
    assert await store.inbox_flows(me.id) == sorted({j.flow_id for j in jobs})
    assert await store.inbox_flows(stranger.id) == []
    # a count stops at its cap
    assert [await store.inbox_count(me.id, cap=c) for c in (0, 1, 2, 3, 4)] == [0, 1, 2, 3, 3]
    await store.unmute(me.id, other.id)
    assert await store.inbox_count(me.id, cap=4) == 4  # 3 own and named, 1 of the other's (escalated to me)
    for hostile in ("%", "_", "' OR '1'='1", "", "*"):
        assert await _inbox(store, hostile) == [] and await store.inbox_count(hostile) == 0
        assert await store.inbox_flows(hostile) == []


async def test_inbox_filters_and_counts_by_flow_session_and_kind(store: Store) -> None:
    me = await new_user(store)
    flow_a, flow_b = uid("flow-"), uid("flow-")
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    a1, _ = await _paused(store, me.id, t0, flow_id=flow_a, session_id="s1")
    a2, _ = await _paused(store, me.id, t0 + timedelta(seconds=1), flow_id=flow_a, kind="tool_approval")
    b1, _ = await _paused(store, me.id, t0 + timedelta(seconds=2), flow_id=flow_b, session_id="s1")
    same, _ = await _paused(store, me.id, t0 + timedelta(seconds=2), flow_id=flow_b)  # the same time: by job id
    ties = sorted([b1, same], reverse=True)
    assert await _inbox(store, me.id) == [*ties, a2, a1]
    assert await _inbox(store, me.id, flow_id=flow_a) == [a2, a1]
    assert await _inbox(store, me.id, session_id="s1") == [b1, a1]
    assert await _inbox(store, me.id, session_id="") == sorted([a2, same], key=[*ties, a2].index)
    assert await _inbox(store, me.id, kind="tool_approval") == [a2]
    assert [(e.job_id, e.kind, e.session_id) for e in await store.inbox_entries(me.id, limit=10)] == \
        [(ties[0], "node_input", "s1" if ties[0] == b1 else None), (ties[1], "node_input", "s1" if ties[1] == b1 else None),
         (a2, "tool_approval", None), (a1, "node_input", "s1")]
    assert await _inbox(store, me.id, kind="node_input", flow_id=flow_b, session_id="s1") == [b1]
    assert await _inbox(store, me.id, flow_id=uid("flow-")) == []
    assert await store.inbox_count(me.id) == 4 and await store.inbox_count(me.id, flow_id=flow_a) == 2
    assert await store.inbox_count(me.id, session_id="s1") == 2
    assert await store.inbox_count(me.id, session_id="s1", flow_id=flow_b) == 1
    assert await store.inbox_count(me.id, kind="tool_approval") == 1
    assert await store.inbox_count(me.id, kind="tool_approval", session_id="s1") == 0
    assert await store.inbox_flows(me.id) == sorted([flow_a, flow_b])
    # the flows of requests assigned by others count too, each once
    other = await new_user(store)
    theirs, theirs_request = await _paused(store, other.id, t0, flow_id=flow_b, approvers=["me"])
    await store.set_request_approvers(theirs, theirs_request, [f"user:{me.id}"])
    elsewhere, elsewhere_request = await _paused(store, other.id, t0, approvers=["me"])
    await store.set_request_approvers(elsewhere, elsewhere_request, [f"user:{me.id}"])
    assert await store.inbox_flows(me.id) == sorted([flow_a, flow_b, (await store.get_job(elsewhere)).flow_id])
    assert await store.inbox_count(me.id, flow_id=flow_b) == 3
    for job_id in (theirs, elsewhere):
        assert await store.claim_suspended_for_cancel(job_id)
    # paused again at a later gate: it sorts by its new pause
    token = await store.claim_suspended_for_resume(a1, f"gate:{a1}")
    assert token
    assert await store.mark_suspended(a1, pending("gate-2", paused_at=t0 + timedelta(hours=1)))
    assert (await _inbox(store, me.id))[0] == a1
    # a decision under way, then rolled back: where it was
    token = await store.claim_suspended_for_resume(a2, f"gate:{a2}")
    assert await _inbox(store, me.id) == [a1, *ties]
    assert await store.rollback_resume_claim(a2, token)
    assert await _inbox(store, me.id) == [a1, *ties, a2]


async def test_inbox_reads_a_page_longer_than_one_statement_whole_and_in_order(store: Store) -> None:
    """A page of 600 (the JSON API's pending list takes them all): every row once, newest first
    (the SQL stores read a page's rows by id in bounded statements)."""
    me = await new_user(store)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        async with sem:
            return (await _paused(store, me.id, t0 + timedelta(seconds=i)))[0]

    jobs = await asyncio.gather(*(one(i) for i in range(600)))
    assert await _inbox(store, me.id, limit=5000) == list(reversed(jobs))
    assert await _inbox(store, me.id, limit=520, offset=40) == list(reversed(jobs))[40:560]


# ---- a vote written only while the request waits ---------------------------------------------


async def test_append_event_if_waiting_writes_only_while_the_request_waits(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    vote = {"request_id": request_id, "user": "u-1", "action_id": "approve"}
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", vote, dedupe_key="v:u-1") == 1
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", vote, dedupe_key=None) == 2
    # another request id, no such job: None, nothing written
    assert await store.append_event_if_waiting(job_id, "stale", "human_input_vote", vote, dedupe_key="v:u-2") is None
    assert await store.append_event_if_waiting(job_id, "stale", "human_input_vote", vote, dedupe_key=None) is None
    assert await store.append_event_if_waiting(uid("job-"), request_id, "human_input_vote", vote, dedupe_key=None) is None
    # the decision claimed: no vote any more
    token = await store.claim_suspended_for_resume(job_id, request_id)
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", vote, dedupe_key="v:u-3") is None
    # rolled back: waiting again
    await store.rollback_resume_claim(job_id, token)
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", vote, dedupe_key="v:u-3") == 3
    # the run paused at a new request: a vote for the old one is refused, the new one is taken
    await store.claim_suspended_for_resume(job_id, request_id)
    await store.mark_suspended(job_id, pending("gate-2"))
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", vote, dedupe_key="v:u-4") is None
    assert await store.append_event_if_waiting(job_id, "gate-2", "human_input_vote", vote, dedupe_key="v:u-4") == 4
    # stopped: nothing, and the log stays gap-free
    assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    assert await store.append_event_if_waiting(job_id, "gate-2", "human_input_vote", vote, dedupe_key="v:u-5") is None
    assert await store.append_event(job_id, "late", {}) == 6
    assert [(e.seq, e.event) for e in await store.read_events(job_id)] == [
        (1, "human_input_vote"), (2, "human_input_vote"), (3, "human_input_vote"), (4, "human_input_vote"),
        (5, "run_cancelled"), (6, "late")]
    assert (await store.read_events(job_id))[0].data == vote
    # a job that is not suspended at all (queued, running): nothing
    running = await new_job(store)
    assert await store.append_event_if_waiting(running, "gate", "human_input_vote", vote, dedupe_key=None) is None
    await store.set_status(running, JobStatus.in_progress)
    assert await store.append_event_if_waiting(running, "gate", "human_input_vote", vote, dedupe_key=None) is None
    assert await store.read_events(running) == []


async def test_append_event_if_waiting_with_a_used_dedupe_key_writes_once(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    assert await store.append_event(job_id, "human_input_required", {}) == 1
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"n": 1}, dedupe_key="v:a") == 2
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"n": 2}, dedupe_key="v:a") == 2
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"n": 3}, dedupe_key="v:b") == 3
    # a retry after the decision was claimed learns its vote was recorded (and writes nothing)
    assert await store.claim_suspended_for_resume(job_id, request_id)
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"n": 4}, dedupe_key="v:a") == 2
    assert await store.append_event_if_waiting(job_id, "other", "human_input_vote", {"n": 4}, dedupe_key="v:b") == 3
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {}, dedupe_key="v:c") is None
    # the key space is the job's event log: a key written by append_event counts too
    assert await store.append_event(job_id, "progress", {}) == 4
    assert [(e.seq, e.data) for e in await store.read_events(job_id)] == [(1, {}), (2, {"n": 1}), (3, {"n": 3}), (4, {})]
    # bad values are refused, and change nothing
    other, other_request = await suspended_job(store)
    with pytest.raises(StoreError):
        await store.append_event_if_waiting(other, other_request, "v", {"x": float("nan")}, dedupe_key=None)
    with pytest.raises(StoreError):  # an event needs a name
        await store.append_event_if_waiting(other, other_request, None, {}, dedupe_key=None)  # type: ignore[arg-type]
    assert await store.read_events(other) == [] and (await store.get_job(other)).status == JobStatus.suspended
    assert await store.append_event_if_waiting(other, other_request, "v", {}, dedupe_key=None) == 1


async def test_concurrent_votes_with_one_key_on_one_store_write_one_event(store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    results = await asyncio.gather(
        *(store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"i": i}, dedupe_key="v:same")
          for i in range(10)),
        *(store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"i": i}, dedupe_key=f"v:{i}")
          for i in range(10)))
    assert len(set(results[:10])) == 1 and None not in results
    events = await store.read_events(job_id)
    assert [e.seq for e in events] == list(range(1, 12))


async def test_concurrent_votes_and_a_stop_on_one_store_never_vote_after_it(store: Store) -> None:
    for _ in range(10):
        job_id, request_id = await suspended_job(store)
        votes = [store.append_event_if_waiting(job_id, request_id, "human_input_vote", {"i": i}, dedupe_key=f"v:{i}")
                 for i in range(8)]
        stop = store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
        results = await asyncio.gather(*votes[:4], stop, *votes[4:])  # the stop in the middle
        assert results.pop(4) is True
        events = await store.read_events(job_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        recorded = [s for s in results if s is not None]
        cancel_seq = next(e.seq for e in events if e.event == "run_cancelled")
        assert all(s < cancel_seq for s in recorded)  # every vote that counts came before the stop
        assert len(events) == len(recorded) + 1


# ---- webhooks -------------------------------------------------------------------------------


async def test_webhooks_are_created_listed_and_deleted_by_their_owner(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    first = await store.create_webhook(alice.id, "https://example.com/hook", ["human_input_required"], b"sealed-1")
    assert isinstance(first, Webhook) and utc(first.created_at) and first.id
    assert (first.owner_id, first.url, first.events) == (alice.id, "https://example.com/hook", ["human_input_required"])
    await asyncio.sleep(0.002)
    second = await store.create_webhook(alice.id, "https://example.com/all", ["*", "human_input_vote", "*"], b"")
    assert second.events == ["*", "human_input_vote"] and second.id != first.id
    assert await store.list_webhooks(alice.id) == [first, second]
    assert await store.list_webhooks(bob.id) == []
    for hook in await store.list_webhooks(alice.id):
        assert type(hook) is Webhook and "secret_ciphertext" not in hook.model_dump()

    record = await store.get_webhook(first.id)
    assert isinstance(record, WebhookRecord) and record.secret_ciphertext == b"sealed-1"
    assert (record.id, record.owner_id, record.url, record.events, record.created_at) == (
        first.id, alice.id, first.url, first.events, first.created_at)
    assert "sealed-1" not in repr(record) and "sealed-1" not in str(record)
    assert await store.get_webhook(uid()) is None

    assert not await store.delete_webhook(bob.id, first.id)  # only the owner's
    assert await store.get_webhook(first.id) is not None
    assert await store.delete_webhook(alice.id, first.id)
    assert not await store.delete_webhook(alice.id, first.id)
    assert await store.get_webhook(first.id) is None and await store.list_webhooks(alice.id) == [second]
    for hostile in ("%", "_", "' OR '1'='1", ""):
        assert await store.list_webhooks(hostile) == [] and await store.get_webhook(hostile) is None
        assert not await store.delete_webhook(hostile, second.id) and not await store.delete_webhook(alice.id, hostile)


async def test_webhook_secret_is_kept_as_opaque_bytes_and_events_as_a_list(store: Store) -> None:
    owner = await new_user(store)
    for value in (bytes(range(256)) * 16, b"", b"\x00", b"\xff\xfe\xc3\x28", bytearray(b"ba"), memoryview(b"mv")):
        hook = await store.create_webhook(owner.id, "https://x", ["*"], value)
        record = await store.get_webhook(hook.id)
        assert type(record.secret_ciphertext) is bytes and record.secret_ciphertext == bytes(value)
    count = len(await store.list_webhooks(owner.id))
    for wrong in ("plain text", None, 42):
        with pytest.raises(TypeError):
            await store.create_webhook(owner.id, "https://x", ["*"], wrong)  # type: ignore[arg-type]
    for wrong in ("human_input_required", ["ok", 1]):
        with pytest.raises(TypeError):
            await store.create_webhook(owner.id, "https://x", wrong, b"s")  # type: ignore[arg-type]
    assert len(await store.list_webhooks(owner.id)) == count  # nothing written
    empty = await store.create_webhook(owner.id, "https://x", [], b"s")
    assert empty.events == [] and await store.webhooks_for([owner.id], "anything") != []  # the "*" ones


async def test_webhooks_for_owners_and_an_event(store: Store) -> None:
    alice, bob, carol = [await new_user(store) for _ in range(3)]
    required = await store.create_webhook(alice.id, "https://a/1", ["human_input_required"], b"1")
    await asyncio.sleep(0.002)
    every = await store.create_webhook(alice.id, "https://a/2", ["*"], b"2")
    await asyncio.sleep(0.002)
    bobs = await store.create_webhook(bob.id, "https://b/1", ["human_input_decision", "human_input_required"], b"3")
    await store.create_webhook(carol.id, "https://c/1", ["*"], b"4")

    def ids(records: list[WebhookRecord]) -> list[str]:
        assert all(type(r) is WebhookRecord for r in records)
        return [r.id for r in records]

    assert ids(await store.webhooks_for([alice.id, bob.id], "human_input_required")) == [required.id, every.id, bobs.id]
    assert ids(await store.webhooks_for([bob.id, alice.id, bob.id], "human_input_decision")) == [every.id, bobs.id]
    assert ids(await store.webhooks_for([alice.id], "human_input_vote")) == [every.id]
    assert ids(await store.webhooks_for([bob.id], "human_input_vote")) == []
    assert ids(await store.webhooks_for([], "human_input_required")) == []
    assert (await store.webhooks_for([alice.id], "human_input_required"))[0].secret_ciphertext == b"1"
    # names are exact: no pattern, no prefix, no case folding
    for event in ("human_input_%", "human_input", "HUMAN_INPUT_REQUIRED", "", "human_input_required "):
        assert ids(await store.webhooks_for([bob.id], event)) == []
    for owner in ("%", "_", "' OR '1'='1", ""):
        assert await store.webhooks_for([owner], "human_input_required") == []
    with pytest.raises(TypeError):
        await store.webhooks_for(alice.id, "human_input_required")  # type: ignore[arg-type]


async def test_webhook_deliveries_newest_first_and_deleted_with_their_webhook(store: Store) -> None:
    owner = await new_user(store)
    hook = await store.create_webhook(owner.id, "https://x", ["*"], b"s")
    other = await store.create_webhook(owner.id, "https://y", ["*"], b"s")
    job_id = uid("job-")
    logged = []
    for attempt in range(1, 4):
        logged.append(await store.log_delivery(
            hook.id, event="human_input_required", job_id=job_id, seq=7, attempt=attempt,
            status_code=500 if attempt < 3 else 200, error="HTTP 500" if attempt < 3 else None, delivered=attempt == 3))
    failed = await store.log_delivery(other.id, event="human_input_vote", job_id=job_id, seq=8, attempt=1,
                                      status_code=None, error="connection refused", delivered=False)
    first = logged[0]
    assert isinstance(first, WebhookDelivery) and utc(first.at) and first.id
    assert (first.webhook_id, first.event, first.job_id, first.seq, first.attempt, first.status_code, first.error,
            first.delivered) == (hook.id, "human_input_required", job_id, 7, 1, 500, "HTTP 500", False)
    assert logged[2].delivered is True and logged[2].error is None and logged[2].status_code == 200
    assert failed.status_code is None and failed.error == "connection refused"
    assert await store.list_deliveries(hook.id) == logged[::-1]
    assert await store.list_deliveries(hook.id, limit=2) == logged[::-1][:2]
    assert await store.list_deliveries(other.id) == [failed]
    assert await store.list_deliveries(uid()) == []

    assert await store.delete_webhook(owner.id, hook.id)
    assert await store.list_deliveries(hook.id) == []
    assert await store.list_deliveries(other.id) == [failed]


async def test_log_deliveries_logs_several_in_one_call_in_their_order(store: Store) -> None:
    owner = await new_user(store)
    hook = await store.create_webhook(owner.id, "https://x", ["*"], b"s")
    other = await store.create_webhook(owner.id, "https://y", ["*"], b"s")
    job_id = uid("job-")
    attempts = [DeliveryAttempt(webhook_id=h.id, event="human_input_required", job_id=job_id, seq=3, attempt=1,
                                status_code=code, error=None if code == 200 else f"HTTP {code}", delivered=code == 200)
                for h, code in ((hook, 200), (other, 503), (hook, 502))]
    logged = await store.log_deliveries(attempts)
    assert [(d.webhook_id, d.status_code, d.error, d.delivered, d.seq, d.job_id) for d in logged] == [
        (hook.id, 200, None, True, 3, job_id), (other.id, 503, "HTTP 503", False, 3, job_id),
        (hook.id, 502, "HTTP 502", False, 3, job_id)]
    assert len({d.id for d in logged}) == 3 and all(utc(d.at) for d in logged)
    assert await store.list_deliveries(hook.id) == [logged[2], logged[0]]  # newest first: the later one
    assert await store.list_deliveries(other.id) == [logged[1]]
    assert await store.log_deliveries([]) == []
    # which webhooks took an event: a delivered attempt of that event, not of another, not a failed one
    assert await store.delivered_webhooks(job_id, 3) == {hook.id}
    assert await store.delivered_webhooks(job_id, 4) == set()
    assert await store.delivered_webhooks(uid("job-"), 3) == set()
    one = await store.log_delivery(other.id, event="e", job_id=job_id, seq=4, attempt=2, status_code=200, error=None,
                                   delivered=True)
    assert await store.list_deliveries(other.id) == [one, logged[1]]
    assert await store.delivered_webhooks(job_id, 4) == {other.id}
    assert await store.delivered_webhooks(job_id, 3) == {hook.id}


async def test_delete_user_takes_their_webhooks_and_deliveries(store: Store) -> None:
    doomed, friend = await new_user(store), await new_user(store)
    hook = await store.create_webhook(doomed.id, "https://x", ["*"], b"s")
    kept = await store.create_webhook(friend.id, "https://y", ["*"], b"t")
    for h in (hook, kept):
        await store.log_delivery(h.id, event="e", job_id="j", seq=1, attempt=1, status_code=200, error=None,
                                 delivered=True)
    assert await store.delete_user(doomed.id)
    assert await store.list_webhooks(doomed.id) == [] and await store.get_webhook(hook.id) is None
    assert await store.list_deliveries(hook.id) == []
    assert await store.webhooks_for([doomed.id, friend.id], "e") == [await store.get_webhook(kept.id)]
    assert len(await store.list_deliveries(kept.id)) == 1


async def test_hostile_strings_round_trip_in_groups_approvers_votes_and_webhooks(store: Store) -> None:
    for text in [*HOSTILE, BIG[:10_000]]:
        owner, member = await new_user(store), await new_user(store)
        name = text[:200]
        group = await store.create_group(owner.id, name)
        assert group.name == name
        assert (await store.add_group_members(owner.id, name, [member.id, text[:100] + "-id"])).members == sorted(
            [member.id, text[:100] + "-id"])
        assert await store.get_group(owner.id, name) == (await store.list_groups(owner.id))[0]
        assert await store.groups_of(member.id) == [(owner.id, name)]

        job_id = await new_job(store, owner.id, job_id=f"{text[:50]}{uuid.uuid4()}")
        await store.set_status(job_id, JobStatus.in_progress)
        request_id = f"{text[:100]}:{job_id}"
        await store.mark_suspended(job_id, pending(request_id, prompt=text))
        refs = [f"group:{owner.id}/{name}", f"user:{text[:100]}-id", f"user:{text[:100]}-id"]
        await store.set_request_approvers(job_id, request_id, refs)
        assert await store.request_approvers(job_id, request_id) == refs[:2]
        assert [j.job_id for j in await store.list_assigned_pending(member.id)] == [job_id]
        assert [j.job_id for j in await store.list_assigned_pending(text[:100] + "-id")] == [job_id]
        assert await store.list_assigned_pending(member.id, flow_id=text) == []

        vote = {"user": text, "values": {text[:100] or "k": text}}
        assert await store.append_event_if_waiting(job_id, request_id, text or "v", vote, dedupe_key=text) == 1
        assert await store.append_event_if_waiting(job_id, request_id, text or "v", vote, dedupe_key=text) == 1
        assert await store.append_event_if_waiting(job_id, text, "v", vote, dedupe_key=None) is None
        [event] = await store.read_events(job_id)
        assert event.event == (text or "v") and event.data == vote

        hook = await store.create_webhook(owner.id, text, [text, "*"], text.encode())
        assert hook.url == text and hook.events == ([text, "*"] if text != "*" else ["*"])
        record = await store.get_webhook(hook.id)
        assert record.secret_ciphertext == text.encode() and record.url == text
        assert [h.id for h in await store.webhooks_for([owner.id], text)] == [hook.id]
        delivery = await store.log_delivery(hook.id, event=text, job_id=job_id, seq=1, attempt=1, status_code=None,
                                            error=text, delivered=False)
        assert await store.list_deliveries(hook.id) == [delivery] and delivery.error == text

        assert await store.delete_group(owner.id, name)
        assert await store.list_assigned_pending(member.id) == []
        assert await store.delete_user(owner.id)
        assert await store.get_webhook(hook.id) is None


# ---- values that must come back byte for byte -----------------------------------------------


HOSTILE = [
    "'; DROP TABLE jobs; --",
    'Robert"); DROP TABLE students;--',
    "' OR '1'='1",
    "?", "??", "%s", "%(name)s", "%%", "$1", ":name", "\\", "\\'", "\\x00",
    "😀 ünïcødé ﷽ 𝕏 中文 עברית \u202eevil\u202c",
    "\r\n\t\x0b\x0c\x1f\x7f",
    "'" * 1000,
    "a\u2028b\u2029c",
    "",
]


BIG = ("0123456789abcdef'\"%?\\😀" * 50_000)[: 1024 * 1024]  # 1 MiB of characters, no NUL


async def test_hostile_strings_round_trip(store: Store) -> None:
    for i, text in enumerate([*HOSTILE, BIG]):
        name = f"{text[:200]}-{uuid.uuid4()}"
        user = await store.create_user(name)
        assert (await store.get_user_by_name(name)) == user
        assert (await store.user_for_api_key(await store.create_api_key(user.id, f"{text[:100]}{uuid.uuid4()}"))) == user

        spec = {"name": text, text[:100] or "k": [text], "nodes": [{"id": text[:50], "params": {"t": text}}]}
        flow = await store.save_flow(user.id, text, spec)
        got = await store.get_flow(flow.id)
        assert got.name == text and got.spec == spec

        session = text[:100] + str(uuid.uuid4())
        job = NewJob(job_id=f"{text[:50]}{uuid.uuid4()}", flow_id=flow.id, flow_version=1, user_id=user.id,
                     session_id=session, request={"input_value": text}, idempotency_key=text[:100] + str(i))
        created, _ = await store.create_job(job)
        assert created.request == {"input_value": text} and created.session_id == session
        again, was_new = await store.create_job(job.model_copy(update={"job_id": str(uuid.uuid4())}))
        assert not was_new and again.job_id == job.job_id

        await store.set_status(job.job_id, JobStatus.in_progress)
        request_id = f"{text[:100]}:{job.job_id}"
        await store.mark_suspended(job.job_id, pending(request_id, prompt=text))
        assert [j.job_id for j in await store.find_suspended(flow.id, user.id, session)] == [job.job_id]
        got_job = await store.get_job(job.job_id)
        assert got_job.pending.prompt == text and got_job.pending.request_id == request_id
        assert await store.claim_suspended_for_resume(job.job_id, request_id)

        assert await store.append_event(job.job_id, text or "e", {"text": text}) == 1
        event = (await store.read_events(job.job_id))[0]
        assert event.event == (text or "e") and event.data == {"text": text}

        await store.save_checkpoint(job.job_id, {"text": text, text[:100] or "k": text})
        assert (await store.load_latest_checkpoint(job.job_id)).data == {"text": text, text[:100] or "k": text}

        card = {"prompt": text, "options": [{"action_id": text[:50], "label": text}], "request_id": request_id}
        message = Message(id=str(uuid.uuid4()), session_id=session, job_id=job.job_id, sender="Machine",
                          sender_name=text[:100], text=text, kind="card", card=card, created_at=utcnow())
        await store.add_message(message)
        assert await store.stamp_card(request_id, text) == 1
        [stored] = await store.list_messages(session)
        assert stored.text == text and stored.card == {**card, "submitted_action": text}

        span = SpanRecord(trace_id=job.job_id, span_id=text[:100] or "s", name=text, start_time=utcnow(),
                          end_time=utcnow() + timedelta(seconds=1), inputs={"t": text}, outputs={"t": text},
                          attributes={text[:100] or "k": text}, flow_id=flow.id)
        await store.save_spans([span])
        assert await store.get_trace(job.job_id) == [span]

        key = f"{text[:100]}/{uuid.uuid4()}"
        await store.put_blob(key, text.encode())
        assert await store.get_blob(key) == text.encode()
        assert await store.delete_blobs(key) == 1

        assert [j.job_id for j in await store.list_active_jobs(flow.id)] == [job.job_id]
        assert [j.job_id for j in await store.list_user_active_jobs(user.id)] == [job.job_id]
        assert [t["trace_id"] for t in await store.list_traces(user_id=user.id)] == [job.job_id]

        secret = (await store.put_secret(user.id, text[:100], text.encode())).model_copy()
        assert await store.get_secret(user.id, text[:100]) == secret and secret.ciphertext == text.encode()
        assert [s.name for s in await store.list_secrets(user.id)] == [text[:100]]
        assert await store.delete_user(user.id)
        assert await store.get_secret(user.id, text[:100]) is None and await store.get_user_by_name(name) is None


async def test_nul_inside_json_documents_round_trips(store: Store) -> None:
    job_id = await new_job(store)
    await store.append_event(job_id, "progress", {"text": "a\x00b"})
    assert (await store.read_events(job_id))[0].data == {"text": "a\x00b"}


# ---- the store's tail -----------------------------------------------------------------------


class Tail:
    """A running ``tail_events`` of ``store``, collecting the notes of ``jobs`` (other tests
    share a PostgreSQL database and write events of their own)."""

    def __init__(self, store: Store, jobs: set[str]) -> None:
        self.store, self.jobs = store, jobs
        self.notes: list[tuple[str, int, str]] = []
        self.missed = 0
        self.ready = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "Tail":
        async def run() -> None:
            async for batch in self.store.tail_events():
                if batch is None:
                    self.missed += 1
                    continue
                self.ready.set()
                self.notes += [(n.job_id, n.seq, n.event) for n in batch if n.job_id in self.jobs]

        self.task = asyncio.create_task(run())
        await asyncio.wait_for(self.ready.wait(), 30)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def until(self, count: int) -> list[tuple[str, int, str]]:
        async def enough() -> None:
            while len(self.notes) < count:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(enough(), 30)
        return self.notes


async def test_the_tail_tells_each_committed_append_once_in_order_and_nothing_from_before(store: Store) -> None:
    old = await new_job(store)
    await store.append_event(old, "before", {})  # before the tail: not told
    job_id, other = await new_job(store), await new_job(store)
    async with Tail(store, {old, job_id, other}) as tail:
        await store.append_event(job_id, "a", {}, dedupe_key="k")
        await store.append_event(job_id, "a again", {}, dedupe_key="k")  # a duplicate writes nothing: not told
        assert await store.set_status(job_id, JobStatus.in_progress, event=("started", {}))
        assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"), event=("human_input_required", {}))
        assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
        await asyncio.gather(*(store.append_event(other, "n", {"i": i}) for i in range(20)))
        notes = await tail.until(24)
        await asyncio.sleep(0.2)  # nothing more comes
        assert notes == tail.notes
    assert [n for n in notes if n[0] == job_id] == [
        (job_id, 1, "a"), (job_id, 2, "started"), (job_id, 3, "human_input_required"), (job_id, 4, "run_cancelled")]
    assert [n[1] for n in notes if n[0] == other] == list(range(1, 21))
    assert all(n[0] != old for n in notes) and tail.missed == 0


async def test_a_failed_append_tells_nothing_and_two_tails_hear_the_same(store: Store) -> None:
    job_id = await new_job(store)
    async with Tail(store, {job_id}) as one, Tail(store, {job_id}) as two:
        with pytest.raises(StoreError):  # the event insert fails inside the claim: rolled back
            await store.set_status(job_id, JobStatus.in_progress, event=(None, {}))  # type: ignore[arg-type]
        await store.append_event(job_id, "x", {})
        assert await one.until(1) == await two.until(1) == [(job_id, 1, "x")]


async def test_a_tail_of_a_closed_store_raises(store: Store) -> None:
    await new_job(store)
    tail = store.tail_events()
    assert await tail.__anext__() == []
    await store.close()
    with pytest.raises(StoreError):
        await asyncio.wait_for(tail.__anext__(), 40)
    await tail.aclose()


# ---- who took part in a run -----------------------------------------------------------------


async def test_participants_are_kept_after_the_run_ends_listed_newest_first_and_go_with_the_user(store: Store) -> None:
    carol, dave = await new_user(store), await new_user(store)
    older = await new_job(store)
    newer = await new_job(store)
    await store.add_participants(older, [carol.id, dave.id, carol.id])
    await store.add_participants(newer, [carol.id])
    await store.add_participants(newer, [carol.id])  # again: once
    await store.add_participants(uid("job-"), [carol.id])  # a job that is not there is not listed
    assert await store.set_status(newer, JobStatus.completed)  # ended: still a run carol took part in
    assert [j.job_id for j in await store.participated_jobs(carol.id)] == [newer, older]
    assert [j.job_id for j in await store.participated_jobs(carol.id, limit=1)] == [newer]
    assert [j.job_id for j in await store.participated_jobs(dave.id)] == [older]
    assert await store.took_part(older, dave.id) and not await store.took_part(newer, dave.id)
    with pytest.raises(TypeError):
        await store.add_participants(older, carol.id)  # type: ignore[arg-type]
    await store.add_participants(older, [])
    assert await store.delete_user(carol.id)
    assert await store.participated_jobs(carol.id) == [] and not await store.took_part(older, carol.id)
    assert await store.took_part(older, dave.id)


async def test_count_jobs_by_status(store: Store) -> None:
    before = await store.count_jobs()
    a, b = await new_job(store), await new_job(store)
    await suspended_job(store)
    assert await store.set_status(a, JobStatus.in_progress)
    assert await store.set_status(b, JobStatus.completed)
    after = await store.count_jobs()
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert {k: v for k, v in grown.items() if v} == {"in_progress": 1, "completed": 1, "suspended": 1}
    assert all(isinstance(v, int) and v > 0 for v in after.values())


async def test_workflow_releases_are_an_outbox_oldest_first(store: Store) -> None:
    a, b = uid("job-"), uid("job-")
    await store.want_release(a)
    await store.want_release(b)
    await store.want_release(a)  # again: once, still the oldest
    later = utcnow() + timedelta(seconds=1)
    due = [j for j in await store.releases_due(later, limit=10_000) if j in (a, b)]
    assert due == [a, b]
    assert a not in await store.releases_due(utcnow() - timedelta(hours=1))  # not due before it was wanted
    await store.released(a)
    await store.released(a)  # harmless
    assert [j for j in await store.releases_due(later, limit=10_000) if j in (a, b)] == [b]
    await store.released(b)


# ---- fan-out budgets: a webhook limit, mutes, requests waiting on others ----------------------


async def test_create_webhook_with_a_limit_stops_at_it_for_that_owner_only(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    made = [await store.create_webhook(alice.id, f"https://a/{i}", ["*"], b"s", limit=3) for i in range(3)]
    assert all(isinstance(h, Webhook) for h in made)
    assert await store.create_webhook(alice.id, "https://a/4", ["*"], b"s", limit=3) is None
    assert [h.id for h in await store.list_webhooks(alice.id)] == [h.id for h in made]  # nothing written
    assert isinstance(await store.create_webhook(bob.id, "https://b/1", ["*"], b"s", limit=3), Webhook)
    assert isinstance(await store.create_webhook(alice.id, "https://a/4", ["*"], b"s"), Webhook)  # no limit
    assert await store.delete_webhook(alice.id, made[0].id) and await store.delete_webhook(alice.id, made[1].id)
    assert isinstance(await store.create_webhook(alice.id, "https://a/5", ["*"], b"s", limit=4), Webhook)


async def test_concurrent_webhook_creations_never_pass_the_limit(store: Store) -> None:
    owner = await new_user(store)
    made = await asyncio.gather(*[store.create_webhook(owner.id, f"https://x/{i}", ["*"], b"s", limit=5)
                                  for i in range(12)])
    assert sum(1 for h in made if h is not None) == 5
    assert len(await store.list_webhooks(owner.id)) == 5


async def test_mutes_are_kept_per_person_listed_and_forgotten(store: Store) -> None:
    alice, bob, carol, dave = [await new_user(store) for _ in range(4)]
    assert await store.list_mutes(alice.id) == []
    assert await store.mute(alice.id, bob.id)
    await asyncio.sleep(0.002)
    assert await store.mute(alice.id, carol.id)
    assert not await store.mute(alice.id, bob.id)  # once
    assert await store.mute(dave.id, bob.id)
    assert await store.list_mutes(alice.id) == [bob.id, carol.id]
    assert await store.list_mutes(bob.id) == []  # a mute goes one way
    assert await store.muted_by(bob.id, [alice.id, carol.id, dave.id, bob.id]) == {alice.id, dave.id}
    assert await store.muted_by(carol.id, [dave.id, bob.id]) == set()
    assert await store.muted_by(bob.id, []) == set()
    with pytest.raises(TypeError):
        await store.muted_by(bob.id, alice.id)  # type: ignore[arg-type]
    assert await store.unmute(alice.id, bob.id)
    assert not await store.unmute(alice.id, bob.id)
    assert await store.list_mutes(alice.id) == [carol.id]
    assert await store.muted_by(bob.id, [alice.id, dave.id]) == {dave.id}


async def test_delete_user_takes_the_mutes_by_and_of_the_user(store: Store) -> None:
    doomed, friend, other = [await new_user(store) for _ in range(3)]
    await store.mute(doomed.id, friend.id)
    await store.mute(friend.id, doomed.id)
    await store.mute(friend.id, other.id)
    await store.delete_user(doomed.id)
    assert await store.list_mutes(doomed.id) == []
    assert await store.list_mutes(friend.id) == [other.id]


async def test_waiting_on_others_counts_suspended_requests_naming_someone_else(store: Store) -> None:
    owner, other = await new_user(store), await new_user(store)
    self_only, r1 = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(self_only, r1, [f"user:{owner.id}"])
    nobody_named, _ = await suspended_job(store, user_id=owner.id)
    person, r3 = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(person, r3, [f"user:{owner.id}", f"user:{other.id}"])
    group, r4 = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(group, r4, [f"group:{owner.id}/team"])
    old_request, _ = await suspended_job(store, user_id=owner.id)
    await store.set_request_approvers(old_request, "an earlier request", [f"user:{other.id}"])
    theirs, r6 = await suspended_job(store, user_id=other.id)
    await store.set_request_approvers(theirs, r6, [f"user:{owner.id}"])
    assert sorted(await store.waiting_on_others(owner.id, limit=10)) == sorted([person, group])
    assert len(await store.waiting_on_others(owner.id, limit=1)) == 1
    assert await store.waiting_on_others(other.id, limit=10) == [theirs]
    assert await store.set_status(person, JobStatus.completed, expect=[JobStatus.suspended])
    assert await store.waiting_on_others(owner.id, limit=10) == [group]


# ---- stored bytes per user (docs/security.md, "Budgets per user") -------------------------


def octets_of(value) -> int:
    """A JSON document's stored size: its text (as the store encodes it) in UTF-8 bytes."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


async def test_stored_bytes_count_what_a_users_flows_and_runs_store(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    assert await store.stored_bytes(alice.id) == 0
    spec = {"name": "Remboursement — été", "nodes": [{"id": "a", "text": "€" * 100}]}  # bytes, not characters
    flow = await store.save_flow(alice.id, "refund", spec)
    expected = octets_of(spec)
    assert await store.stored_bytes(alice.id) == expected
    await store.save_flow(bob.id, "refund", {**spec, "v": 2}, flow_id=flow.id)  # a new version: the owner's
    expected += octets_of({**spec, "v": 2})
    assert await store.stored_bytes(alice.id) == expected

    request = {"input_value": "ünïcode" * 10, "tweaks": {}}
    job_id = await new_job(store, alice.id, request=request)
    expected += octets_of(request)
    data = {"output": "x" * 1000, "who": "Zoë"}
    await store.append_event(job_id, "vertex_end", data)
    await store.append_event(job_id, "vertex_end", data, dedupe_key="k")
    await store.append_event(job_id, "vertex_end", data, dedupe_key="k")  # written once: counted once
    expected += 2 * octets_of(data)
    assert await store.stored_bytes(alice.id) == expected

    card = {"prompt": "Approve?", "options": [{"action_id": "approve", "label": "Approve"}], "request_id": "r"}
    message = Message(id=uid(), session_id=uid(), job_id=job_id, sender="Machine", sender_name="gate",
                      text="approve the refund ✓", kind="card", card=card, created_at=utcnow())
    await store.add_message(message)
    await store.add_message(message)  # a retried write adds nothing
    expected += len("approve the refund ✓".encode()) + octets_of(card)
    checkpoint = {"outputs": {"a": "y" * 500}}
    await store.save_checkpoint(job_id, checkpoint, job_id=job_id)
    expected += octets_of(checkpoint)
    span = SpanRecord(trace_id=job_id, span_id="root", name="run", type="flow", start_time=utcnow(), run_id=job_id,
                      inputs={"q": "a" * 300}, outputs={}, attributes={"k": "v"})
    await store.save_spans([span])
    ended = span.model_copy(update={"end_time": utcnow(), "outputs": {"answer": "b" * 700}})
    await store.save_spans([ended])  # the span saved again: its new size, not both
    expected += octets_of(ended.inputs) + octets_of(ended.outputs) + octets_of(ended.attributes)
    await store.put_blob(f"runs/{job_id}/out/1", b"z" * 4096)
    await store.put_blob(f"runs/{job_id}/out/1", b"z" * 1024)  # replaced: the new size
    expected += 1024
    result = {"text": "done — ok"}
    assert await store.set_status(job_id, JobStatus.completed, result=result, event=("end", {"ok": True}))
    expected += octets_of(result) + octets_of({"ok": True})
    assert await store.stored_bytes(alice.id) == expected
    assert await store.stored_bytes(bob.id) == 0  # bob saved a version of alice's flow: hers

    # what belongs to no user's run counts to nobody, and is no error
    await store.append_event(uid("job-"), "e", {"x": 1})
    await store.put_blob(f"pages/{alice.id}/session", b"p" * 100)
    await store.put_blob(f"runs/{uid('job-')}/out/1", b"q" * 100)
    await store.save_checkpoint(uid("run-"), {"x": 1})
    assert await store.stored_bytes(alice.id) == expected


async def test_deletes_give_back_what_was_counted(store: Store) -> None:
    alice, bob = await new_user(store), await new_user(store)
    flow = await store.save_flow(alice.id, "f", {"name": "f", "pad": "p" * 200})
    await store.save_flow(alice.id, "f", {"name": "f", "pad": "p" * 300}, flow_id=flow.id)
    keep = await store.save_flow(alice.id, "kept", {"name": "kept"})
    job_id = await new_job(store, alice.id)
    theirs = await new_job(store, bob.id)
    base = await store.stored_bytes(alice.id)
    base_bob = await store.stored_bytes(bob.id)

    await store.save_checkpoint(job_id, {"a": "1" * 100}, job_id=job_id)
    await store.save_checkpoint(job_id, {"a": "2" * 100}, job_id=job_id, expires_at=utcnow() - timedelta(seconds=1))
    await store.save_checkpoint(theirs, {"b": "3" * 100}, job_id=theirs, expires_at=utcnow() - timedelta(seconds=1))
    await store.put_blob(f"runs/{job_id}/out/1", b"x" * 5000)
    await store.put_blob(f"runs/{job_id}/state/2", b"y" * 3000)
    await store.put_blob(f"runs/{theirs}/out/1", b"w" * 700)
    assert await store.stored_bytes(alice.id) == base + 2 * octets_of({"a": "1" * 100}) + 8000
    assert await store.stored_bytes(bob.id) == base_bob + octets_of({"b": "3" * 100}) + 700

    assert await store.delete_expired_checkpoints(utcnow()) >= 2  # two users' at once: each gets theirs
    assert await store.stored_bytes(alice.id) == base + octets_of({"a": "1" * 100}) + 8000
    assert await store.stored_bytes(bob.id) == base_bob + 700
    assert await store.delete_blobs(f"runs/{job_id}/") == 2
    assert await store.delete_checkpoints(job_id) == 1
    assert await store.stored_bytes(alice.id) == base
    assert await store.stored_bytes(bob.id) == base_bob + 700

    assert await store.delete_flow(flow.id)
    assert not await store.delete_flow(flow.id)  # twice: nothing more given back
    assert await store.stored_bytes(alice.id) == base - octets_of({"name": "f", "pad": "p" * 200}) - octets_of(
        {"name": "f", "pad": "p" * 300})
    assert await store.get_flow(keep.id) is not None
    assert await store.delete_user(alice.id)
    assert await store.stored_bytes(alice.id) == 0
    assert await store.stored_bytes(bob.id) == base_bob + 700  # another user's count is untouched


async def test_concurrent_writes_of_one_user_lose_no_count(store: Store) -> None:
    """Every write changes the one usage row of its user in its own transaction: racing writes
    (events of several runs, flows, blobs, checkpoints) all count, none overwrites another."""
    user = await new_user(store)
    jobs = [await new_job(store, user.id) for _ in range(4)]
    base = await store.stored_bytes(user.id)
    data = {"chunk": "d" * 333}
    writes = [store.append_event(jobs[i % 4], "progress", {**data, "i": i}) for i in range(40)]
    writes += [store.save_flow(user.id, f"flow-{i}", {"name": f"flow-{i}", "pad": "f" * 250}) for i in range(10)]
    writes += [store.put_blob(f"runs/{jobs[i % 4]}/out/{i}", b"b" * 1000) for i in range(10)]
    writes += [store.put_blob(f"runs/{jobs[0]}/out/same", b"s" * 500) for _ in range(5)]  # one key at once
    writes += [store.save_checkpoint(jobs[i % 4], data, job_id=jobs[i % 4]) for i in range(10)]
    # batches of spans of two runs each, each span saved twice (its start, then its end)
    spans = [[SpanRecord(trace_id=jobs[k], span_id=f"s{i}", name="n", type="t", start_time=utcnow(), run_id=jobs[k],
                         outputs={"o": "s" * (100 * (i + 1) + n)}) for k in (i % 4, (i + 1) % 4)]
             for i in range(5) for n in (0, 50)]
    writes += [store.save_spans(batch) for batch in spans]
    await asyncio.gather(*writes)
    expected = (sum(octets_of({**data, "i": i}) for i in range(40))
                + sum(octets_of({"name": f"flow-{i}", "pad": "f" * 250}) for i in range(10))
                + 10 * 1000 + 500 + 10 * octets_of(data))
    stored = {}  # the last save of each span is what it keeps (which one is last: the race's)
    for trace in jobs:
        for span in await store.get_trace(trace):
            stored[(trace, span.span_id)] = octets_of(span.inputs) + octets_of(span.outputs) + octets_of(
                span.attributes)
    assert len(stored) == 10
    expected += sum(stored.values())
    assert await store.stored_bytes(user.id) == base + expected
    await asyncio.gather(*(store.delete_blobs(f"runs/{j}/") for j in jobs),
                         *(store.delete_checkpoints(j) for j in jobs),
                         *(store.append_event(jobs[0], "late", {"i": i}) for i in range(10)))
    assert await store.stored_bytes(user.id) == base + expected - 10 * 1000 - 500 - 10 * octets_of(data) + sum(
        octets_of({"i": i}) for i in range(10))


# ---- deleting ended runs (Store.delete_run, Store.delete_runs_ended_before) --------------------


async def _fill_run(store: Store, job_id: str, session: str, flow_id: str, tag: str, approver: str) -> None:
    """Everything the store keeps per run, some of it in two spellings (a checkpoint by run_id
    alone, a span whose run_id is unset but whose trace is the run's)."""
    await store.append_event(job_id, "vertex_end", {"output": f"{tag} ünï" * 50})
    await store.append_event(job_id, "vertex_end", {"output": tag}, dedupe_key=f"{tag}:k")
    for i, kind in enumerate(("message", "card")):
        card = {"prompt": f"{tag}?", "request_id": f"gate:{job_id}"} if kind == "card" else None
        await store.add_message(Message(id=uid(), session_id=session, flow_id=flow_id, job_id=job_id, sender="Machine",
                                        sender_name="gate", text=f"{tag} ✓ {i}", kind=kind, card=card,
                                        created_at=utcnow()))
    await store.save_checkpoint(job_id, {"outputs": {"a": tag * 40}}, job_id=job_id)
    await store.save_checkpoint(job_id, {"outputs": {"b": tag * 10}})  # by run_id only
    await store.save_spans([
        SpanRecord(trace_id=job_id, span_id="root", name="run", type="flow", start_time=utcnow(), run_id=job_id,
                   inputs={"q": tag * 30}, outputs={"a": "é" * 20}, attributes={"k": "v"}),
        SpanRecord(trace_id=job_id, span_id="loose", name="c", type="component", start_time=utcnow(),
                   outputs={"o": tag}),
    ])
    await store.put_blob(f"runs/{job_id}/out/1", tag.encode() * 300)
    await store.put_blob(f"runs/{job_id}/state/2", b"s" * 77)
    await store.set_request_approvers(job_id, f"gate:{job_id}", [f"user:{approver}"])
    await store.add_participants(job_id, [approver])


async def _leftovers(store: Store, job_id: str, session: str, approver: str) -> list[str]:
    """What the store still keeps of the run, by name (none once it is deleted)."""
    left = []
    if await store.get_job(job_id) is not None:
        left.append("job")
    if await store.read_events(job_id):
        left.append("events")
    if [m for m in await store.list_messages(session) if m.job_id == job_id]:
        left.append("messages")
    if await store.load_latest_checkpoint(job_id) is not None:
        left.append("checkpoints")
    if await store.get_trace(job_id):
        left.append("spans")
    if await store.get_blob(f"runs/{job_id}/out/1") is not None or await store.get_blob(f"runs/{job_id}/state/2"):
        left.append("blobs")
    if await store.request_approvers(job_id, f"gate:{job_id}"):
        left.append("approvers")
    if await store.took_part(job_id, approver):
        left.append("participants")
    return left


async def test_delete_run_takes_all_of_an_ended_run_and_gives_back_exactly_what_it_counted(store: Store) -> None:
    alice, bob, carol = await new_user(store), await new_user(store), await new_user(store)
    session, flow_id = uid("session-"), uid("flow-")
    kept = await new_job(store, alice.id, flow_id=flow_id, session_id=session)  # the same session, user, flow
    await _fill_run(store, kept, session, flow_id, "kept", carol.id)
    bobs = await new_job(store, bob.id, flow_id=flow_id, session_id=session)
    await _fill_run(store, bobs, session, flow_id, "bob", carol.id)
    base, base_bob = await store.stored_bytes(alice.id), await store.stored_bytes(bob.id)

    job_id = await new_job(store, alice.id, flow_id=flow_id, session_id=session, idempotency_key="k1",
                           request={"input_value": "refund — ünïcode " * 20})
    await store.set_status(job_id, JobStatus.in_progress)
    await _fill_run(store, job_id, session, flow_id, "gone", carol.id)
    assert await store.set_status(job_id, JobStatus.failed, result={"text": "half ✓"}, error={"error": "boom ö"},
                                  event=("run_failed", {"error": "boom ö"}))
    await store.set_request_approvers(job_id, f"gate:{job_id}", [f"user:{carol.id}"])  # left by a late write
    assert await store.stored_bytes(alice.id) > base + 2500

    assert await store.delete_run(job_id)
    assert await store.stored_bytes(alice.id) == base  # every byte the run counted, given back
    assert await _leftovers(store, job_id, session, carol.id) == []
    assert job_id not in [j.job_id for j in await store.participated_jobs(carol.id)]
    # the other runs of the session (hers and bob's) are untouched, and so is bob's count
    for other in (kept, bobs):
        assert await _leftovers(store, other, session, carol.id) == [
            "job", "events", "messages", "checkpoints", "spans", "blobs", "approvers", "participants"]
        assert len(await store.read_events(other)) == 2 and len(await store.get_trace(other)) == 2
    assert await store.stored_bytes(bob.id) == base_bob

    assert not await store.delete_run(job_id)  # twice: nothing more, nothing given back again
    assert await store.stored_bytes(alice.id) == base
    # the idempotency key went with its job: the same key makes a new run
    again = await new_job(store, alice.id, flow_id=flow_id, idempotency_key="k1")
    assert again != job_id
    # the deleted run's event log starts afresh if anything appends to its id (no gap, no clash)
    assert await store.append_event(job_id, "late", {}) == 1


async def test_delete_run_refuses_a_run_that_has_not_ended_or_whose_workflow_is_still_to_cancel(store: Store) -> None:
    alice = await new_user(store)
    jobs = await _jobs_in_every_status(store, uid("flow-"), alice.id, uid("del-"))
    for job_id in jobs.values():
        await store.append_event(job_id, "progress", {"at": job_id})
    before = await store.stored_bytes(alice.id)
    for status in ACTIVE:
        assert not await store.delete_run(jobs[status]), status
        assert (await store.get_job(jobs[status])).status == status
        assert len(await store.read_events(jobs[status])) >= 1
    assert await store.stored_bytes(alice.id) == before
    assert not await store.delete_run(uid("job-"))  # none

    ended = jobs[JobStatus.cancelled]
    await store.want_release(ended)  # a stop ended it; its workflow is still to cancel (the sweep)
    assert not await store.delete_run(ended)
    assert ended not in await store.delete_runs_ended_before(utcnow() + timedelta(days=1), limit=0) + [
        j for j in await store.delete_runs_ended_before(utcnow() + timedelta(days=1)) if j == ended]
    assert (await store.get_job(ended)).status == JobStatus.cancelled
    await store.released(ended)
    assert await store.delete_run(ended)
    for status in ACTIVE:
        assert (await store.get_job(jobs[status])).status == status  # the sweep above took only ended ones


async def test_delete_runs_ended_before_takes_the_oldest_ended_in_bounded_batches(store: Store) -> None:
    alice = await new_user(store)
    old = []
    for i in range(3):
        job_id = await new_job(store, alice.id)
        await store.append_event(job_id, "e", {"i": i})
        assert await store.set_status(job_id, JobStatus.completed, result={"i": i})
        old.append(job_id)
    cutoff = utcnow()
    recent = await new_job(store, alice.id)
    assert await store.set_status(recent, JobStatus.completed)  # ended after the cutoff: kept
    waiting, _ = await suspended_job(store, user_id=alice.id)  # not ended: kept, however old
    before_recent = await store.stored_bytes(alice.id)

    with pytest.raises(ValueError):
        await store.delete_runs_ended_before(cutoff, limit=-1)
    assert await store.delete_runs_ended_before(cutoff, limit=0) == []
    first = await store.delete_runs_ended_before(cutoff, limit=2)
    assert len(first) == 2  # a batch is bounded (other tests' old runs may come first on a shared database)
    while batch := await store.delete_runs_ended_before(cutoff, limit=500):
        assert recent not in batch and waiting not in batch
    for job_id in old:
        assert await store.get_job(job_id) is None and await store.read_events(job_id) == []
    assert (await store.get_job(recent)).status == JobStatus.completed
    assert (await store.get_job(waiting)).status == JobStatus.suspended
    # what is left of alice is exactly her two kept runs (their requests, result, ...)
    recent_job, waiting_job = await store.get_job(recent), await store.get_job(waiting)
    assert await store.stored_bytes(alice.id) == octets_of(recent_job.request) + octets_of(waiting_job.request)
    assert before_recent > await store.stored_bytes(alice.id)


async def test_delete_run_racing_claims_never_deletes_a_run_that_has_not_ended(store: Store) -> None:
    """A retention delete racing a resume (or a stop) of a suspended run: the resume wins and the
    run is kept running; a delete only ever takes a run whose stop committed first, and then all
    of it."""
    alice = await new_user(store)
    for round_ in range(10):
        job_id, request_id = await suspended_job(store, user_id=alice.id)
        await store.append_event(job_id, "human_input_required", {"round": round_})
        resumed, deleted, swept = await asyncio.gather(
            store.claim_suspended_for_resume(job_id, request_id), store.delete_run(job_id),
            store.delete_runs_ended_before(utcnow() + timedelta(days=1), limit=50))
        assert resumed is not None and not deleted and job_id not in swept
        job = await store.get_job(job_id)
        assert job.status == JobStatus.in_progress and len(await store.read_events(job_id)) == 1

        other, _ = await suspended_job(store, user_id=alice.id)
        cancelled, deleted = await asyncio.gather(store.claim_suspended_for_cancel(other), store.delete_run(other))
        assert cancelled
        if deleted:  # the cancel committed first: the run ended, and went whole
            assert await store.get_job(other) is None
        else:
            assert (await store.get_job(other)).status == JobStatus.cancelled
            assert await store.delete_run(other)
    # every run alice has is running now; nothing she deleted is still counted
    left = await store.list_user_active_jobs(alice.id)
    events = [e for j in left for e in await store.read_events(j.job_id)]
    assert await store.stored_bytes(alice.id) == sum(octets_of(j.request) for j in left) + sum(
        octets_of(e.data) for e in events)


async def test_set_status_with_spans_and_leftovers_ends_a_run_in_one_write(store: Store) -> None:
    """Issue 33: a run's end in one write: its spans, the terminal status with its event, and
    what it leaves behind (its checkpoints, its blobs) together; each byte counted and given
    back as the separate writes would. Spans are saved whether or not the status changed; the
    leftovers go only with a terminal status this call wrote; another run's rows stay."""
    alice = await new_user(store)
    job_id = await new_job(store, alice.id)
    other = await new_job(store, alice.id)
    assert await store.set_status(job_id, JobStatus.in_progress)
    await store.save_checkpoint(job_id, {"outputs": {"a": "y" * 500}}, job_id=job_id)
    await store.put_blob(f"runs/{job_id}/out/1", b"z" * 2048)
    await store.save_checkpoint(other, {"keep": 1}, job_id=other)
    await store.put_blob(f"runs/{other}/out/1", b"k" * 100)
    base = await store.stored_bytes(alice.id)
    root = SpanRecord(trace_id=job_id, span_id="root", name="run", type="flow", start_time=utcnow(),
                      end_time=utcnow(), status="ok", run_id=job_id, inputs={"q": "a" * 300}, outputs={},
                      attributes={})
    loose = SpanRecord(trace_id=job_id, span_id="loose", name="c", type="component", start_time=utcnow(),
                       inputs={}, outputs={"o": "b" * 50}, attributes={})
    result = {"text": "done"}
    assert await store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress], result=result,
                                  event=("end", {"status": "completed"}), spans=[root, loose],
                                  leftovers=(job_id, f"runs/{job_id}/"))
    job = await store.get_job(job_id)
    assert job.status == JobStatus.completed and job.result == result
    assert {s.span_id for s in await store.get_trace(job_id)} == {"root", "loose"}
    assert [e.event for e in await store.read_events(job_id)] == ["end"]
    assert await store.load_latest_checkpoint(job_id) is None
    assert await store.get_blob(f"runs/{job_id}/out/1") is None
    assert await store.load_latest_checkpoint(other) is not None  # another run's: kept
    assert await store.get_blob(f"runs/{other}/out/1") == b"k" * 100
    spans = octets_of(root.inputs) + octets_of(root.outputs) + octets_of(root.attributes)  # a run's: counted
    assert await store.stored_bytes(alice.id) == (base + spans + octets_of(result)
                                                  + octets_of({"status": "completed"})
                                                  - octets_of({"outputs": {"a": "y" * 500}}) - 2048)
    # the write lost (the run ended already): its spans still saved, nothing else written or deleted
    late = root.model_copy(update={"span_id": "late"})
    assert not await store.set_status(job_id, JobStatus.failed, spans=[late], event=("run_failed", {}),
                                      leftovers=(other, f"runs/{other}/"))
    assert "late" in {s.span_id for s in await store.get_trace(job_id)}
    assert [e.event for e in await store.read_events(job_id)] == ["end"]
    assert await store.load_latest_checkpoint(other) is not None and await store.get_blob(f"runs/{other}/out/1")
    # a status that is not terminal deletes nothing
    assert await store.set_status(other, JobStatus.in_progress, leftovers=(other, f"runs/{other}/"))
    assert await store.load_latest_checkpoint(other) is not None


async def test_set_status_with_messages_writes_them_with_the_end_or_not_at_all(store: Store) -> None:
    """Issue 33: a run's last messages (a ChatOutput's) in its end's write: the messages, the
    status and its event together (the messages before the event, counted to the run's user as
    add_message counts them, idempotent by id), or none of them: a write that fails halfway
    leaves the run as it was, and a write that loses (the run ended already) stores no message."""
    alice = await new_user(store)
    job_id = await new_job(store, alice.id)
    assert await store.set_status(job_id, JobStatus.in_progress)

    def said(n: int, **kw) -> Message:
        return Message(id=f"{job_id}-{n}", session_id=f"s-{job_id}", flow_id="f", job_id=job_id, sender="Machine",
                       sender_name="AI", text=f"said {n}", created_at=utcnow(), **kw)
    base = await store.stored_bytes(alice.id)
    with pytest.raises(Exception):  # the second message cannot be stored: nothing is
        await store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress],
                               event=("end", {"status": "completed"}),
                               messages=[said(1), said(2, card={"bad": object()})])
    assert (await store.get_job(job_id)).status == JobStatus.in_progress
    assert await store.list_messages(f"s-{job_id}") == [] and await store.read_events(job_id) == []
    assert await store.stored_bytes(alice.id) == base
    await store.add_message(said(0))  # stored before: stored once
    assert await store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress],
                                  result={"t": 1}, event=("end", {"status": "completed"}),
                                  messages=[said(0), said(1)])
    assert [m.text for m in await store.list_messages(f"s-{job_id}")] == ["said 0", "said 1"]
    assert (await store.get_job(job_id)).status == JobStatus.completed
    assert [e.event for e in await store.read_events(job_id)] == ["end"]
    assert await store.stored_bytes(alice.id) == (base + 2 * len("said 0") + octets_of({"t": 1})
                                                  + octets_of({"status": "completed"}))
    # lost (ended already): no message
    assert not await store.set_status(job_id, JobStatus.failed, event=("run_failed", {}), messages=[said(3)])
    assert [m.text for m in await store.list_messages(f"s-{job_id}")] == ["said 0", "said 1"]
    assert [e.event for e in await store.read_events(job_id)] == ["end"]


async def test_mark_suspended_with_spans_saves_them_with_the_pause(store: Store) -> None:
    """Issue 33: the pause in one write, the spans of what was built before it included; saved
    also when the pause was not written (a stop got in first), and counted to the run's user."""
    alice = await new_user(store)
    job_id = await new_job(store, alice.id)
    assert await store.set_status(job_id, JobStatus.in_progress)
    base = await store.stored_bytes(alice.id)
    span = SpanRecord(trace_id=job_id, span_id="ask", name="ask", type="component", start_time=utcnow(),
                      end_time=utcnow(), run_id=job_id, inputs={"q": "x" * 100}, outputs={}, attributes={})
    assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"), event=("human_input_required", {}),
                                      dedupe_key="pause:1", spans=[span])
    assert [s.span_id for s in await store.get_trace(job_id)] == ["ask"]
    assert (await store.get_job(job_id)).waits_for(f"gate:{job_id}")
    assert await store.stored_bytes(alice.id) == base + octets_of(span.inputs) + 2 + 2 + octets_of({})
    stopped = await new_job(store, alice.id)
    assert await store.set_status(stopped, JobStatus.cancelled)
    late = span.model_copy(update={"trace_id": stopped, "run_id": stopped})
    assert not await store.mark_suspended(stopped, pending(f"gate:{stopped}"), spans=[late])
    assert [s.span_id for s in await store.get_trace(stopped)] == ["ask"]
    assert (await store.get_job(stopped)).status == JobStatus.cancelled


async def test_mark_suspended_writes_the_pauses_state_with_it_or_none_of_it(store: Store) -> None:
    """Issue 33: a submit's pause in one write. ``checkpoint``, ``messages`` and ``approvers`` are
    written in the transaction of the status change, as save_checkpoint, add_message and
    set_request_approvers write them (the same rows, counted to the run's user the same), and
    only when the row changes: a job that ended meanwhile gets none of them, nor does a job that
    waits already (an earlier attempt's write); a bad reference or card writes nothing at all."""
    alice = await new_user(store)

    def said(job_id: str, n: int, **kw) -> Message:
        return Message(id=f"{job_id}-{n}", session_id=f"s-{job_id}", flow_id="f", job_id=job_id, sender="User",
                       sender_name="User", text=f"said {n}", created_at=utcnow(), **kw)

    refs = ["user:u-2", "group:o-1/finance", "user:u-2"]
    data = {"layers": 2, "built": ["ask", "gate"], "big": "x" * 300}
    expires = utcnow() + timedelta(days=1)
    event = ("human_input_required", {"n": 1})
    # the writes one at a time (as before), then in one: the same rows, the same count
    apart = await new_job(store, alice.id)
    assert await store.set_status(apart, JobStatus.in_progress)
    base = await store.stored_bytes(alice.id)
    await store.save_checkpoint(apart, data, job_id=apart, expires_at=expires)
    await store.add_message(said(apart, 0))
    await store.add_message(said(apart, 1, card={"request_id": f"gate:{apart}"}))
    await store.set_request_approvers(apart, f"gate:{apart}", refs)
    assert await store.mark_suspended(apart, pending(f"gate:{apart}"), event=event, dedupe_key="pause:2")
    cost_apart = await store.stored_bytes(alice.id) - base

    job_id = await new_job(store, alice.id)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    with pytest.raises((ValueError, TypeError)):  # a bad reference: nothing is written
        await store.mark_suspended(job_id, pending(request_id), event=event, approvers=["nobody"],
                                   checkpoint=PauseCheckpoint(job_id, data), messages=[said(job_id, 0)])
    with pytest.raises(Exception):  # a card that cannot be stored: nothing is
        await store.mark_suspended(job_id, pending(request_id), event=event, approvers=refs,
                                   checkpoint=PauseCheckpoint(job_id, data),
                                   messages=[said(job_id, 0), said(job_id, 1, card={"bad": object()})])
    job = await store.get_job(job_id)
    assert job.status == JobStatus.in_progress and job.pending is None
    assert await store.load_latest_checkpoint(job_id) is None
    assert await store.list_messages(f"s-{job_id}") == [] and await store.read_events(job_id) == []
    assert await store.request_approvers(job_id, request_id) == []
    base = await store.stored_bytes(alice.id)
    await store.add_message(said(job_id, 0))  # stored before (a component read the history): once
    assert await store.mark_suspended(job_id, pending(request_id), event=event, dedupe_key="pause:2",
                                      checkpoint=PauseCheckpoint(job_id, data, expires_at=expires),
                                      messages=[said(job_id, 0), said(job_id, 1, card={"request_id": request_id})],
                                      approvers=refs)
    assert (await store.get_job(job_id)).waits_for(request_id)
    cp = await store.load_latest_checkpoint(job_id)
    assert cp.data == data and cp.job_id == job_id and cp.run_id == job_id
    assert abs((cp.expires_at - expires).total_seconds()) < 1
    assert [m.text for m in await store.list_messages(f"s-{job_id}")] == ["said 0", "said 1"]
    assert [(e.event, e.data) for e in await store.read_events(job_id)] == [("human_input_required", {"n": 1})]
    assert await store.request_approvers(job_id, request_id) == ["user:u-2", "group:o-1/finance"]
    assert await store.stored_bytes(alice.id) - base == cost_apart  # counted as the writes apart

    # a retry of the write (an earlier attempt's committed, its answer lost): the job waits, so
    # nothing is written again (no second checkpoint, event or approver change)
    assert not await store.mark_suspended(job_id, pending(request_id), event=event, dedupe_key="pause:2",
                                          checkpoint=PauseCheckpoint(job_id, {"other": 1}),
                                          messages=[said(job_id, 2)], approvers=["user:u-3"])
    assert (await store.load_latest_checkpoint(job_id)).data == data
    assert len(await store.list_messages(f"s-{job_id}")) == 2 and len(await store.read_events(job_id)) == 1
    assert await store.request_approvers(job_id, request_id) == ["user:u-2", "group:o-1/finance"]
    assert await store.stored_bytes(alice.id) - base == cost_apart

    # an ended job (stopped before the pause was written): none of the pause, nothing counted
    stopped = await new_job(store, alice.id)
    assert await store.set_status(stopped, JobStatus.cancelled)
    before = await store.stored_bytes(alice.id)
    assert not await store.mark_suspended(stopped, pending(f"gate:{stopped}"), event=event,
                                          checkpoint=PauseCheckpoint(stopped, data), messages=[said(stopped, 0)],
                                          approvers=refs)
    assert (await store.get_job(stopped)).status == JobStatus.cancelled
    assert await store.load_latest_checkpoint(stopped) is None
    assert await store.list_messages(f"s-{stopped}") == [] and await store.read_events(stopped) == []
    assert await store.request_approvers(stopped, f"gate:{stopped}") == []
    assert await store.stored_bytes(alice.id) == before


async def test_mark_suspended_with_its_state_and_spans_counts_both(store: Store) -> None:
    """The pause's rows and the spans of what was built before it, in one transaction (the spans
    through their own count, the rest charged with them): the user's count is that of the same
    writes apart."""
    alice = await new_user(store)
    costs = []
    for together in (False, True):
        job_id = await new_job(store, alice.id)
        assert await store.set_status(job_id, JobStatus.in_progress)
        base = await store.stored_bytes(alice.id)
        span = SpanRecord(trace_id=job_id, span_id="ask", name="ask", type="component", start_time=utcnow(),
                          end_time=utcnow(), run_id=job_id, inputs={"q": "x" * 100}, outputs={}, attributes={})
        message = Message(id=uid(), session_id=f"s-{job_id}", flow_id="f", job_id=job_id, sender="User",
                          sender_name="User", text="refund 42", created_at=utcnow())
        if together:
            assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"), event=("human_input_required", {}),
                                              spans=[span], checkpoint=PauseCheckpoint(job_id, {"a": 1}),
                                              messages=[message])
        else:
            await store.save_checkpoint(job_id, {"a": 1}, job_id=job_id)
            await store.add_message(message)
            await store.save_spans([span])
            assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"), event=("human_input_required", {}))
        assert [s.span_id for s in await store.get_trace(job_id)] == ["ask"]
        assert [m.text for m in await store.list_messages(f"s-{job_id}")] == ["refund 42"]
        costs.append(await store.stored_bytes(alice.id) - base)
    assert costs[0] == costs[1] > octets_of(span.inputs)


async def test_mark_suspended_reads_the_owners_webhooks_in_its_write(store: Store) -> None:
    """Issue 33: the pause's deliveries read in the pause's write (``reads``, as record_decision's):
    the webhooks of the owners given, all of them whatever their events, as webhooks_for reads them
    before it filters; nothing read when the write changes nothing."""
    alice, bob, carol = [await new_user(store) for _ in range(3)]
    mine = await store.create_webhook(alice.id, "https://example.com/a", ["human_input_required"], b"s")
    theirs = await store.create_webhook(bob.id, "https://example.com/b", ["run_completed"], b"s")
    await store.create_webhook(carol.id, "https://example.com/c", ["*"], b"s")  # not an owner given
    job_id = await new_job(store, alice.id)
    assert await store.set_status(job_id, JobStatus.in_progress)
    reads = DecisionReads(owners=[bob.id, alice.id, alice.id])
    assert await store.mark_suspended(job_id, pending(f"gate:{job_id}"), event=("human_input_required", {}),
                                      reads=reads)
    assert sorted(h.id for h in reads.webhooks) == sorted([mine.id, theirs.id])
    got = {h.id: h for h in await store.webhooks_for([alice.id, bob.id], "run_completed")}
    assert {h.id: h for h in reads.webhooks}[theirs.id] == got[theirs.id]
    nobody = DecisionReads(owners=[])
    other = await new_job(store, alice.id)
    assert await store.set_status(other, JobStatus.in_progress)
    assert await store.mark_suspended(other, pending(f"gate:{other}"), reads=nobody)
    assert nobody.webhooks == []
    again = DecisionReads(owners=[alice.id])  # the job waits already: nothing written, nothing read
    assert not await store.mark_suspended(job_id, pending(f"gate:{job_id}"), reads=again)
    assert again.webhooks is None
