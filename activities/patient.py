"""The store as the activities use it: patient with a database that is away for a while.

A call the database could not take (:class:`~signoff.engine.store.base.StoreUnavailable`: down,
restarting, refusing connections) is sent again with backoff, heartbeating meanwhile, for up to
``SIGNOFF_STORE_OUTAGE_SECONDS`` and never past the activity's own start-to-close timeout. So an
outage of minutes holds a run still instead of failing it, and, what matters most, the writes a
layer makes *after* its side effects (the HTTP call it sent, the model it paid for) wait for the
database instead of failing the activity, whose retry would send that call again.

Only unavailability is waited out: any other store error (a conflict, a bad value) is raised at
once, as before. A call is sent again when the database could not take it *or* the connection was
cut under it; in the second case a write may have committed before the cut, so what is sent again
must be safe to send twice, as the activities' writes are (conditional updates, upserts, events
with dedupe keys, claims under a token: docs/store.md); an event appended without a dedupe key
(progress notes) may then show twice in the log, still gap-free. One attempt never outlasts what
is left of the wait: a call hanging on a connection that went quiet ends as unavailable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, Callable

from temporalio import activity

from signoff.engine.models import as_utc
from signoff.engine.store.base import Store, StoreUnavailable
from signoff.engine.store.proxy import StoreProxy

log = logging.getLogger("signoff.activities")

__all__ = ["PatientStore"]


class PatientStore(StoreProxy):
    """``store``, each coroutine method waiting out StoreUnavailable (module docstring)."""

    def __init__(self, store: Store, outage_seconds: float, *, max_delay: float = 2.0) -> None:
        super().__init__(store)
        self._outage = outage_seconds
        self._max_delay = max_delay  # well under a layer's heartbeat timeout (5 s)

    def _wrap(self, name: str) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + min(self._outage, _left_in_activity())
            delay, waited = 0.2, False
            beats = _beats()
            while True:
                try:
                    coro = getattr(self._store, name)(*args, **kwargs)
                    left = max(0.1, deadline - time.monotonic())
                    try:
                        result = await asyncio.wait_for(_heartbeating(coro, name) if beats else coro,
                                                        None if left == float("inf") else left)
                    except asyncio.TimeoutError:
                        raise StoreUnavailable(f"the database did not answer {name} in time") from None
                except StoreUnavailable as err:
                    if time.monotonic() + delay >= deadline:
                        raise
                    if not waited:
                        log.warning("the database is not available (%s); %s waits for it", err, name)
                        waited = True
                    _heartbeat(f"waiting for the database ({name})")
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._max_delay)
                    continue
                if waited:
                    log.warning("the database is back; %s went through", name)
                return result

        return call


def _left_in_activity() -> float:
    """Seconds left before the running activity's start-to-close timeout (a second of margin);
    infinity outside an activity or without one."""
    if not activity.in_activity():
        return float("inf")
    info = activity.info()
    if not info.start_to_close_timeout:
        return float("inf")
    elapsed = (datetime.now(timezone.utc) - as_utc(info.started_time)).total_seconds()
    return max(0.0, info.start_to_close_timeout.total_seconds() - elapsed - 1.0)


def _beats() -> bool:
    """Whether the running activity must heartbeat to stay alive (a layer's: its heartbeat
    timeout is seconds, and a call may wait longer for a connection while the database is away)."""
    return activity.in_activity() and bool(activity.info().heartbeat_timeout)


async def _heartbeating(coro: Any, name: str, every: float = 1.0) -> Any:
    """``coro``'s result, heartbeating every ``every`` seconds while it has none yet."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            _heartbeat(f"waiting for the database ({name})")
    finally:
        if not task.done():
            task.cancel()


def _heartbeat(detail: str) -> None:
    if activity.in_activity():
        try:
            activity.heartbeat(detail)
        except RuntimeError:  # not an activity that may heartbeat (local): nothing to keep alive
            pass
