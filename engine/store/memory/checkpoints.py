"""Checkpoints, in memory."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from signoff.engine.models import CheckpointRecord, utcnow
from signoff.engine.store.encoding import as_utc, dumps, octets
from signoff.engine.store.memory.core import _Checkpoint, MemoryCore


class MemoryCheckpoints(MemoryCore):
    """Part of MemoryStore: checkpoints."""

    @staticmethod
    def _checkpoint(row: _Checkpoint) -> CheckpointRecord:
        return CheckpointRecord(
            id=row.id,
            run_id=row.run_id,
            job_id=row.job_id,
            data=json.loads(row.data),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        body = dumps(data)
        t = self._tables()
        user_id = self._job_user(t, job_id or run_id)  # run_id = job_id (DESIGN §1.5)
        row = _Checkpoint(
            str(uuid.uuid4()), run_id, job_id, body, utcnow(), as_utc(expires_at) if expires_at is not None else None,
            octets(body), user_id,
        )
        t.checkpoints[row.id] = row
        self._charge(t, user_id, row.size)
        return row.id

    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        for row in reversed(self._tables().checkpoints.values()):
            if row.run_id == run_id:
                return self._checkpoint(row)
        return None

    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = self._tables().checkpoints.get(checkpoint_id)
        return self._checkpoint(row) if row is not None else None

    def _delete_checkpoints(self, doomed: Callable[[_Checkpoint], bool]) -> int:
        t = self._tables()
        checkpoints = t.checkpoints
        ids = [row.id for row in checkpoints.values() if doomed(row)]
        for checkpoint_id in ids:
            row = checkpoints.pop(checkpoint_id)
            self._charge(t, row.charged_to, -row.size)  # given back
        return len(ids)

    async def delete_checkpoints(self, run_id: str) -> int:
        return self._delete_checkpoints(lambda row: row.run_id == run_id)

    async def delete_checkpoints_of_ended_runs(self) -> int:
        jobs = self._tables().jobs
        return self._delete_checkpoints(lambda row: row.job_id is not None and row.job_id in jobs
                                        and jobs[row.job_id].status.terminal)

    async def delete_expired_checkpoints(self, now: datetime) -> int:
        """Those with ``expires_at <= now`` (loads never filter on expiry)."""
        now = as_utc(now)
        return self._delete_checkpoints(lambda row: row.expires_at is not None and row.expires_at <= now)
