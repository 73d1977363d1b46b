"""The pages' live updates as Server-Sent Events, read from the store (so any API replica serves
them and a reconnect picks up where it was): the inbox's waiting set, and a run's or a
request's event log.

- The inbox: what waits for the person (``RunService.inbox_entries``: the page's query, as keys
  and filter columns, no job read), read by one ``InboxWatcher`` per process when the store's event log says something happened
  that concerns the person (once per person, however many inboxes are open), and compared by
  each stream with what its page shows: ``add`` (the row's HTML) for a new pause, ``remove``
  (with why, read from the run's event log) for a request decided, superseded or expired,
  ``count`` for the title.
- A run: ``change`` whenever its event log grows or its status changes, ``end`` once it is over
  and the log is drained; the page then reloads its regions.
- A request (a decision card): ``change`` when something happens to it (a vote, a claim),
  ``closed`` once it is decided, superseded, expired or its run ended.

Everything is woken by the process's one tail of the store's events (service/feed.py), never by
a poll of its own; each reads again after a few seconds whatever the tail says (a status that
changes with no event, a tail that lost its place). Each stream counts against the person's
SIGNOFF_MAX_STREAMS_PER_USER; its keep-alives are api/sse.py's (sse_response), as for every
event stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

from signoff.engine.access import current_approvers
from signoff.engine.models import EventNote, InboxEntry, User
from signoff.engine.store.base import Store
from signoff.service import RunService
from signoff.service.feed import EventFeed

from signoff.api.pages import formatting, views, waiting

log = logging.getLogger(__name__)

CLOSING = frozenset({"human_input_decision", "run_cancelled", "run_timed_out", "run_failed", "end"})


def sse(event: str, data: dict[str, Any]) -> bytes:
    body = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
    return f"event: {event}\ndata: {body}\n\n".encode()


async def removal_reason(store: Store, names: views.Names, job_id: str, request_id: str) -> str:
    job = await store.get_job(job_id)
    if job is None:
        return "Gone"
    view = await views.request_view(store, names, job, request_id)
    return view.outcome.title if view is not None else "Gone"


# what can change someone's inbox: a pause, its decision, a vote, an escalation, a run's end
INBOX_EVENTS = frozenset({"human_input_required", "human_input_decision", "human_input_vote", "human_input_expired",
                          "human_input_escalated", "run_cancelled", "run_timed_out", "run_failed", "end"})


class InboxWatcher:
    """The inbox streams' one reader per process: a single task that, while any inbox is open,
    follows every run's events (the process's event feed) and, when one can change an inbox,
    reads what waits for the people it concerns (the run's owner, its request's approvers, anyone
    whose inbox shows the run), once per person however many of their pages are open, and hands
    the items to each of that person's streams. Every ``safety`` seconds, and when the feed may
    have missed events, it reads every open inbox. A stream that is slow to read only ever gets
    the latest items (a queue of one)."""

    def __init__(self, service: RunService, safety: float = 10.0) -> None:
        self.service, self.safety = service, safety
        self._people: dict[str, tuple[User, set[asyncio.Queue[list[InboxEntry]]]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # the task follows the feed: what commits now reaches it
        self._last: dict[str, tuple[tuple[str, str], ...]] = {}  # what each person's streams were last given
        self._shows: dict[str, set[str]] = {}  # the runs each open inbox was last read with
        self._reading: dict[str, asyncio.Future[list[InboxEntry]]] = {}  # a read under way, per person
        self.reads = 0  # reads of an inbox (tests)

    @property
    def streams(self) -> int:
        return sum(len(queues) for _, queues in self._people.values())

    @contextlib.asynccontextmanager
    async def subscribe(self, user: User) -> AsyncIterator[asyncio.Queue[list[InboxEntry]]]:
        """The stream's queue; returns once the watcher follows the feed, so a stream that reads
        its inbox after this misses no change."""
        queue: asyncio.Queue[list[InboxEntry]] = asyncio.Queue(maxsize=1)
        _, queues = self._people.get(user.id, (user, set()))
        self._last.pop(user.id, None)  # a new stream read for itself: the next read goes to everyone
        queues.add(queue)
        self._people[user.id] = (user, queues)  # the latest User (its groups) for the next read
        if self._task is None or self._task.done():
            self._ready.clear()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="signoff-inbox-watcher")
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ready.wait()), 10)
            yield queue
        finally:
            queues.discard(queue)
            if not queues and self._people.get(user.id, (None, None))[1] is queues:
                del self._people[user.id]
                self._last.pop(user.id, None)
                self._shows.pop(user.id, None)
            if not self._people and self._task is not None:
                self._task.cancel()  # no open inbox: nothing to watch (the next one starts another)
                self._task = None

    async def items(self, user: User) -> list[InboxEntry]:
        """What waits for ``user``; one read at a time per person: a stream opening while a read
        of that person's inbox is under way (another stream's, the task's) shares it, so 100
        inboxes opened at once cost one read, not 100."""
        reading = self._reading.get(user.id)
        if reading is None:
            reading = self._reading[user.id] = asyncio.ensure_future(self._read(user))
            reading.add_done_callback(lambda done: self._reading.pop(user.id, None)
                                      if self._reading.get(user.id) is done else None)
        return await asyncio.shield(reading)  # a stream that closes does not cancel the others' read

    async def _read(self, user: User) -> list[InboxEntry]:
        self.reads += 1
        items = await self.service.inbox_entries(user)  # keys only: a row is read when it is drawn
        if user.id in self._people:
            self._shows[user.id] = {i.job_id for i in items}
        return items

    async def _concerned(self, notes: list[EventNote]) -> set[str]:
        """The open inboxes the notes can change: each run's owner, the approvers of what it
        waits for, and whoever's inbox shows it."""
        jobs = {n.job_id for n in notes if n.event in INBOX_EVENTS}
        people: set[str] = set()
        for job_id in jobs:
            people.update(u for u, shown in self._shows.items() if job_id in shown)
            job = await self.service.store.get_job(job_id)
            if job is None:
                continue
            people.add(job.user_id)
            people.update(await self.service.access.people(await current_approvers(self.service.store, job)))
        return people & set(self._people)

    async def _run(self) -> None:
        async with self.service.feed.follow(None) as follower:
            self._ready.set()
            while self._people:
                woken = await follower.wait(self.safety)
                notes, missed = follower.take()
                try:
                    concerned = set(self._people) if missed or not woken else await self._concerned(notes)
                except Exception:  # the store is away for a moment: read everyone's next time
                    log.warning("inbox watcher: finding whom events concern failed", exc_info=True)
                    continue
                # a vote changes no inbox's set, but the header's count leaves out what its person
                # voted on: the streams of anyone whose inbox shows that run are given it again
                voted = {n.job_id for n in notes if n.event == "human_input_vote"}
                for user_id in concerned:
                    entry = self._people.get(user_id)
                    if entry is None or not entry[1]:
                        continue
                    user, queues = entry
                    try:
                        items = await self.items(user)
                    except Exception:  # the store is away for a moment: the streams keep what they have
                        log.warning("inbox watcher: reading %s's inbox failed", user_id, exc_info=True)
                        continue
                    mark = tuple((i.request_id, i.job_id) for i in items)
                    if self._last.get(user_id) == mark and not voted & self._shows.get(user_id, set()):
                        continue  # nothing changed for this person: their streams sleep on
                    self._last[user_id] = mark
                    for queue in list(queues):
                        if queue.full():
                            queue.get_nowait()
                        queue.put_nowait(items)


