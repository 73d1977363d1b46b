"""GroupCommit (engine/groupcommit.py): the items that arrive while a write is under way go in the
next write together; each caller gets its own item's result once it is written; a failing item
fails its own caller only."""

from __future__ import annotations

import asyncio

import pytest

from signoff.engine.groupcommit import GroupCommit


class Writer:
    """A write that holds until released, records each call and each batch written, and refuses
    the item 'bad' (or, ``down``, every write: the store is away)."""

    def __init__(self, *, down: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.batches: list[list[str]] = []
        self.down = down
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, items: list[str]) -> list[str]:
        await self.gate.wait()
        self.calls.append(list(items))
        if self.down:
            raise ConnectionError("the database is away")
        if "bad" in items:
            raise ValueError("bad item")
        self.batches.append(list(items))
        return [f"wrote {i}" for i in items]


async def behind_a_held_write(log: GroupCommit, w: Writer, first: str, items: str | list[str]
                              ) -> tuple[asyncio.Task, list[asyncio.Task]]:
    """``first`` added while ``w`` holds its write, then ``items`` queued behind it; then released."""
    w.gate.clear()
    head = asyncio.create_task(log.add(first))
    await asyncio.sleep(0.01)  # the first write is under way, held
    rest = [asyncio.create_task(log.add(x)) for x in items]
    await asyncio.sleep(0.01)
    w.gate.set()
    return head, rest


async def test_items_that_arrive_during_a_write_go_in_the_next_write_together() -> None:
    w = Writer()
    log = GroupCommit(w)
    first, rest = await behind_a_held_write(log, w, "a", "bcdef")
    assert await first == "wrote a"
    assert await asyncio.gather(*rest) == [f"wrote {x}" for x in "bcdef"]
    assert w.batches == [["a"], list("bcdef")]
    assert log.writes == 2


async def test_a_batch_is_at_most_max_batch_items() -> None:
    w = Writer()
    log = GroupCommit(w, max_batch=2)
    results = await asyncio.gather(*(log.add(x) for x in "abcde"))
    assert results == [f"wrote {x}" for x in "abcde"]
    assert [len(b) for b in w.batches] == [2, 2, 1]


async def test_an_item_that_cannot_be_written_fails_its_own_caller_only() -> None:
    w = Writer()
    log = GroupCommit(w)
    blocker, tasks = await behind_a_held_write(log, w, "first", ["a", "bad", "b"])
    await blocker
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert done[0] == "wrote a" and done[2] == "wrote b"
    assert isinstance(done[1], ValueError)
    assert ["a"] in w.batches and ["b"] in w.batches  # written one at a time after the batch failed
    assert await log.add("after") == "wrote after"  # and the log goes on


async def test_a_cancelled_caller_does_not_take_its_item_back() -> None:
    w = Writer()
    log = GroupCommit(w)
    w.gate.clear()
    task = asyncio.create_task(log.add("a"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    w.gate.set()
    assert await log.add("b") == "wrote b"
    assert w.batches == [["a"], ["b"]]


async def test_a_write_returning_the_wrong_number_of_results_fails_its_callers() -> None:
    async def short(items: list[str]) -> list[str]:
        return items[:-1]

    log = GroupCommit(short)
    done = await asyncio.gather(log.add("a"), log.add("b"), return_exceptions=True)
    assert [str(e) for e in done] == ["GroupCommit: 1 items written, 0 results"] * 2  # alone, each too


async def test_when_the_store_fails_the_batch_fails_without_each_item_waiting_for_it_in_turn() -> None:
    w = Writer(down=True)
    log = GroupCommit(w)
    first, rest = await behind_a_held_write(log, w, "first", "abcd")
    done = await asyncio.gather(first, *rest, return_exceptions=True)
    assert all(isinstance(e, ConnectionError) for e in done)
    assert w.calls == [["first"], list("abcd"), ["a"]]  # the batch, its first item alone, and no more


async def test_the_batches_are_written_in_a_context_of_their_own() -> None:
    import contextvars

    who: contextvars.ContextVar[str | None] = contextvars.ContextVar("who", default=None)
    seen: list[str | None] = []

    async def write(items: list[str]) -> list[str]:
        seen.append(who.get())
        return items

    log = GroupCommit(write)
    who.set("mallory")  # the caller who happens to start the flusher
    assert await log.add("x") == "x"
    assert seen == [None]  # the write is not billed to mallory's turn
