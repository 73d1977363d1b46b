"""Groups of approvers in SQL (DESIGN §9): a group is its owner's, its name unique per owner.

A change of members locks the group row first (``Q.lock_group``), so no member row outlives
its group: a group deleted and created again under the same name starts empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from signoff.engine.models import Group, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import unique_strings
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLGroups"]


class SQLGroups(SQLCore):
    """Part of SQLStore: groups and their members."""

    def _groups(self, rows: list[dict[str, Any]]) -> list[Group]:
        """Groups from rows of (owner_id, name, created_at, user_id or NULL), by name; members
        sorted. Sorted here, by code point, whatever the database's collation."""
        groups: dict[tuple[str, str], Group] = {}
        for r in rows:
            key = (r["owner_id"], r["name"])
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(owner_id=key[0], name=key[1], created_at=self._dec_dt(r["created_at"]))
            if r["user_id"] is not None:
                group.members.append(r["user_id"])
        for group in groups.values():
            group.members.sort()
        return sorted(groups.values(), key=lambda g: g.name)

    async def _group(self, tx: Tx, owner_id: str, name: str) -> Group | None:
        found = self._groups(await tx.fetchall(Q.group_with_members, (owner_id, name)))
        return found[0] if found else None

    async def create_group(self, owner_id: str, name: str) -> Group:
        """See Store.create_group: one insert; the loser of a race gets StoreConflict."""
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_group, (owner_id, name, self._enc_dt(utcnow())))
            if row is not None:  # a new group starts empty, whatever an older one left
                await tx.execute(Q.delete_group_members, (owner_id, name))
        if row is None:
            raise StoreConflict(f"You already have a group named {name!r}.")
        return Group(owner_id=row["owner_id"], name=row["name"], created_at=self._dec_dt(row["created_at"]))

    async def get_group(self, owner_id: str, name: str) -> Group | None:
        async with self._tx(write=False) as tx:
            return await self._group(tx, owner_id, name)

    async def list_groups(self, owner_id: str) -> list[Group]:
        async with self._tx(write=False) as tx:
            return self._groups(await tx.fetchall(Q.groups_with_members, (owner_id,)))

    async def _change_members(self, owner_id: str, name: str, user_ids: Iterable[str], add: bool) -> Group | None:
        ids = unique_strings(user_ids, "user_ids")
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            if await tx.execute(Q.lock_group, (owner_id, name)) == 0:
                return None
            if ids and add:
                await tx.executemany(Q.insert_group_member, [(owner_id, name, u, now) for u in ids])
            elif ids:
                await tx.executemany(Q.delete_group_member, [(owner_id, name, u) for u in ids])
                for u in ids:  # what they decided as members may no longer be theirs to decide
                    await self._note_access(tx, u)  # type: ignore[attr-defined]  # SQLEvents
            return await self._group(tx, owner_id, name)

    async def add_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        """See Store.add_group_members."""
        return await self._change_members(owner_id, name, user_ids, add=True)

    async def remove_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        """See Store.remove_group_members."""
        return await self._change_members(owner_id, name, user_ids, add=False)

    async def delete_group(self, owner_id: str, name: str) -> bool:
        """The group row first: it waits for a change of members in flight, whose rows the
        second statement then sees and deletes."""
        async with self._tx(write=True) as tx:
            existed = await tx.execute(Q.delete_group, (owner_id, name)) > 0
            members = await tx.fetchall(Q.group_member_ids, (owner_id, name))
            await tx.execute(Q.delete_group_members, (owner_id, name))
            for row in members:  # each of them lost what the group let them decide
                await self._note_access(tx, row["user_id"])  # type: ignore[attr-defined]  # SQLEvents
        return existed

    async def groups_of(self, user_id: str) -> list[tuple[str, str]]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.groups_of, (user_id,))
        return sorted((r["owner_id"], r["name"]) for r in rows)
