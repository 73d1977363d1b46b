"""One asyncio rule the engine and its stores share: a write that must not be cut in half by a
cancel (:func:`to_the_end`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def to_the_end(write: Awaitable[T]) -> T:
    """Run ``write`` to its end, even when the task is cancelled meanwhile (a stop): a cancel in
    the middle would leave half of a run's writes (how an inline run ended, rolled back: the job
    ``in_progress`` until the sweep; a pause's checkpoint written and not yet checked against
    the job that ended meanwhile: an ended run's checkpoint, for good). The cancel is honoured
    (raised) once they are written; their own error first, if they failed."""
    task = asyncio.ensure_future(write)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        task.result()
        raise asyncio.CancelledError
    return task.result()
