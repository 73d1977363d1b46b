"""Writes that come together go in one transaction (group commit): :class:`GroupCommit`.

A webhook's deliveries of one event are activities of their own (each retried apart), and each
logged its attempt in a write transaction of its own: a pause that reaches a hundred webhooks
sent a hundred writes, one after the other through SQLite's one writer (docs/security.md, "Where
an honest round waits": 420-720 of the budget soak's ~4,300 write transactions in 50 s). Here
each caller still waits until its own item is durable, but the items that arrive while a write
is under way go in the next write together: no timer, no item waits longer than the write in
front of it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """``add(item)`` returns ``write([..., item, ...])``'s result for ``item`` once that write is
    done. ``write`` takes up to ``max_batch`` items and returns one result per item, in order.
    A batch whose write fails is written again one item at a time, so an item that cannot be
    written fails its own caller only (unless the first fails alone too: then all fail with it).
    A caller cancelled while it waits does not take its item back (it is written, or was)."""

    def __init__(self, write: Callable[[list[T]], Awaitable[Sequence[R]]], *, max_batch: int = 100) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._write = write
        self.max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.writes = 0  # write calls made (for tests and benches)

    async def add(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if self._flusher is not None and self._flusher.get_loop() is not loop:  # its loop is gone
            self._flusher, self._pending = None, []
        fut: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, fut))
        if self._flusher is None or self._flusher.done():
            # in a context of its own: the batches hold the writes of many callers (of many users),
            # so they are nobody's in particular (engine/fairgate.py: acting_for), not the turn
            # of whichever caller happened to start the flusher
            self._flusher = asyncio.create_task(self._flush(), context=contextvars.Context())
        return await fut

    async def _flush(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._pending:
                batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
                try:
                    results = await self._written([item for item, _ in batch])
                except Exception as err:  # noqa: BLE001 - settled per item
                    await self._one_by_one(batch, err)
                else:
                    for (_, fut), result in zip(batch, results):
                        _settle(fut, result=result)
                batch = []
        except BaseException:  # the flusher cancelled (its loop closing): nobody waits for ever
            for _, fut in batch + self._pending:
                _settle(fut, error=asyncio.CancelledError())
            self._pending = []
            raise

    async def _one_by_one(self, batch: list[tuple[T, asyncio.Future[R]]], err: Exception) -> None:
        """A batch that failed, written again an item at a time so that an item the store refuses
        fails its own caller only; but when the first item fails alone too, the store is failing
        (an outage, a lock held elsewhere), not an item: the rest fail with it at once rather than
        each waiting for the store in turn."""
        if len(batch) == 1:
            _settle(batch[0][1], error=err)
            return
        for i, (item, fut) in enumerate(batch):
            try:
                _settle(fut, result=(await self._written([item]))[0])
            except Exception as one:  # noqa: BLE001 - this item's own, or the store's
                _settle(fut, error=one)
                if i == 0:
                    for _, rest in batch[1:]:
                        _settle(rest, error=one)
                    return

    async def _written(self, items: list[T]) -> list[R]:
        self.writes += 1
        results = list(await self._write(items))
        if len(results) != len(items):
            raise RuntimeError(f"GroupCommit: {len(items)} items written, {len(results)} results")
        return results


def _settle(fut: asyncio.Future[R], *, result: R | None = None, error: BaseException | None = None) -> None:
    if fut.done():  # its caller was cancelled
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)  # type: ignore[arg-type]
