"""The job event log as Server-Sent Events. The log lives in the store, so any API replica can
serve (and resume) a stream: replay after Last-Event-ID, tail while the job is queued or
in progress, close at a pause or the end."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator, Awaitable, Callable

from signoff.engine.errors import SignoffError
from signoff.engine.models import Event, JobStatus, User
from signoff.engine.store.base import Store, StoreUnavailable
from signoff.service.access import visible_job
from signoff.service.feed import EventFeed

log = logging.getLogger("signoff.api.sse")

# how often an open stream asks whether the one who opened it may still see it (a revoked key,
# an ended page session, a share taken back end it within this and a keep-alive)
RECHECK_SECONDS = 30.0

ACTIVE = frozenset({JobStatus.queued, JobStatus.in_progress})
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_RESPONSES = {200: {"description": "Server-Sent Events: `id: {seq}` + `data: {event, data, seq}`",
                       "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def frame(ev: Event) -> bytes:
    data = json.dumps({"event": ev.event, "data": ev.data, "seq": ev.seq}, default=str, separators=(",", ":"))
    return f"id: {ev.seq}\ndata: {data}\n\n".encode()


async def follow_job(store: Store, feed: EventFeed, job_id: str, *, after_seq: int = 0, user_id: str | None = None,
                     tick: float = 1.0, safety: float = 15.0) -> AsyncIterator[list[Event]]:
    """The job's log as it grows, read from the store: each batch of events after ``after_seq``,
    and an empty batch every ``tick`` seconds while none comes (when a follower may send a
    keep-alive or look at anything else of the run). Ends once the job is neither queued nor in
    progress and its log is drained. The store is read when the process's event feed says the
    job got an event, and every ``safety`` seconds whatever it says (a note lost with the
    store's tail costs that much, never an event). The one follower of a job's events (this SSE
    stream, AG-UI's); ``user_id`` counts it against that user's streams (TOO_MANY_STREAMS)."""
    seq = after_seq
    clock = asyncio.get_running_loop().time
    async with feed.follow(job_id, user_id=user_id) as follower:
        read_at = -safety  # read at once
        woken = True
        while True:
            if woken or clock() - read_at >= safety:
                read_at = clock()
                events = await store.read_events(job_id, after_seq=seq)
                if events:
                    seq = events[-1].seq
                    yield events
                    continue
                job = await store.get_job(job_id)
                if job is None or job.status not in ACTIVE:
                    # Events are written before the status changes: drain once more, then close.
                    while events := await store.read_events(job_id, after_seq=seq):
                        seq = events[-1].seq
                        yield events
                    return
            yield []
            woken = await follower.wait(min(tick, max(0.001, read_at + safety - clock())))


async def job_events(store: Store, feed: EventFeed, job_id: str, *, after_seq: int = 0, user_id: str | None = None,
                     keepalive_seconds: float = 15.0) -> AsyncIterator[bytes]:
    clock = asyncio.get_running_loop().time
    sent = clock()
    async for events in follow_job(store, feed, job_id, after_seq=after_seq, user_id=user_id):
        for ev in events:
            yield frame(ev)
        if events:
            sent = clock()
        elif clock() - sent >= keepalive_seconds:
            sent = clock()
            yield b": keep-alive\n\n"


async def while_allowed(stream: AsyncIterator[bytes], allowed: Callable[[], Awaitable[bool]], *,
                        every: float | None = None) -> AsyncIterator[bytes]:
    """``stream``'s frames while ``allowed()`` says the one who opened it may still see them,
    asked every ``every`` seconds (RECHECK_SECONDS) between frames: a stream sends at least a
    keep-alive every 15 s, so one whose key was revoked, whose page session ended or whose share
    was taken back closes within that. A check that cannot say (the store away, an error) lets
    the stream go on and asks again next time."""
    clock = asyncio.get_running_loop().time
    checked = clock()
    try:
        async for chunk in stream:
            if clock() - checked >= (RECHECK_SECONDS if every is None else every):
                checked = clock()
                try:
                    still = await allowed()
                except StoreUnavailable:
                    still = True
                except Exception:  # noqa: BLE001 - cannot tell now: ask again next time
                    log.warning("a live stream's access check failed; asked again later", exc_info=True)
                    still = True
                if not still:
                    log.info("a live stream closed: its reader may no longer see it")
                    return
            yield chunk
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


def key_still_sees(store: Store, key: str | None, user: User, job_id: str | None) -> Callable[[], Awaitable[bool]]:
    """For :func:`while_allowed`: the request's API key still names ``user`` and they may still
    see ``job_id`` (None: only the key)."""
    async def allowed() -> bool:
        again = await store.user_for_api_key(key) if key else None
        if again is None or again.id != user.id:
            return False
        if job_id is not None:
            try:
                await visible_job(store, again, job_id)
            except StoreUnavailable:
                raise
            except SignoffError:
                return False
        return True

    return allowed
