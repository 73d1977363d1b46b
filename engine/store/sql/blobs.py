"""Blobs (large vertex outputs kept out of Temporal history) in SQL."""

from __future__ import annotations

from signoff.engine.models import utcnow
from signoff.engine.store.base import run_of_blob
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLBlobs"]


class SQLBlobs(SQLCore):
    """Part of SQLStore: blobs."""

    async def put_blob(self, key: str, data: bytes) -> None:
        """See Store.put_blob: a run's blob (``runs/<job id>/...``) counts to the job's user, in
        place of what the blob it replaces counted."""
        data = bytes(data)
        job_id = run_of_blob(key)
        async with self._tx(write=True) as tx:
            # two puts of one key at once: one after the other
            job = await tx.fetchone(Q.lock_job_user, (job_id,)) if job_id is not None else None
            user_id = job["user_id"] if job else None
            old = await tx.fetchone(Q.blob_stored, (key,))
            await tx.execute(Q.put_blob, (key, data, self._enc_dt(utcnow()), len(data), user_id))
            # one usage row per user: what the old blob counted and the new one's size together
            await self._refund(tx, [*([old] if old is not None else []), {"charged_to": user_id, "size": -len(data)}],
                               key)

    async def get_blob(self, key: str) -> bytes | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.get_blob, (key,))
        return bytes(row["data"]) if row else None

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        async with self._tx(write=True) as tx:
            rows = await tx.fetchall(Q.delete_blobs, (len(prefix), prefix))
            await self._refund(tx, rows, prefix)
        return len(rows)
