"""Requests per second per user on the write routes (issue 28): ``SIGNOFF_WRITE_RATE`` tokens a
second with a burst of ``SIGNOFF_WRITE_BURST``; beyond them 429 ``RATE_LIMITED`` with
``Retry-After``. One dependency of the whole app (:func:`limit_writes`) applies it to every
POST, PUT, PATCH and DELETE of the JSON API (submit, resume, stop, flows, shares, secrets,
groups, webhooks, AG-UI), and the pages' forms take from the same bucket (``read_form``).

The buckets are in this process's memory: the limit holds per API process (N replicas behind a
balancer let a user N times the rate), and a restart refills them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

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

    def take(self, key: str) -> float:
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, when = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            if len(self._buckets) > self.max_keys:
                self._prune(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / self.rate

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, when) in self._buckets.items() if tokens + (now - when) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]


def write_buckets(settings: Settings) -> TokenBuckets:
    return TokenBuckets(settings.write_rate, settings.write_burst)


def check_write(buckets: TokenBuckets, user_id: str) -> None:
    """Take one write of ``user_id`` from its bucket, or raise RateLimited (429, Retry-After)."""
    wait = buckets.take(user_id)
    if wait > 0:
        retry_after = max(1, math.ceil(wait))
        raise RateLimited(f"Too many writes: at most {buckets.rate:g} a second with bursts of {buckets.burst:g} per "
                          f"user (SIGNOFF_WRITE_RATE, SIGNOFF_WRITE_BURST); try again in {retry_after} s",
                          retry_after=retry_after)


async def limit_writes(request: Request) -> None:
    """The app's one dependency: every write of the JSON API by a known user takes a token."""
    if request.method not in WRITE_METHODS:
        return
    user = request.scope.get("state", {}).get("user")  # set by AuthMiddleware on /api/
    if user is not None:
        check_write(request.app.state.write_buckets, user.id)
