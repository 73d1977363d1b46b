"""Blobs (vertex outputs passed by reference), in memory."""

from __future__ import annotations

from signoff.engine.store.memory.core import MemoryCore


class MemoryBlobs(MemoryCore):
    """Part of MemoryStore: blobs."""

    async def put_blob(self, key: str, data: bytes) -> None:
        self._tables().blobs[key] = bytes(data)

    async def get_blob(self, key: str) -> bytes | None:
        return self._tables().blobs.get(key)

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        blobs = self._tables().blobs
        gone = [k for k in blobs if k.startswith(prefix)]
        for key in gone:
            del blobs[key]
        return len(gone)
