"""Deleting ended runs in SQL: one run in one transaction, everything of it, its bytes given back.

The job's row goes first, by a conditional DELETE (ended, its workflow let go of): it is the
check that the run may go and the lock a racing claim or status change waits on (they are
conditional UPDATEs of that row, and find it gone). The job's event counter goes next, before
its events: it is the lock every append takes first (events.py), so an append either committed
before (its event is deleted here) or comes after the commit (the job is gone: it counts to
nobody). Then the rest, and one write per user of what it all had counted (core.py: _refund).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLRetention"]


class SQLRetention(SQLCore):
    """Part of SQLStore: deleting ended runs (Store.delete_run, Store.delete_runs_ended_before)."""

    def _sized(self, sql: str) -> str:
        """A query measuring what it deletes in the dialect's words (``{octets}``, schema.py)."""
        return sql.format(**self.ddl_types)

    async def delete_run(self, job_id: str) -> bool:
        """See Store.delete_run."""
        async with self._tx(write=True) as tx:
            return await self._delete_run(tx, job_id)

    async def _delete_run(self, tx: Tx, job_id: str) -> bool:
        job = await tx.fetchone(self._sized(Q.delete_ended_job), (job_id,))
        if job is None:
            return False
        await tx.execute(Q.delete_job_seq, (job_id,))  # the appends' lock, before the events
        counted = int(job["size"])  # what the job's own rows counted: request, result, error,
        for sql in (Q.delete_job_events, Q.delete_job_messages):  # events and messages (to its user)
            counted += sum(int(r["size"]) for r in await tx.fetchall(self._sized(sql), (job_id,)))
        rows: list[dict[str, Any]] = [{"charged_to": job["user_id"], "size": counted}]
        rows += await tx.fetchall(Q.delete_run_checkpoints, (job_id, job_id))  # run_id = job_id (DESIGN §1.5)
        rows += await tx.fetchall(Q.delete_run_spans, (job_id, job_id))  # trace_id = run_id (engine/tracing)
        prefix = f"runs/{job_id}/"  # the run's blobs (base.py: run_of_blob)
        rows += await tx.fetchall(Q.delete_blobs, (len(prefix), prefix))
        await tx.execute(Q.delete_job_approvers, (job_id,))
        await tx.execute(Q.delete_job_participants, (job_id,))
        await tx.execute(Q.delete_job_links, (job_id,))
        await tx.execute(Q.delete_job_notifications, (job_id,))
        await tx.execute(Q.delete_job_receipts, (job_id,))
        await self._refund(tx, rows, job_id)  # what the rows counted, charged_to as they were written
        return True

    async def delete_runs_ended_before(self, before: datetime, *, limit: int = 500) -> list[str]:
        """See Store.delete_runs_ended_before: the candidates read once, each deleted in its own
        transaction (delete_run checks again that it may go)."""
        if limit < 0:
            raise ValueError("delete_runs_ended_before needs a limit of 0 or more")
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.ended_before, (self._enc_dt(before), limit))
        deleted = []
        for row in rows:
            if await self.delete_run(row["job_id"]):
                deleted.append(row["job_id"])
        return deleted
