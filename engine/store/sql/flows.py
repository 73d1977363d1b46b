"""Flows, their versions and their shares, in SQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from signoff.engine.models import FlowRecord, utcnow
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLFlows"]


class SQLFlows(SQLCore):
    """Part of SQLStore: flows, flow versions and shares."""

    def _flow(self, row: dict[str, Any]) -> FlowRecord:
        return FlowRecord(
            id=row["id"],
            owner_id=row["owner_id"],
            name=row["name"],
            spec=self._dec_json(row["spec"]),
            version=int(row["version"]),
            created_at=self._dec_dt(row["created_at"]),
            updated_at=self._dec_dt(row["updated_at"]),
        )

    async def save_flow(
        self, owner_id: str, name: str, spec: dict[str, Any], *, flow_id: str | None = None
    ) -> FlowRecord:
        flow_id = flow_id or str(uuid.uuid4())
        now = self._enc_dt(utcnow())
        spec_json = self._enc_json(spec)
        size = self._json_octets(spec_json)
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.upsert_flow, (flow_id, owner_id, name, spec_json, now, now))
            assert row is not None
            await tx.execute(Q.insert_flow_version, (flow_id, row["version"], name, spec_json, now, size))
            await self._charge(tx, row["owner_id"], size, flow_id)  # each version, to the flow's owner
        return self._flow(row)

    async def get_flow(self, flow_id: str, *, version: int | None = None) -> FlowRecord | None:
        """The flow (its latest version, or ``version`` when given: the spec a job ran)."""
        async with self._tx(write=False) as tx:
            if version is None:
                row = await tx.fetchone(Q.flow_by_id, (flow_id,))
            else:
                row = await tx.fetchone(Q.flow_version, (flow_id, version))
        return self._flow(row) if row else None

    async def list_flows(self, user_id: str) -> list[FlowRecord]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_flows, (user_id, user_id))
        return [self._flow(r) for r in rows]

    async def delete_flow(self, flow_id: str) -> bool:
        async with self._tx(write=True) as tx:
            deleted = await tx.fetchone(Q.delete_flow, (flow_id,))
            stored = await tx.fetchone(Q.flow_stored, (flow_id,))
            await tx.execute(Q.delete_flow_versions, (flow_id,))
            await tx.execute(Q.delete_flow_shares, (flow_id,))
            if deleted is not None and stored is not None:  # its versions' bytes, given back
                await self._charge(tx, deleted["owner_id"], -int(stored["n"]), flow_id)
        return deleted is not None

    async def grant_share(self, flow_id: str, user_id: str, actions: Iterable[str]) -> None:
        """Add ``actions`` to what the user may do with the flow (earlier grants are kept)."""
        wanted = {str(a) for a in actions}
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.share, (flow_id, user_id))
            if row:
                wanted |= set(json.loads(row["actions"]))
            await tx.execute(Q.upsert_share, (flow_id, user_id, json.dumps(sorted(wanted)), self._enc_dt(utcnow())))

    async def revoke_share(self, flow_id: str, user_id: str) -> bool:
        async with self._tx(write=True) as tx:
            gone = await tx.execute(Q.delete_share, (flow_id, user_id)) > 0
            if gone:
                await self._note_access(tx, user_id)
            return gone

    async def list_shares(self, flow_id: str, *, limit: int = 100) -> list[tuple[str, list[str]]]:
        """See Store.list_shares."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_shares, (flow_id, max(0, int(limit))))
        return [(r["user_id"], sorted(json.loads(r["actions"]))) for r in rows]

    async def has_permission(self, flow_id: str, user_id: str, action: str = "execute") -> bool:
        async with self._tx(write=False) as tx:
            owner = await tx.fetchone(Q.flow_owner, (flow_id,))
            if owner is None:
                return False
            if owner["owner_id"] == user_id:
                return True
            row = await tx.fetchone(Q.share, (flow_id, user_id))
        return bool(row) and action in json.loads(row["actions"])
