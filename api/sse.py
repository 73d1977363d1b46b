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


async def job_events(store: Store, job_id: str, *, after_seq: int = 0, poll_seconds: float = 0.1,
                     keepalive_seconds: float = 15.0) -> AsyncIterator[bytes]:
    seq = after_seq
    idle = 0.0
    while True:
        events = await store.read_events(job_id, after_seq=seq)
        for ev in events:
            seq = ev.seq
            yield frame(ev)
        if events:
            idle = 0.0
            continue
        job = await store.get_job(job_id)
        if job is None or job.status not in ACTIVE:
            # Events are written before the status changes: drain once more, then close.
            for ev in await store.read_events(job_id, after_seq=seq):
                seq = ev.seq
                yield frame(ev)
            return
        await asyncio.sleep(poll_seconds)
        idle += poll_seconds
        if idle >= keepalive_seconds:
            idle = 0.0
            yield b": keep-alive\n\n"
