"""Writes of several statements are one transaction on the SQL backends: a statement that fails
half-way leaves every row as it was. (MemoryStore raises before its first change, which the
contract shows; here a real database fails mid-transaction.)"""

from __future__ import annotations

import pytest

from signoff.engine.store import Store, StoreError
from signoff.engine.store.sql.queries import Q
from tests.store_conformance import new_job, new_user


async def test_delete_user_that_fails_on_its_last_statement_deletes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed, friend = await new_user(store), await new_user(store)
    key = await store.create_api_key(doomed.id)
    own_flow = await store.save_flow(doomed.id, "mine", {})
    friend_flow = await store.save_flow(friend.id, "theirs", {})
    await store.grant_share(own_flow.id, friend.id, ["execute"])
    await store.grant_share(friend_flow.id, doomed.id, ["execute"])
    await store.put_secret(doomed.id, "token", b"c")
    await store.create_group(doomed.id, "mine")
    await store.add_group_members(doomed.id, "mine", [friend.id])
    await store.create_group(friend.id, "theirs")
    await store.add_group_members(friend.id, "theirs", [doomed.id])
    hook = await store.create_webhook(doomed.id, "https://x", ["*"], b"s")
    await store.log_delivery(hook.id, event="e", job_id="j", seq=1, attempt=1, status_code=200, error=None,
                             delivered=True)
    job_id = await new_job(store, doomed.id, flow_id=own_flow.id)

    # the webhooks go last: make that statement fail after the user, keys, shares, secrets, groups
    # and deliveries went
    monkeypatch.setattr(Q, "delete_owner_webhooks", "DELETE FROM no_such_table WHERE owner_id = ?")
    with pytest.raises(StoreError):
        await store.delete_user(doomed.id)
    monkeypatch.undo()

    assert await store.get_user(doomed.id) == doomed
    assert await store.user_for_api_key(key) == doomed
    assert await store.has_permission(own_flow.id, friend.id) and await store.has_permission(friend_flow.id, doomed.id)
    assert (await store.get_secret(doomed.id, "token")).ciphertext == b"c"
    assert (await store.get_group(doomed.id, "mine")).members == [friend.id]
    assert await store.groups_of(doomed.id) == [(friend.id, "theirs")]
    assert (await store.get_webhook(hook.id)).owner_id == doomed.id and len(await store.list_deliveries(hook.id)) == 1
    assert (await store.get_job(job_id)).user_id == doomed.id

    assert await store.delete_user(doomed.id)  # and the real one goes through
    assert await store.get_user(doomed.id) is None and await store.list_secrets(doomed.id) == []
    assert await store.list_groups(doomed.id) == [] and await store.groups_of(doomed.id) == []
    assert await store.get_webhook(hook.id) is None and await store.list_deliveries(hook.id) == []


async def test_a_terminal_status_whose_approver_cleanup_fails_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.store_conformance import suspended_job

    job_id, request_id = await suspended_job(store)
    await store.set_request_approvers(job_id, request_id, ["user:u-1"])
    monkeypatch.setattr(Q, "delete_job_approvers", "DELETE FROM no_such_table WHERE job_id = ?")
    with pytest.raises(StoreError):
        await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    monkeypatch.undo()
    job = await store.get_job(job_id)
    assert job.status.value == "suspended" and job.pending.request_id == request_id
    assert await store.read_events(job_id) == []
    assert [j.job_id for j in await store.list_assigned_pending("u-1")] == [job_id]
    assert await store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
    assert await store.request_approvers(job_id, request_id) == []
