"""One tail of the store's events per process, fanned out to everything that follows a job live.

The event log stays per job (gap-free ``seq``, DESIGN §6) and every follower still reads its
own job's log from the store; what the feed saves is the polling. One task per process reads
:meth:`Store.tail_events` (PostgreSQL: LISTEN/NOTIFY; SQLite: one indexed read of the events
table every few tens of milliseconds, woken at once by this process's own commits; memory: in
process) and wakes the followers of each job that got an event. A follower that is woken
reads; one that is not sleeps, however many are open: 200 idle ``/events`` streams cost the
store nothing but their rare safety reads, where each used to poll its job ten times a second.

Followers: ``/api/v2/workflows/{id}/events`` and AG-UI (:func:`signoff.api.sse.follow_job`), a
sync submit waiting for its pause or end (:func:`signoff.service.backend.poll_job`), the pages'
run and card streams, and the inbox watcher, which follows every job (``follow(None)``) and
reads the inboxes of the people an event concerns.

Nothing is lost when the tail is: a follower that was not woken still reads after its
``safety`` seconds, and when the tail lost its place (the store went away, a reconnect) every
follower is woken once the new tail is in place, so it reads again what it shows.

A person has at most ``max_per_user`` followers open at once in this process (429
``TOO_MANY_STREAMS`` beyond), so one user cannot hold the process's streams.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator

from signoff.engine.errors import SignoffError
from signoff.engine.models import EventNote
from signoff.engine.store.base import ACCESS_CHANGED, ACCESS_NOTES, Store

log = logging.getLogger("signoff.feed")

__all__ = ["EventFeed", "Follower", "TooManyStreams"]


class TooManyStreams(SignoffError):
    """Too many live streams are open for this user; close some (other tabs, clients) first."""

    code = "TOO_MANY_STREAMS"


class Follower:
    """What one live stream waits on: woken by a note of its job (every job's, for ``job_id``
    None), or when notes may have been missed (``missed``: read everything again)."""

    keep = 10_000  # notes kept for a follower of every job between takes; more: it missed some

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id
        self._woken = asyncio.Event()
        self._notes: list[EventNote] = []
        self._missed = False
        self.wakes = 0  # how often it was woken (tests, benches)

    def tell(self, notes: list[EventNote] | None) -> None:
        if notes is None:
            self._missed = True
        elif self.job_id is None:  # one that follows everything keeps what it was told
            if len(self._notes) + len(notes) > self.keep:  # not taken for long: it reads everything
                self._notes, self._missed = [], True
            elif not self._missed:
                self._notes.extend(notes)
        self.wakes += 1
        self._woken.set()

    async def wait(self, timeout: float | None) -> bool:
        """Until woken (True) or ``timeout`` seconds (False)."""
        if not self._woken.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout)
        woken = self._woken.is_set()
        self._woken.clear()
        return woken

    def take(self) -> tuple[list[EventNote], bool]:
        """The notes told since the last take (``follow(None)`` only) and whether some may have
        been missed."""
        notes, missed = self._notes, self._missed
        self._notes, self._missed = [], False
        return notes, missed


class EventFeed:
    """The process's one tail of the store, started by the first follower and stopped
    ``linger`` seconds after the last one left."""

    hold_seconds = 10.0  # a stream check()ed for is counted this long before it opens

    def __init__(self, store: Store, *, max_per_user: int = 100, linger: float = 30.0,
                 ready_timeout: float = 5.0) -> None:
        self.store = store
        self.max_per_user = max_per_user
        self.linger = linger
        self.ready_timeout = ready_timeout
        self._by_job: dict[str, set[Follower]] = {}
        self._everything: set[Follower] = set()
        self._per_user: dict[str, int] = {}
        self._held: dict[str, collections.deque[float]] = {}  # check()ed, not yet followed: when
        self._watching: dict[str, set[asyncio.Event]] = {}  # per user: set to make their streams re-check access
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._idle: asyncio.TimerHandle | None = None
        self.tails = 0  # tails started (tests: one per process, however many followers)

    @property
    def followers(self) -> int:
        return sum(len(f) for f in self._by_job.values()) + len(self._everything)

    def streams_of(self, user_id: str) -> int:
        return self._per_user.get(user_id, 0)

    def check(self, user_id: str) -> None:
        """Raise TooManyStreams now when ``user_id`` has no stream left (before an answer starts
        streaming: its status can still be a 429), else hold one for the stream this answer
        starts: its ``follow`` (or ``slot``) takes the held one. Held ones count at once, so a
        burst of requests cannot all pass before the first stream opens; one not taken within
        ``hold_seconds`` (the client went before its stream started) is let go."""
        held = self._held.setdefault(user_id, collections.deque())
        now = time.monotonic()
        while held and held[0] < now - self.hold_seconds:
            held.popleft()
        if self._per_user.get(user_id, 0) + len(held) >= self.max_per_user:
            if not held:
                self._held.pop(user_id, None)
            raise TooManyStreams(f"At most {self.max_per_user} live streams may be open at once per user "
                                 "(SIGNOFF_MAX_STREAMS_PER_USER); close others first")
        held.append(now)

    @contextlib.contextmanager
    def watch_access(self, user_id: str) -> Iterator[asyncio.Event]:
        """An event that :meth:`recheck` sets for ``user_id``: a live stream waits on it beside its
        frames and asks whether its reader may still see it when it is set (api/sse.py)."""
        told = asyncio.Event()
        self._watching.setdefault(user_id, set()).add(told)
        self._start()  # the tail brings the access notes of other processes (a revoke by the CLI)
        try:
            yield told
        finally:
            group = self._watching.get(user_id)
            if group is not None:
                group.discard(told)
                if not group:
                    del self._watching[user_id]
            self._linger()

    def recheck(self, user_id: str) -> int:
        """Tell every live stream of ``user_id`` in this process to check its access now (a share
        taken back, a page session ended): one that may no longer see what it shows ends at once,
        not at its next periodic check. Returns how many were told."""
        group = self._watching.get(user_id, set())
        for told in group:
            told.set()
        return len(group)

    @contextlib.contextmanager
    def slot(self, user_id: str | None) -> Iterator[None]:
        """Count one live stream of ``user_id`` while inside: the one ``check`` held for it, or
        else a new one (TooManyStreams when none is left); ``follow`` takes one, a stream that
        follows through another reader (an inbox) takes its own."""
        if user_id is None:
            yield
            return
        if not self._held.get(user_id):
            self.check(user_id)  # none held for it: hold one now (or TooManyStreams)
        held = self._held[user_id]
        held.popleft()
        if not held:
            del self._held[user_id]
        self._per_user[user_id] = self._per_user.get(user_id, 0) + 1
        try:
            yield
        finally:
            left = self._per_user.get(user_id, 1) - 1
            if left > 0:
                self._per_user[user_id] = left
            else:
                self._per_user.pop(user_id, None)

    @contextlib.asynccontextmanager
    async def follow(self, job_id: str | None, *, user_id: str | None = None) -> AsyncIterator[Follower]:
        """Follow ``job_id`` (every job: None). Returns once the tail is in place (or after
        ``ready_timeout`` when the store is away: the follower's safety reads then carry it), so
        whatever commits after this returns wakes the follower: read after entering, then wait."""
        with self.slot(user_id):
            follower = Follower(job_id)
            (self._everything if job_id is None else self._by_job.setdefault(job_id, set())).add(follower)
            try:
                self._start()
                if not self._ready.is_set():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(self._ready.wait()), self.ready_timeout)
                yield follower
            finally:
                if job_id is None:
                    self._everything.discard(follower)
                else:
                    group = self._by_job.get(job_id)
                    if group is not None:
                        group.discard(follower)
                        if not group:
                            del self._by_job[job_id]
                self._linger()

    def _linger(self) -> None:
        """With nobody following or watching, stop the tail after ``linger`` seconds."""
        if not self.followers and not self._watching:
            if self._idle is not None:
                self._idle.cancel()
            self._idle = asyncio.get_running_loop().call_later(self.linger, self._stop_if_idle)

    def _start(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._task is None or self._task.done():
            self._ready.clear()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="signoff-event-feed")

    def _stop_if_idle(self) -> None:
        self._idle = None
        if not self.followers and not self._watching and self._task is not None:
            self._task.cancel()
            self._task = None

    async def close(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        delay, first = 0.2, True
        while True:
            try:
                self.tails += 1
                async for batch in self.store.tail_events():
                    if batch is None:
                        self._tell_all()
                        continue
                    if not self._ready.is_set():
                        self._ready.set()
                        if not first:  # a new tail after a lost one: what came between is unknown
                            self._tell_all()
                        first, delay = False, 0.2
                    if batch:
                        self._dispatch(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # the store is away: followers read on their safety timers meanwhile
                log.warning("event feed: the store's tail failed; starting a new one in %.1f s", delay,
                            exc_info=True)
            self._ready.clear()
            first = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _dispatch(self, batch: list[EventNote]) -> None:
        by_job: dict[str, list[EventNote]] = {}
        runs: list[EventNote] = []
        for note in batch:
            if note.event == ACCESS_CHANGED and note.job_id.startswith(ACCESS_NOTES):
                self.recheck(note.job_id[len(ACCESS_NOTES):])  # a revoke, in any process
                continue
            runs.append(note)
            by_job.setdefault(note.job_id, []).append(note)
        if not runs:
            return
        batch = runs
        for job_id, notes in by_job.items():
            for follower in self._by_job.get(job_id, ()):
                follower.tell(notes)
        for follower in self._everything:
            follower.tell(batch)

    def _tell_all(self) -> None:
        for group in self._by_job.values():
            for follower in group:
                follower.tell(None)
        for follower in self._everything:
            follower.tell(None)
