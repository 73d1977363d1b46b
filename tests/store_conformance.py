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
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from signoff.engine.models import (
    JobStatus,
    Message,
    NewJob,
    Option,
    PendingRequest,
    SecretInfo,
    SecretRecord,
    SpanRecord,
    utcnow,
)
from signoff.engine.store import Store, StoreConflict, StoreError


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
        paused_at=utcnow(),
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
    assert await store.revoke_share(flow.id, guest.id)
    assert not await store.has_permission(flow.id, guest.id)
    assert not await store.revoke_share(flow.id, guest.id)

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
    assert await store.rollback_resume_claim(job_id, "upd-1")  # the token is the claim token
    job = await store.get_job(job_id)
    assert job.status == JobStatus.suspended

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

    history = await store.list_messages(session, flow_id=flow_id)
    assert [m.id for m in history] == [user_msg.id, card_a.id, card_b.id]
    assert history[1].card["submitted_action"] == "approve" and "superseded" not in history[1].card
    assert history[2].card["superseded"] is True and "submitted_action" not in history[2].card
    assert history[1].card["options"] == card_a.card["options"]
    assert len(await store.list_messages(session)) == 4
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
