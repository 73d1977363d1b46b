"""The messages a resume's instant layers write, held for the run's end (activities/layers.py:
HeldMessages, issue 33): stored in order, once per id, and before anything else the layers ask of
the store, so a component that reads the history reads what it would have read unheld."""

from __future__ import annotations

from signoff.activities.layers import HeldMessages
from signoff.engine.models import Message, utcnow
from signoff.engine.store.memory import MemoryStore


def said(n: int, text: str | None = None) -> Message:
    return Message(id=f"m{n}", session_id="s", flow_id="f", job_id="j", sender="Machine", sender_name="AI",
                   text=text or f"said {n}", created_at=utcnow())


async def test_held_messages_are_stored_in_order_once_and_before_any_other_call() -> None:
    store = MemoryStore()
    held = HeldMessages(store)
    await held.add_message(said(1))
    await held.add_message(said(2))
    await held.add_message(said(1, "said 1 again"))  # the same id (a retried build): held once, as written last
    assert await store.list_messages("s") == []  # held: nothing stored yet
    # any other call stores them first, in the order last written
    assert [m.text for m in await held.list_messages("s")] == ["said 2", "said 1 again"]
    assert held.messages == []
    await held.add_message(said(3))
    assert [m.id for m in held.take()] == ["m3"] and held.messages == []  # taken by the end's write
    await held.flush()  # nothing left to store
    assert {m.id for m in await store.list_messages("s")} == {"m1", "m2"}
