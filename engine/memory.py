"""The in-memory stores of ``signoff run`` and the unit tests, under the names the engine's
callers use: both are the reference :class:`~engine.store.memory.MemoryStore`, so they keep the
documented semantics of engine/store/base.py exactly as SQLite and PostgreSQL do."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from signoff.engine.store.memory import MemoryStore

__all__ = ["InMemoryCheckpointStore", "InMemoryHistory"]

InMemoryHistory = MemoryStore


class InMemoryCheckpointStore(MemoryStore):
    """A MemoryStore that also counts the checkpoints ever written: a run deletes its checkpoints
    at its end, and a test still has to tell whether it paused at all (default-off, DESIGN §1.6)."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0  # how many checkpoints were ever written

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        checkpoint_id = await super().save_checkpoint(run_id, data, job_id=job_id, expires_at=expires_at)
        self.saves += 1
        return checkpoint_id

    def count(self, run_id: str | None = None) -> int:
        """How many checkpoints are stored now, of ``run_id`` or of every run."""
        return sum(1 for c in self._tables().checkpoints.values() if run_id is None or c.run_id == run_id)
