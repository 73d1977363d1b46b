"""Groups of approvers, in memory: (owner, name) is the key."""

from __future__ import annotations

from collections.abc import Iterable

from signoff.engine.models import Group, utcnow
from signoff.engine.store.base import StoreConflict
from signoff.engine.store.encoding import unique_strings
from signoff.engine.store.memory.core import _Group, MemoryCore


class MemoryGroups(MemoryCore):
    """Part of MemoryStore: groups."""

    @staticmethod
    def _group(owner_id: str, name: str, row: _Group) -> Group:
        return Group(owner_id=owner_id, name=name, members=sorted(row.members), created_at=row.created_at)

    async def create_group(self, owner_id: str, name: str) -> Group:
        t = self._tables()
        if (owner_id, name) in t.groups:
            raise StoreConflict(f"You already have a group named {name!r}.")
        row = t.groups[(owner_id, name)] = _Group(utcnow())
        return self._group(owner_id, name, row)

    async def get_group(self, owner_id: str, name: str) -> Group | None:
        row = self._tables().groups.get((owner_id, name))
        return self._group(owner_id, name, row) if row is not None else None

    async def list_groups(self, owner_id: str) -> list[Group]:
        """By name, in code-point order (as the SQL backends sort them)."""
        mine = sorted((k[1], row) for k, row in self._tables().groups.items() if k[0] == owner_id)
        return [self._group(owner_id, name, row) for name, row in mine]

    async def add_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        ids = unique_strings(user_ids, "user_ids")
        row = self._tables().groups.get((owner_id, name))
        if row is None:
            return None
        row.members.update(ids)
        return self._group(owner_id, name, row)

    async def remove_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        ids = unique_strings(user_ids, "user_ids")
        row = self._tables().groups.get((owner_id, name))
        if row is None:
            return None
        t = self._tables()
        for u in ids:
            if u in row.members:
                self._note_access(t, u)  # type: ignore[attr-defined]  # MemoryEvents
        row.members.difference_update(ids)
        return self._group(owner_id, name, row)

    async def delete_group(self, owner_id: str, name: str) -> bool:
        t = self._tables()
        row = t.groups.pop((owner_id, name), None)
        for u in sorted(row.members) if row is not None else ():
            self._note_access(t, u)  # type: ignore[attr-defined]  # MemoryEvents
        return row is not None

    async def groups_of(self, user_id: str) -> list[tuple[str, str]]:
        return sorted(k for k, row in self._tables().groups.items() if user_id in row.members)
