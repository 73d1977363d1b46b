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

__all__ = ["COUNTS", "count", "tallying"]

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
