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
    job_id = await new_job(store, doomed.id, flow_id=own_flow.id)

    # the secrets go last: make that statement fail after the user, keys and shares went
    monkeypatch.setattr(Q, "delete_owner_secrets", "DELETE FROM no_such_table WHERE owner_id = ?")
    with pytest.raises(StoreError):
        await store.delete_user(doomed.id)
    monkeypatch.undo()

    assert await store.get_user(doomed.id) == doomed
    assert await store.user_for_api_key(key) == doomed
    assert await store.has_permission(own_flow.id, friend.id) and await store.has_permission(friend_flow.id, doomed.id)
    assert (await store.get_secret(doomed.id, "token")).ciphertext == b"c"
    assert (await store.get_job(job_id)).user_id == doomed.id

    assert await store.delete_user(doomed.id)  # and the real one goes through
    assert await store.get_user(doomed.id) is None and await store.list_secrets(doomed.id) == []
