"""Waiting for the database and Temporal at start-up (``signoff api``, ``signoff worker``).

A process of a cluster is often started while a dependency is not answering yet: all of them
come up together, or one is restarted while PostgreSQL or the Temporal frontend restarts too. Such
a process used to exit at once (the store's first connection or Temporal's failed), and stayed down
unless an orchestrator started it again. Now it tries again with a backoff for
``SIGNOFF_STARTUP_WAIT_SECONDS``, saying each time what it waits for; past that it exits as before,
naming the dependency. Only "not reachable" is waited out: a schema newer than this signoff, a bad
setting or a refused credential end the start at once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from signoff.engine.errors import Unavailable
from signoff.engine.store.base import StoreUnavailable

log = logging.getLogger("signoff.startup")

T = TypeVar("T")

FIRST_PAUSE, LONGEST_PAUSE = 0.25, 5.0


async def when_reachable(what: str, attempt: Callable[[], Awaitable[T]], within: float) -> T:
    """``attempt()``'s result once it does not fail with "not reachable" (``StoreUnavailable``,
    ``Unavailable``), trying again with a doubling pause (up to 5 s) for ``within`` seconds; the
    last failure is raised past that. Anything else is raised at once."""
    deadline = time.monotonic() + within
    pause = FIRST_PAUSE
    while True:
        try:
            return await attempt()
        except (StoreUnavailable, Unavailable) as err:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            wait = min(pause, left)
            log.warning("waiting for %s (%s): trying again in %.1f s", what, err, wait)
            await asyncio.sleep(wait)
            pause = min(pause * 2, LONGEST_PAUSE)
