"""The in-memory stores keep the semantics of the durable ones (engine/store/base.py). The whole
Store contract runs on MemoryStore in tests/integration/store/test_conformance.py; these check
the names ``signoff run`` and the unit tests use."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.fixtures.memory import InMemoryCheckpointStore, InMemoryHistory
from signoff.engine.models import Message, utcnow
from signoff.engine.store.base import Store, StoreError
from signoff.engine.store.memory import MemoryStore


async def test_checkpoints():
    s = InMemoryCheckpointStore()
    first = await s.save_checkpoint("r", {"step": 1})
    second = await s.save_checkpoint("r", {"step": 2}, job_id="j")
    assert (await s.load_latest_checkpoint("r")).id == second
    assert (await s.load_checkpoint(first)).data == {"step": 1}
    assert await s.load_latest_checkpoint("other") is None
    await s.save_checkpoint("old", {}, expires_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert await s.delete_expired_checkpoints(utcnow()) == 1
    assert await s.delete_checkpoints("r") == 2
    assert await s.load_latest_checkpoint("r") is None
    with pytest.raises(StoreError):
        await s.save_checkpoint("r", {"x": object()})
    # stored data is a copy: later mutation of the caller's dict changes nothing
    data = {"a": [1]}
    await s.save_checkpoint("c", data)
    data["a"].append(2)
    assert (await s.load_latest_checkpoint("c")).data == {"a": [1]}


def msg(id: str, **kw) -> Message:
    return Message(id=id, session_id=kw.pop("session_id", "s"), sender=kw.pop("sender", "Machine"),
                   sender_name="x", created_at=utcnow(), **kw)


async def test_history_cards():
    h = InMemoryHistory()
    user = msg("u", sender="User", text="hi", flow_id="f")
    await h.add_message(user)
    assert await h.add_message(user.model_copy(update={"text": "again"})) == user  # a retry adds nothing
    await h.add_message(msg("c1", kind="card", job_id="j1", flow_id="f", card={"request_id": "g:j1"}))
    await h.add_message(msg("c2", kind="card", job_id="j2", flow_id="f", card={"request_id": "g:j2"}))
    await h.add_message(msg("o", flow_id="other"))
    assert await h.stamp_card("g:j1", "approve") == 1
    assert await h.supersede_cards("j1") == 0  # answered cards are never superseded
    assert await h.supersede_cards("j2") == 1
    assert await h.supersede_cards("j2") == 0
    got = await h.list_messages("s", flow_id="f")
    assert [m.id for m in got] == ["u", "c1", "c2"]
    assert got[1].card == {"request_id": "g:j1", "submitted_action": "approve"}
    assert got[2].card == {"request_id": "g:j2", "superseded": True}
    assert len(await h.list_messages("s")) == 4


async def test_checkpoint_store_counts_every_save_and_what_is_left():
    s = InMemoryCheckpointStore()
    assert isinstance(s, MemoryStore) and isinstance(InMemoryHistory(), Store)
    await s.save_checkpoint("a", {})
    await s.save_checkpoint("a", {})
    await s.save_checkpoint("b", {})
    with pytest.raises(StoreError):
        await s.save_checkpoint("b", {"x": float("nan")})  # refused: not counted
    assert (s.saves, s.count(), s.count("a")) == (3, 3, 2)
    await s.delete_checkpoints("a")
    assert (s.saves, s.count(), s.count("a")) == (3, 1, 0)  # saves counts what was ever written
