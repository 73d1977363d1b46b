"""Writes per second per user on the write routes (issue 28), sized to the service: each user
may send ``SIGNOFF_WRITE_RATE`` writes a second with a burst of ``SIGNOFF_WRITE_BURST``, and the
service as a whole ``SIGNOFF_WRITE_RATE_TOTAL``, shared evenly among the users who wrote in the
last ``ACTIVE_SECONDS``: when more users write than the total gives each the per-user rate, each
gets ``total / writers`` (their fair share). A user who writes less than their share is never
refused because of the others; one who writes more is paced to it. Beyond it 429 ``RATE_LIMITED``
with ``Retry-After``. One dependency of the whole app (:func:`limit_writes`) applies it to every
POST, PUT, PATCH and DELETE of the JSON API (submit, resume, stop, flows, shares, secrets,
groups, webhooks, AG-UI), and the pages' forms take from the same bucket (``read_form``). A
batch of decisions takes one write per item (:func:`paced_writes`), and the agent protocols'
writes (MCP's ``run_flow``, ``decide``, ``stop_run``; A2A's messages and cancels) one each
(:func:`check_write`).

The buckets are in this process's memory: the limit holds per API process (N replicas behind a
balancer let a user N times the rate), and a restart refills them."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from fastapi import Request

from signoff.engine.errors import RateLimited
from signoff.engine.settings import Settings

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class TokenBuckets:
    """One token bucket per key: ``rate`` tokens a second, at most ``burst`` held. ``take``
    answers 0 when a token was taken, else the seconds until one is there. Full buckets are
    forgotten once more than ``max_keys`` are kept (a full bucket is what a new one is)."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)

    def take(self, key: str, rate: float | None = None) -> float:
        """``rate``: this key's rate now, instead of the buckets' (a fair share that changes)."""
        rate = self.rate if rate is None else rate
        if rate <= 0:
            return 0.0
        now = self.clock()
        tokens, when = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            if len(self._buckets) > self.max_keys:
                self._prune(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / rate

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, when) in self._buckets.items() if tokens + (now - when) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]


# A user counts among the writers sharing SIGNOFF_WRITE_RATE_TOTAL this long after their last write
ACTIVE_SECONDS = 10.0


class WriteBudget:
    """Each user's token bucket, at the per-user rate or, when ``total`` is set and shared by
    more writers than it can give that rate, at ``total / writers`` (``writers``: the users who
    wrote in the last ``active_seconds``, counted again at most once a second)."""

    def __init__(self, rate: float, burst: int, total: float = 0.0, *, clock: Callable[[], float] = time.monotonic,
                 active_seconds: float = ACTIVE_SECONDS, max_keys: int = 100_000) -> None:
        self.rate = rate  # 0: no per-user limit
        self.total = total  # 0: no service-wide budget
        self.burst = float(burst)
        self.clock = clock
        self.active_seconds = active_seconds
        self.buckets = TokenBuckets(rate, burst, clock=clock, max_keys=max_keys)
        self._last: dict[str, float] = {}  # user -> their last write
        self._writers = 0
        self._counted = -math.inf

    def writers(self, now: float) -> int:
        if now - self._counted >= 1.0:
            since = now - self.active_seconds
            self._last = {k: t for k, t in self._last.items() if t >= since}
            self._writers, self._counted = len(self._last), now
        return max(1, self._writers)

    def share(self, now: float | None = None) -> float:
        """A user's rate now (0: no limit)."""
        if self.total <= 0:
            return self.rate
        fair = self.total / self.writers(self.clock() if now is None else now)
        return min(self.rate, fair) if self.rate > 0 else fair

    def take(self, user_id: str) -> float:
        """0 when the write may go, else the seconds until it may."""
        now = self.clock()
        if user_id not in self._last:
            self._writers += 1  # a new writer: the share is smaller at once (the count is redone each second)
        self._last[user_id] = now
        return self.buckets.take(user_id, rate=self.share(now))


def write_buckets(settings: Settings) -> WriteBudget:
    return WriteBudget(settings.write_rate, settings.write_burst, settings.write_rate_total)


def check_write(budget: WriteBudget, user_id: str) -> None:
    """Take one write of ``user_id`` from its bucket, or raise RateLimited (429, Retry-After)."""
    wait = budget.take(user_id)
    if wait > 0:
        raise _refusal(budget, wait)


# The longest a batch of decisions (POST /api/v2/workflows/resume-batch, the inbox's bulk form)
# waits for its items' writes: a batch within the burst goes at once, a larger one is paced at
# the user's rate for up to this long, and its items beyond that are refused as RATE_LIMITED.
BATCH_PACE_SECONDS = 10.0


def paced_writes(budget: WriteBudget, user_id: str, *, free: int = 1,
                 pace_seconds: float = BATCH_PACE_SECONDS) -> Callable[[int], Awaitable[None]]:
    """For a call that makes many writes (a batch's items): an ``admit(i)`` that takes one write
    per item from ``user_id``'s bucket (the first ``free`` are paid for by the request's own
    write, taken by :func:`limit_writes`), waiting for it while the whole call has waited less
    than ``pace_seconds``, else raising RateLimited as :func:`check_write` does. A batch of 100
    is 100 writes: never a way around SIGNOFF_WRITE_RATE."""
    deadline = budget.clock() + pace_seconds
    admitted = 0

    async def admit(_index: int) -> None:
        nonlocal admitted
        admitted += 1
        if admitted <= free:
            return
        while True:
            wait = budget.take(user_id)
            if wait <= 0:
                return
            if budget.clock() + wait > deadline:
                raise _refusal(budget, wait)
            await asyncio.sleep(wait)

    return admit


def _refusal(budget: WriteBudget, wait: float) -> RateLimited:
    retry_after = max(1, math.ceil(wait))
    share = budget.share()
    shared = (f"; the service's {budget.total:g} a second (SIGNOFF_WRITE_RATE_TOTAL) is shared by "
              f"{budget.writers(budget.clock())} users writing now" if share < budget.rate or budget.rate <= 0
              else "")
    return RateLimited(f"Too many writes: at most {share:g} a second with bursts of {budget.burst:g} per user "
                       f"(SIGNOFF_WRITE_RATE, SIGNOFF_WRITE_BURST{shared}); try again in {retry_after} s",
                       retry_after=retry_after)


async def limit_writes(request: Request) -> None:
    """The app's one dependency: every write of the JSON API by a known user takes a token."""
    if request.method not in WRITE_METHODS:
        return
    user = request.scope.get("state", {}).get("user")  # set by AuthMiddleware on /api/
    if user is not None:
        check_write(request.app.state.write_buckets, user.id)
