"""The job event log as Server-Sent Events. The log lives in the store, so any API replica can
serve (and resume) a stream: replay after Last-Event-ID, tail while the job is queued or
in progress, close at a pause or the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi.responses import StreamingResponse

from signoff.engine.errors import SignoffError
from signoff.engine.models import Event, JobStatus, User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store, StoreUnavailable
from signoff.service.access import visible_job
from signoff.service.feed import EventFeed

log = logging.getLogger("signoff.api.sse")

# how often an open stream asks whether the one who opened it may still see it, when nothing
# else made it ask (the default of SIGNOFF_STREAM_RECHECK_SECONDS); it asks before every frame
# that carries data too, and at once when the process's feed tells it (EventFeed.recheck)
RECHECK_SECONDS = 5.0

# a comment every so often while a stream has nothing to say (:func:`keepalive`)
KEEPALIVE_SECONDS = 15.0
KEEPALIVE = b": keep-alive\n\n"

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


async def job_events(store: Store, feed: EventFeed, job_id: str, *, after_seq: int = 0,
                     user_id: str | None = None) -> AsyncIterator[bytes]:
    """The job's log as SSE frames (keep-alives are :func:`sse_response`'s)."""
    async for events in follow_job(store, feed, job_id, after_seq=after_seq, user_id=user_id):
        if events:  # one chunk per batch: a stream's access is checked once per chunk with data
            yield b"".join(frame(ev) for ev in events)


class _Frames:
    """A stream's frames pulled one at a time, each in a task of its own, so that a wait for the
    next one can time out (or be woken) and the stream's own wait goes on undisturbed."""

    def __init__(self, stream: AsyncIterator[Any]) -> None:
        self.stream, self._frames = stream, stream.__aiter__()
        self.pending: asyncio.Future[Any] | None = None

    def next(self) -> asyncio.Future[Any]:
        """The frame under way (started if none is)."""
        if self.pending is None:
            self.pending = asyncio.ensure_future(self._frames.__anext__())
        return self.pending

    def take(self) -> Any:
        """The frame that came (StopAsyncIteration at the stream's end)."""
        finished, self.pending = self.next(), None
        return finished.result()

    async def close(self) -> None:
        """Stop the frame under way (the reader left, or may no longer read), then the stream."""
        if self.pending is not None:
            self.pending.cancel()
            await asyncio.wait({self.pending})
            if not self.pending.cancelled():
                self.pending.exception()  # retrieved: the stream ends either way
        await self.stream.aclose()  # type: ignore[attr-defined]


async def keepalive(stream: AsyncIterator[Any], every: float | None = None) -> AsyncIterator[Any]:
    """``stream``'s frames, and a keep-alive comment whenever ``every`` seconds
    (:data:`KEEPALIVE_SECONDS` unless given) pass without one, so that a proxy does not close a
    quiet stream and a reader that left is noticed by the write. The one keep-alive of every
    event stream (:func:`sse_response`): the streams themselves only say what happened."""
    every = KEEPALIVE_SECONDS if every is None else every
    frames = _Frames(stream)
    try:
        while True:
            done, _ = await asyncio.wait({frames.next()}, timeout=every)
            if not done:
                yield KEEPALIVE
                continue
            try:
                chunk = frames.take()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        await frames.close()


def sse_response(stream: AsyncIterator[Any], allowed: Callable[[], Awaitable[bool]], *, settings: Settings,
                 feed: EventFeed, user_id: str, media_type: str = "text/event-stream",
                 headers: dict[str, str] | None = None) -> StreamingResponse:
    """The answer of every event stream (a run's events, a stream-mode submit, AG-UI, the pages'
    live updates): ``stream``'s frames with a keep-alive every :data:`KEEPALIVE_SECONDS` of
    quiet (:func:`keepalive`), for as long as ``allowed()`` says its reader may see them
    (:func:`while_allowed`, every SIGNOFF_STREAM_RECHECK_SECONDS and at once when ``feed`` says
    ``user_id``'s access changed)."""
    frames = while_allowed(keepalive(stream), allowed, every=settings.stream_recheck_seconds, feed=feed,
                           user_id=user_id)
    return StreamingResponse(frames, media_type=media_type, headers={**SSE_HEADERS, **(headers or {})})


def _carries_data(chunk: bytes | str) -> bool:
    """Anything but an SSE comment (a keep-alive)."""
    return not (chunk[:1] == b":" if isinstance(chunk, bytes) else chunk[:1] == ":")


async def _still(allowed: Callable[[], Awaitable[bool]]) -> bool:
    """``allowed()``; a check that cannot say (the store away, an error) lets the stream go on."""
    try:
        return await allowed()
    except StoreUnavailable:
        return True
    except Exception:  # noqa: BLE001 - cannot tell now: ask again next time
        log.warning("a live stream's access check failed; asked again later", exc_info=True)
        return True


async def while_allowed(stream: AsyncIterator[Any], allowed: Callable[[], Awaitable[bool]], *,
                        every: float | None = None, feed: EventFeed | None = None,
                        user_id: str | None = None) -> AsyncIterator[Any]:
    """``stream``'s frames while ``allowed()`` says the one who opened it may still see them. It
    is asked before every frame that carries data (nothing is sent after a revoke, a sign-out or
    a share taken back), every ``every`` seconds (SIGNOFF_STREAM_RECHECK_SECONDS) while the
    stream waits, and at once when ``feed`` tells ``user_id``'s streams to
    (:meth:`EventFeed.recheck`): a stream whose reader may no longer see it ends then, not at its
    next frame. A check that cannot say (the store away, an error) lets the stream go on and
    asks again next time. The frames are pulled one at a time, each in a task of its own, so the
    checks can run while the stream waits."""
    period = RECHECK_SECONDS if every is None else every
    frames = _Frames(stream)
    with contextlib.ExitStack() as stack:
        told = stack.enter_context(feed.watch_access(user_id)) if feed is not None and user_id else asyncio.Event()
        try:
            while True:
                pending = frames.next()
                waiter = asyncio.ensure_future(told.wait())
                try:
                    done, _ = await asyncio.wait({pending, waiter}, timeout=period,
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if pending not in done:  # the period passed, or the feed told: ask now
                    told.clear()
                    if not await _still(allowed):
                        log.info("a live stream closed: its reader may no longer see it")
                        return
                    continue
                try:
                    chunk = frames.take()
                except StopAsyncIteration:
                    return
                if _carries_data(chunk) and not await _still(allowed):
                    log.info("a live stream closed before a frame: its reader may no longer see it")
                    return
                yield chunk
        finally:
            await frames.close()


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
