"""Blobs (large vertex outputs kept out of Temporal history) in SQL."""

from __future__ import annotations

from signoff.engine.models import utcnow
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLBlobs"]


class SQLBlobs(SQLCore):
    """Part of SQLStore: blobs."""

    async def put_blob(self, key: str, data: bytes) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.put_blob, (key, bytes(data), self._enc_dt(utcnow())))

    async def get_blob(self, key: str) -> bytes | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.get_blob, (key,))
        return bytes(row["data"]) if row else None

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_blobs, (len(prefix), prefix))