MAX_SHOWN = 60  # the ids a page says it shows (a page's rows and those waiting on others)


async def inbox_stream(watcher: InboxWatcher, user: User, *, flow: str | None, session: str | None, kind: str | None,
                       add_rows: bool, render_row: Callable[[waiting.InboxItem], Awaitable[str]],
                       since: datetime | None = None, shown_ids: list[str] | None = None,
                       header_count: Callable[[], Awaitable[int | str]] | None = None) -> AsyncIterator[bytes]:
    """What changes on one open inbox page, never the whole waiting set (issue 29: at 10,000
    waiting the first snapshot was ~0.5 MB of ids): ``shown_ids`` are the rows the page shows
    (at most MAX_SHOWN); the snapshot says which of them still wait, with the counts; ``add``
    brings a request paused since (``since``: when the page read its rows, less a margin; only on
    the first page, ``add_rows``), ``remove`` a shown or added row that left (with why), ``count``
    the counts when they change. The set is compared by its keys, here in the process; only a
    row to add is read and drawn. ``header_count``: the header's count (without what the person
    voted on), sent as ``total``."""
    store = watcher.service.store
    wanted = list(dict.fromkeys((shown_ids or [])[:MAX_SHOWN]))  # in the page's order
    visible: dict[str, str] = {}  # request id -> job id: the rows the page has now
    seen: set[str] = set()  # every waiting id of the last read (kept here, never sent)
    first = True
    last_counts: tuple[Any, Any] | None = None
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(watcher.service.feed.slot(user.id))  # one of the person's live streams
        # what changes after the read below reaches the queue
        updates = await stack.enter_async_context(watcher.subscribe(user))
        everything = await watcher.items(user)  # the first snapshot, at once
        while True:
            items = waiting.filter_inbox(everything, flow=flow, session=session, kind=kind)
            current = {i.request_id: i for i in items}
            total = await header_count() if header_count is not None else len(everything)
            counts = (len(current), total)
            if first:
                visible = {k: current[k].job_id for k in wanted if k in current}
                yield sse("snapshot", {"ids": list(visible), "count": counts[0], "total": counts[1]})
            names = views.Names(store)
            for key, entry in current.items():
                if key in seen or key in visible or not add_rows:
                    continue
                if first and since is not None and (formatting.aware(entry.paused_at) or since) < since:
                    continue  # on a later page of the inbox, or shown: not this page's change
                row = await waiting.inbox_item(names, store, entry, user.id)
                html = await render_row(row) if row is not None else ""
                if html:  # (None: decided since the read, its removal comes with the next one; "": not the page's)
                    visible[key] = entry.job_id
                    yield sse("add", {"id": key, "paused_at": formatting.iso(entry.paused_at), "html": html})
            for key, job_id in list(visible.items()):
                if key not in current:
                    del visible[key]
                    why = await removal_reason(store, names, job_id, key)
                    yield sse("remove", {"id": key, "why": why})
            if counts != last_counts and not first:
                yield sse("count", {"count": counts[0], "total": counts[1]})
            last_counts = counts
            seen = set(current)
            first = False
            everything = await updates.get()


