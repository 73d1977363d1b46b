"""The pages' live updates as Server-Sent Events, read from the store (so any API replica serves
them and a reconnect picks up where it was): the inbox's waiting set, and a run's or a
request's event log.

- The inbox: what waits for the person (``RunService.pending_for``, the same query as the page),
  compared each tick with what the page shows: ``add`` (the row's HTML) for a new pause,
  ``remove`` (with why, read from the run's event log) for a request decided, superseded or
  expired, ``count`` for the title.
- A run: ``change`` whenever its event log grows or its status changes, ``end`` once it is over
  and the log is drained; the page then reloads its regions.
- A request (a decision card): ``change`` when something happens to it (a vote, a claim),
  ``closed`` once it is decided, superseded, expired or its run ended.

Each stream sends a keep-alive comment every 15 s while nothing happens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from signoff.engine.models import JobStatus, User
from signoff.engine.store.base import Store
from signoff.service import RunService

from signoff.api.pages import views

CLOSING = frozenset({"human_input_decision", "run_cancelled", "run_timed_out", "run_failed", "end"})
KEEPALIVE = b": keep-alive\n\n"


def sse(event: str, data: dict[str, Any]) -> bytes:
    body = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
    return f"event: {event}\ndata: {body}\n\n".encode()


class Ticker:
    """Sleeps ``poll`` seconds; says when a keep-alive is due."""

    def __init__(self, poll: float, keepalive: float = 15.0) -> None:
        self.poll, self.keepalive, self.idle = poll, keepalive, 0.0

    async def wait(self) -> bool:
        await asyncio.sleep(self.poll)
        self.idle += self.poll
        if self.idle >= self.keepalive:
            self.idle = 0.0
            return True
        return False

    def sent(self) -> None:
        self.idle = 0.0


async def removal_reason(store: Store, names: views.Names, job_id: str, request_id: str) -> str:
    job = await store.get_job(job_id)
    if job is None:
        return "Gone"
    view = await views.request_view(store, names, job, request_id)
    return view.outcome.title if view is not None else "Gone"


async def inbox_stream(service: RunService, user: User, *, flow: str | None, session: str | None, kind: str | None,
                       add_rows: bool, render_row: Callable[[views.InboxItem], Awaitable[str]],
                       poll: float = 0.5) -> AsyncIterator[bytes]:
    names = views.Names(service.store)
    shown: dict[str, str] = {}  # request id -> job id
    ticker = Ticker(poll)
    first = True
    total = -1
    while True:
        jobs = await service.pending_for(user)
        everything = await views.inbox_items(names, jobs, user.id)
        items = views.filter_inbox(everything, flow=flow, session=session, kind=kind)
        current = {i.key: i for i in items}
        sent = False
        if first:
            yield sse("snapshot", {"ids": list(current), "count": len(current), "total": len(everything)})
            first = sent = True
        for key, item in current.items():
            if key not in shown and add_rows:
                yield sse("add", {"id": key, "paused_at": views.iso(item.request.paused_at),
                                  "html": await render_row(item)})
                sent = True
        for key, job_id in shown.items():
            if key not in current:
                why = await removal_reason(service.store, names, job_id, key)
                yield sse("remove", {"id": key, "why": why})
                sent = True
        if (set(current) != set(shown) or len(everything) != total) and not first:
            yield sse("count", {"count": len(current), "total": len(everything)})
        total = len(everything)
        shown = {k: i.job.job_id for k, i in current.items()}
        first = False
        if sent:
            ticker.sent()
        if await ticker.wait():
            yield KEEPALIVE


async def run_stream(store: Store, job_id: str, *, after_seq: int, status: str | None,
                     poll: float = 0.25) -> AsyncIterator[bytes]:
    seq, last_status = after_seq, status
    ticker = Ticker(poll)
    while True:
        events = await store.read_events(job_id, after_seq=seq)
        job = await store.get_job(job_id)
        if job is None:
            yield sse("end", {"status": "gone"})
            return
        if events:
            seq = events[-1].seq
        if events or job.status.value != last_status:
            last_status = job.status.value
            yield sse("change", {"status": last_status, "seq": seq})
            ticker.sent()
        if job.status.terminal and not events:
            yield sse("end", {"status": job.status.value, "seq": seq})
            return
        if await ticker.wait():
            yield KEEPALIVE


async def request_stream(store: Store, job_id: str, request_id: str, *, poll: float = 0.25) -> AsyncIterator[bytes]:
    seq = 0
    ticker = Ticker(poll)
    waiting_seen = True
    while True:
        events = await store.read_events(job_id, after_seq=seq)
        if events:
            seq = events[-1].seq
        job = await store.get_job(job_id)
        if job is None:
            yield sse("closed", {})
            return
        waiting = job.status == JobStatus.suspended and job.pending is not None and \
            job.pending.request_id == request_id
        closing = any(ev.event in CLOSING and ev.data.get("request_id", request_id) == request_id for ev in events)
        if job.status.terminal or closing and not waiting:
            yield sse("closed", {"status": job.status.value})
            return
        if waiting != waiting_seen or any(ev.event == "human_input_vote" for ev in events):
            waiting_seen = waiting
            yield sse("change", {"status": job.status.value})
            ticker.sent()
        if await ticker.wait():
            yield KEEPALIVE
