"""Checkpoints in SQL: the latest of a run is the one with the highest ``pos``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from signoff.engine.models import CheckpointRecord, utcnow
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLCheckpoints"]


class SQLCheckpoints(SQLCore):
    """Part of SQLStore: checkpoints."""

    def _checkpoint(self, row: dict[str, Any]) -> CheckpointRecord:
        return CheckpointRecord(
            id=row["id"],
            run_id=row["run_id"],
            job_id=row["job_id"],
            data=self._dec_json(row["data"]),
            created_at=self._dec_dt(row["created_at"]),
            expires_at=self._dec_dt(row["expires_at"]),
        )

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        checkpoint_id = str(uuid.uuid4())
        body = self._enc_json(data)
        size = self._json_octets(body)

        async def write(tx: Tx) -> None:
            user_id = await self._job_user(tx, job_id or run_id)  # run_id = job_id (DESIGN §1.5)
            await tx.execute(Q.insert_checkpoint, (
                checkpoint_id, run_id, job_id, body, self._enc_dt(utcnow()), self._enc_dt(expires_at), size, user_id))
            await self._charge(tx, user_id, size, job_id or run_id)

        await self._write(write)
        return checkpoint_id

    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.latest_checkpoint, (run_id,))
        return self._checkpoint(row) if row else None

    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.checkpoint_by_id, (checkpoint_id,))
        return self._checkpoint(row) if row else None

    async def delete_checkpoints(self, run_id: str) -> int:
        async with self._tx(write=True) as tx:
            rows = await tx.fetchall(Q.delete_checkpoints, (run_id,))
            await self._refund(tx, rows, run_id)
        return len(rows)

    async def delete_checkpoints_of_ended_runs(self) -> int:
        async with self._tx(write=True) as tx:
            rows = await tx.fetchall(Q.delete_checkpoints_of_ended_runs, ())
            await self._refund(tx, rows, "checkpoints of ended runs")
        return len(rows)

    async def delete_expired_checkpoints(self, now: datetime) -> int:
        async with self._tx(write=True) as tx:
            rows = await tx.fetchall(Q.delete_expired_checkpoints, (self._enc_dt(now),))
            await self._refund(tx, rows, "expired checkpoints")
        return len(rows)
