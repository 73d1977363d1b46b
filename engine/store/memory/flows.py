"""Flows, their versions and shares, in memory."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from signoff.engine.models import FlowRecord, utcnow
from signoff.engine.store.encoding import dumps, octets
from signoff.engine.store.memory.core import _Flow, _FlowVersion, MemoryCore


class MemoryFlows(MemoryCore):
    """Part of MemoryStore: flows."""

    @staticmethod
    def _flow(row: _Flow) -> FlowRecord:
        return FlowRecord(
            id=row.id,
            owner_id=row.owner_id,
            name=row.name,
            spec=json.loads(row.spec),
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    async def save_flow(
        self, owner_id: str, name: str, spec: dict[str, Any], *, flow_id: str | None = None
    ) -> FlowRecord:
        """A new flow, or (same id) its next version; the owner never changes."""
        flow_id = flow_id or str(uuid.uuid4())
        body = dumps(spec)
        now = utcnow()
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            row = t.flows[flow_id] = _Flow(flow_id, owner_id, name, body, 1, now, now)
        else:
            row.name, row.spec, row.version, row.updated_at = name, body, row.version + 1, now
        t.flow_versions[(flow_id, row.version)] = _FlowVersion(name, body, now)
        self._charge(t, row.owner_id, octets(body))  # each version, to the flow's owner
        return self._flow(row)

    async def get_flow(self, flow_id: str, *, version: int | None = None) -> FlowRecord | None:
        """The flow (its latest version, or ``version`` when given: the spec a job ran)."""
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            return None
        if version is None:
            return self._flow(row)
        kept = t.flow_versions.get((flow_id, version))
        if kept is None:
            return None
        return FlowRecord(
            id=row.id,
            owner_id=row.owner_id,
            name=kept.name,
            spec=json.loads(kept.spec),
            version=version,
            created_at=row.created_at,
            updated_at=kept.created_at,
        )

    async def list_flows(self, user_id: str) -> list[FlowRecord]:
        t = self._tables()
        mine = [r for r in t.flows.values() if r.owner_id == user_id or (r.id, user_id) in t.shares]
        return [self._flow(r) for r in sorted(mine, key=lambda r: (r.created_at, r.id))]

    async def delete_flow(self, flow_id: str) -> bool:
        """The flow with its versions and shares."""
        t = self._tables()
        owner = t.flows[flow_id].owner_id if flow_id in t.flows else None
        for version in [k for k in t.flow_versions if k[0] == flow_id]:
            self._charge(t, owner, -octets(t.flow_versions[version].spec))  # given back
            del t.flow_versions[version]
        for share in [k for k in t.shares if k[0] == flow_id]:
            del t.shares[share]
        return t.flows.pop(flow_id, None) is not None

    async def grant_share(self, flow_id: str, user_id: str, actions: Iterable[str]) -> None:
        """Add ``actions`` to what the user may do with the flow (earlier grants are kept)."""
        wanted = {str(a) for a in actions}
        self._tables().shares.setdefault((flow_id, user_id), set()).update(wanted)

    async def revoke_share(self, flow_id: str, user_id: str) -> bool:
        t = self._tables()
        gone = t.shares.pop((flow_id, user_id), None) is not None
        if gone:
            self._note_access(t, user_id)
        return gone

    async def list_shares(self, flow_id: str, *, limit: int = 100) -> list[tuple[str, list[str]]]:
        """See Store.list_shares."""
        found = sorted((u, sorted(a)) for (f, u), a in self._tables().shares.items() if f == flow_id)
        return found[:max(0, int(limit))]

    async def has_permission(self, flow_id: str, user_id: str, action: str = "execute") -> bool:
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            return False
        return row.owner_id == user_id or action in t.shares.get((flow_id, user_id), ())
