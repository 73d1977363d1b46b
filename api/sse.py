"""The job event log as Server-Sent Events. The log lives in the store, so any API replica can
serve (and resume) a stream: replay after Last-Event-ID, tail while the job is queued or
in progress, close at a pause or the end."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

from signoff.engine.models import Event, JobStatus
from signoff.engine.store.base import Store

ACTIVE = frozenset({JobStatus.queued, JobStatus.in_progress})
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_RESPONSES = {200: {"description": "Server-Sent Events: `id: {seq}` + `data: {event, data, seq}`",
                       "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def frame(ev: Event) -> bytes:
    data = json.dumps({"event": ev.event, "data": ev.data, "seq": ev.seq}, default=str, separators=(",", ":"))
    return f"id: {ev.seq}\ndata: {data}\n\n".encode()


async def follow_job(store: Store, job_id: str, *, after_seq: int = 0, poll_seconds: float = 0.1
                     ) -> AsyncIterator[list[Event]]:
    """The job's log as it grows, read from the store: each batch of events after ``after_seq``,
    and an empty batch each time a poll found none (a tick: when a follower may send a keep-alive
    or look at anything else of the run). Ends once the job is neither queued nor in progress
    and its log is drained. The one poller of a job's events (this SSE stream, AG-UI's)."""
    seq = after_seq
    while True:
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
        await asyncio.sleep(poll_seconds)


async def job_events(store: Store, job_id: str, *, after_seq: int = 0, poll_seconds: float = 0.1,
                     keepalive_seconds: float = 15.0) -> AsyncIterator[bytes]:
    idle = 0.0
    async for events in follow_job(store, job_id, after_seq=after_seq, poll_seconds=poll_seconds):
        for ev in events:
            yield frame(ev)
        if events:
            idle = 0.0
            continue
        idle += poll_seconds
        if idle >= keepalive_seconds:
            idle = 0.0
            yield b": keep-alive\n\n"