async def count_stream(watcher: InboxWatcher, user: User,
                       header_count: Callable[[], Awaitable[int | str]]) -> AsyncIterator[bytes]:
    """The header's Inbox count on any page (issue 29): ``count`` at once and whenever it changes,
    woken by the same watcher as the inbox (one read per person however many pages are open)."""
    last: Any = None
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(watcher.service.feed.slot(user.id))
        updates = await stack.enter_async_context(watcher.subscribe(user))
        while True:
            total = await header_count()
            if total != last:
                last = total
                yield sse("count", {"total": total})
            await updates.get()


async def run_stream(store: Store, feed: EventFeed, job_id: str, *, after_seq: int, status: str | None,
                     user_id: str | None = None, safety: float = 2.0) -> AsyncIterator[bytes]:
    """``change`` when the run's log grows or its status changes, ``end`` once it is over. The
    store is read when the event feed says the run got an event, and every ``safety`` seconds (a
    status that changes with no event, e.g. ``queued`` → ``in_progress``, shows within that)."""
    seq, last_status = after_seq, status
    async with feed.follow(job_id, user_id=user_id) as follower:
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
            if job.status.terminal and not events:
                yield sse("end", {"status": job.status.value, "seq": seq})
                return
            await follower.wait(safety)


async def request_stream(store: Store, feed: EventFeed, job_id: str, request_id: str, *, user_id: str | None = None,
                         safety: float = 5.0) -> AsyncIterator[bytes]:
    """``change`` when something happens to the request (a vote, a claim), ``closed`` once it is
    decided, superseded, expired or its run ended; read when the run gets an event (and every
    ``safety`` seconds)."""
    seq = 0
    waiting_seen = True
    async with feed.follow(job_id, user_id=user_id) as follower:
        while True:
            events = await store.read_events(job_id, after_seq=seq)
            if events:
                seq = events[-1].seq
            job = await store.get_job(job_id)
            if job is None:
                yield sse("closed", {})
                return
            waiting = job.waits_for(request_id)
            closing = any(ev.event in CLOSING and ev.data.get("request_id", request_id) == request_id for ev in events)
            if job.status.terminal or closing and not waiting:
                yield sse("closed", {"status": job.status.value})
                return
            if waiting != waiting_seen or any(ev.event == "human_input_vote" for ev in events):
                waiting_seen = waiting
                yield sse("change", {"status": job.status.value})
            await follower.wait(safety)
