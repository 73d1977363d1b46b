"""Mutes in SQL: who muted which requester (docs/security.md, "Fan-out and approvers")."""

from __future__ import annotations

from collections.abc import Iterable

from signoff.engine.models import utcnow
from signoff.engine.store.encoding import unique_strings
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLMutes"]


class SQLMutes(SQLCore):
    """Part of SQLStore: mutes."""

    async def mute(self, user_id: str, muted_id: str) -> bool:
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_mute, (user_id, muted_id, self._enc_dt(utcnow())))
        return row is not None

    async def unmute(self, user_id: str, muted_id: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_mute, (user_id, muted_id)) > 0

    async def list_mutes(self, user_id: str) -> list[str]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_mutes, (user_id,))
        return [r["muted_id"] for r in rows]

    async def muted_by(self, muted_id: str, user_ids: Iterable[str]) -> set[str]:
        users = unique_strings(user_ids, "user_ids")
        if not users:
            return set()
        sql = Q.muters_of.format(users=", ".join("?" for _ in users))
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql, (muted_id, *users))
        return {r["user_id"] for r in rows}
