"""What the SQL stores send to their database, counted in this process (plain integers, no
locking: one event loop per process, and a count off by one under threads is still a count).
``signoff_store_transactions_total{kind}`` and ``signoff_store_statements_total`` expose them
(engine/metrics.py); bench/resume_profile.py divides them by the decisions it made (issue 33:
the round trips and commits a decision costs).

- ``commit``: a write transaction ended (committed or rolled back: each is one durable round
  trip of the database's own, a FULL-synchronous fsync on SQLite when it wrote);
- ``read``: a read connection used;
- ``statements``: statements sent inside either (one round trip each on PostgreSQL)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["COUNTS", "HOLD", "count", "tallying"]

COUNTS: dict[str, int] = {"commit": 0, "read": 0, "statements": 0}

# what the current task (and the tasks it starts) sent, while a tally is open
_TALLY: ContextVar[dict[str, int] | None] = ContextVar("signoff_store_tally", default=None)


def count(kind: str, n: int = 1) -> None:
    COUNTS[kind] += n
    tally = _TALLY.get()
    if tally is not None:
        tally[kind] += n


@contextlib.contextmanager
def tallying() -> Iterator[dict[str, int]]:
    """The counts of what this task sends inside the block alone (a bench's or a test's own
    calls, not the process's other work, which the process-wide COUNTS also holds)."""
    tally = {"commit": 0, "read": 0, "statements": 0}
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


class WriterHold:
    """How long each write transaction of this process held the SQLite writer, from its BEGIN
    IMMEDIATE to the end of its COMMIT (what every other write, of this process or another, waits
    behind), as a histogram (``signoff_store_writer_hold_seconds``), and the part of it spent in
    SQLite's own calls (``signoff_store_writer_work_seconds_total``): the rest is waiting for
    the event loop or the GIL between statements. Observed on the writer's thread, one at a time."""

    BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 1.0, float("inf"))

    def __init__(self) -> None:
        self.counts = [0] * len(self.BUCKETS)
        self.sum = 0.0
        self.work = 0.0
        self.n = 0

    def observe(self, held: float, work: float) -> None:
        for i, bound in enumerate(self.BUCKETS):
            if held <= bound:
                self.counts[i] += 1
                break
        self.sum += held
        self.work += work
        self.n += 1


HOLD = WriterHold()
