"""Slots of a process's work taken in turns per user (issue 28, "a fair share of the service"),
and whose work the current task does (:func:`acting_for`, :func:`current_user`).

:class:`FairGate` lets at most ``slots`` holders in at once. When all are taken, a newcomer waits
in its user's line, and a freed slot goes to the waiting user who has held the gate least lately:
each user's time holding it, halved every ``half_life`` seconds (10 by default), ties in turn
(round robin over the users who wait, each user's own in the order they came; the user whose slot
was freed goes behind the others of equal time). A user with many runs waiting is one user in
that order, so one user's backlog never sits in front of another's run; and a user who used the
gate little (a person deciding now and then) goes before those who hold it all the time (a client
as fast as it can), so their wait is the holds in progress, not a turn of everyone who waits.
Nobody's work (``""``: sweeps, the lookup of an API key before its user is known, health checks)
is not counted, so it is never pushed back behind the users it serves. What waits holds nothing
but a future; a waiter that is cancelled leaves its line (or hands on the slot it was just given).
Choosing costs O(log n) in the users who wait (a heap: every user's time halves at the same pace,
so their order changes only when one of them holds the gate again).

What least-used-first does not bound: a user who held the gate for long waits while users who
held it less keep it busy; their time halves every ``half_life``, so that wait passes once the
others have used as much (the time held is counted from the slot's start, so on PostgreSQL the
wait for a connection of the pool counts too).

Used by the inline runs of an API process (``service/inline.py``: runs being built), by the
SQLite store's one writer (``engine/store/sqlite.py``: write transactions) and by the PostgreSQL
store's pool (``engine/store/postgres.py``: its connections), keyed by the user
whose work it is: the API request's user (``api/auth.py``), the run's user in an activity (named
in its headers by the workflow: ``workflows/whose.py``, ``activities/telemetry.py``) or an inline
run (the request's context).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

_USER: contextvars.ContextVar[str] = contextvars.ContextVar("signoff_acting_for", default="")


def current_user() -> str:
    """The user whose work this task does ("" when nobody's: sweeps, start-up)."""
    return _USER.get()


def act_for(user_id: str | None) -> None:
    """This task (and the tasks it starts) does ``user_id``'s work from now on: for a task that
    is one person's request to its end (a page request, whose user a dependency finds)."""
    _USER.set(user_id or "")


@contextlib.contextmanager
def acting_for(user_id: str | None) -> Iterator[None]:
    """This task (and the tasks it starts) does ``user_id``'s work until the block ends."""
    token = _USER.set(user_id or "")
    try:
        yield
    finally:
        _USER.reset(token)


class FairGate:
    def __init__(self, slots: int, *, half_life: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots  # 0: no limit
        self.busy = 0
        self.half_life = half_life
        self._clock = clock
        self._lines: dict[str, deque[asyncio.Future[None]]] = {}
        # user -> (seconds held, as of when); nobody's work ("") is not counted
        self._used: dict[str, tuple[float, float]] = {}
        self._prune_at = 1024
        # the users who wait, least used first, then in turn: (score, ticket, user); an entry is
        # the user's only while its ticket is theirs in _ticket (older ones are skipped)
        self._order: list[tuple[float, int, str]] = []
        self._ticket: dict[str, int] = {}
        self._tickets = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(len(line) for line in self._lines.values())

    def used(self, user_id: str, now: float | None = None) -> float:
        """``user_id``'s time holding the gate, each second counting half after ``half_life``."""
        held, at = self._used.get(user_id, (0.0, 0.0))
        if not held:
            return 0.0
        now = self._clock() if now is None else now
        return held * 0.5 ** ((now - at) / self.half_life)

    def _score(self, user_id: str) -> float:
        """What orders the users who wait: log2 of their time held, as of one fixed instant. Every
        user's time halves at the same pace, so the order of two users changes only when one of
        them holds the gate again, and a score is computed once per hold, not per choice."""
        held, at = self._used.get(user_id, (0.0, 0.0))
        return math.log2(held) + at / self.half_life if held > 0 else -math.inf

    def _queue(self, user_id: str) -> None:
        """``user_id`` (who has a line) takes a place in the order behind the users of equal score."""
        ticket = next(self._tickets)
        self._ticket[user_id] = ticket
        heapq.heappush(self._order, (self._score(user_id), ticket, user_id))
        if len(self._order) > 64 + 4 * len(self._ticket):  # old places: dropped now and then
            self._order = [e for e in self._order if self._ticket.get(e[2]) == e[1]]
            heapq.heapify(self._order)

    @contextlib.asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        if self.slots <= 0:
            yield
            return
        if self.busy < self.slots and not self._lines:
            self.busy += 1
        else:
            given: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            line = self._lines.get(user_id)
            if line is None:
                line = self._lines[user_id] = deque()
                self._queue(user_id)
            line.append(given)
            try:
                await given
            except asyncio.CancelledError:
                if given.done() and not given.cancelled():
                    self._release(user_id)  # the slot came with the cancel: hand it on
                else:
                    self._leave(user_id, given)
                raise
        start = self._clock()
        try:
            yield
        finally:
            try:
                self._charge(user_id, start)
            finally:
                self._release(user_id)

    def _charge(self, user_id: str, start: float) -> None:
        if not user_id:  # nobody's work (sweeps, an API key's lookup, health): never pushed back
            return
        now = self._clock()
        self._used[user_id] = (self.used(user_id, now) + (now - start), now)
        if len(self._used) > self._prune_at:  # users long gone: their time has halved to nothing
            self._used = {u: v for u, v in self._used.items() if u in self._lines or self.used(u, now) > 1e-4}
            self._prune_at = max(1024, 2 * len(self._used))

    def _leave(self, user_id: str, given: asyncio.Future[None]) -> None:
        line = self._lines.get(user_id)
        if line is not None:
            with contextlib.suppress(ValueError):
                line.remove(given)
            if not line:
                del self._lines[user_id]
                del self._ticket[user_id]

    def _next(self) -> str:
        """The waiting user who held the gate least lately; the first in turn among equals."""
        while True:
            _, ticket, user_id = heapq.heappop(self._order)
            if self._ticket.get(user_id) == ticket:
                return user_id

    def _release(self, user_id: str) -> None:
        """A slot of ``user_id`` is free: the next user (:meth:`_next`) gets it (the slot passes
        on, busy unchanged); ``user_id`` just had one, so with a line they take their place again,
        as their time held now says and behind everyone equal."""
        if user_id in self._lines:
            self._queue(user_id)
        while self._lines:
            user_id = self._next()
            line = self._lines[user_id]
            given = line.popleft()
            if line:
                self._queue(user_id)  # their next waits for everyone else's equal turn
            else:
                del self._lines[user_id]
                del self._ticket[user_id]
            if not given.done():
                given.set_result(None)
                return
        self.busy -= 1
