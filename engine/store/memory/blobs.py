"""Blobs (vertex outputs passed by reference), in memory."""

from __future__ import annotations

from signoff.engine.store.base import run_of_blob
from signoff.engine.store.memory.core import MemoryCore, _Tables


class MemoryBlobs(MemoryCore):
    """Part of MemoryStore: blobs."""

    async def put_blob(self, key: str, data: bytes) -> None:
        """See Store.put_blob: a run's blob counts to the job's user, in place of the one it replaces."""
        t = self._tables()
        data = bytes(data)
        self._drop_blob(t, key)
        t.blobs[key] = data
        user_id = self._job_user(t, run_of_blob(key))
        if user_id is not None:
            t.blob_charges[key] = user_id
            self._charge(t, user_id, len(data))

    def _drop_blob(self, t: _Tables, key: str) -> None:
        old = t.blobs.pop(key, None)
        charged = t.blob_charges.pop(key, None)
        if old is not None:
            self._charge(t, charged, -len(old))  # given back

    async def get_blob(self, key: str) -> bytes | None:
        return self._tables().blobs.get(key)

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        t = self._tables()
        gone = [k for k in t.blobs if k.startswith(prefix)]
        for key in gone:
            self._drop_blob(t, key)
        return len(gone)
