"""Mutes, in memory: who muted which requester (docs/security.md, "Fan-out and approvers")."""

from __future__ import annotations

from collections.abc import Iterable

from signoff.engine.models import utcnow
from signoff.engine.store.encoding import unique_strings
from signoff.engine.store.memory.core import MemoryCore


class MemoryMutes(MemoryCore):
    """Part of MemoryStore: mutes, (user, muted) -> when."""

    async def mute(self, user_id: str, muted_id: str) -> bool:
        t = self._tables()
        if (user_id, muted_id) in t.mutes:
            return False
        t.mutes[(user_id, muted_id)] = utcnow()
        return True

    async def unmute(self, user_id: str, muted_id: str) -> bool:
        return self._tables().mutes.pop((user_id, muted_id), None) is not None

    async def list_mutes(self, user_id: str) -> list[str]:
        mine = sorted((at, muted) for (user, muted), at in self._tables().mutes.items() if user == user_id)
        return [muted for _, muted in mine]

    async def muted_by(self, muted_id: str, user_ids: Iterable[str]) -> set[str]:
        users = unique_strings(user_ids, "user_ids")
        t = self._tables()
        return {u for u in users if (u, muted_id) in t.mutes}
