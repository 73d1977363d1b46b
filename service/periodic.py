"""Run a coroutine function now and then every few seconds while a block runs (the sweeps of
the API and the worker). A failing round is logged and the next one comes as planned."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger("signoff.periodic")


@contextlib.asynccontextmanager
async def periodically(fn: Callable[[], Awaitable[object]], every: float, *, name: str) -> AsyncIterator[None]:
    async def forever() -> None:
        while True:
            try:
                await fn()
            except Exception as err:  # noqa: BLE001 - a database or Temporal blip: next round
                log.warning("%s failed: %r", name, err)
            await asyncio.sleep(every)

    task = asyncio.create_task(forever(), name=f"signoff-{name}")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
