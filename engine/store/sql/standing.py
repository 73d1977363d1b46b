"""Standing approvals in SQL (DESIGN §17, engine/standing.py): one row per rule. The lookup at a
gated tool call is one indexed query (standing_find: flow, tool, expiry); a revoke is one
conditional UPDATE, so the next lookup after it finds nothing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from signoff.engine.models import StandingApproval
from signoff.engine.store.sql.core import SQLCore
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLStanding"]


class SQLStanding(SQLCore):
    """Part of SQLStore: standing approval rules."""

    def _standing(self, row: dict[str, Any]) -> StandingApproval:
        return StandingApproval(
            id=row["id"], maker_id=row["maker_id"], flow_id=row["flow_id"], flow_owner_id=row["flow_owner_id"],
            tool=row["tool"], scope=row["scope"], session_id=row["session_id"],
            session_user_id=row["session_user_id"], job_id=row["job_id"], request_id=row["request_id"],
            created_at=self._dec_dt(row["created_at"]), expires_at=self._dec_dt(row["expires_at"]),
            revoked_at=self._dec_dt(row["revoked_at"]), uses=int(row["uses"]),
            last_used_at=self._dec_dt(row["last_used_at"]))

    async def create_standing_approval(self, rule: StandingApproval) -> StandingApproval:
        params = (rule.id, rule.maker_id, rule.flow_id, rule.flow_owner_id, rule.tool, rule.scope, rule.session_id,
                  rule.session_user_id, rule.job_id, rule.request_id, self._enc_dt(rule.created_at),
                  self._enc_dt(rule.expires_at))
        async with self._tx(write=True) as tx:
            await tx.execute(Q.insert_standing, params)
            row = await tx.fetchone(Q.standing, (rule.id,))
        assert row is not None
        return self._standing(row)

    async def get_standing_approval(self, rule_id: str) -> StandingApproval | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.standing, (rule_id,))
        return self._standing(row) if row else None

    async def list_standing_approvals(self, user_id: str, *, limit: int = 500) -> list[StandingApproval]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_standing, (user_id, user_id, max(0, int(limit))))
        return [self._standing(r) for r in rows]

    async def count_standing_approvals(self, maker_id: str, now: datetime) -> int:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.count_standing, (maker_id, self._enc_dt(now)))
        return int(row["n"]) if row else 0

    async def find_standing_approvals(self, flow_id: str, tool: str, session_id: str, session_user_id: str,
                                      now: datetime, *, limit: int = 10) -> list[StandingApproval]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.find_standing, (flow_id, tool, self._enc_dt(now), session_id, session_user_id,
                                                       max(0, int(limit))))
        return [self._standing(r) for r in rows]

    async def revoke_standing_approval(self, rule_id: str, at: datetime) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.revoke_standing, (self._enc_dt(at), rule_id)) > 0

    async def use_standing_approval(self, rule_id: str, at: datetime) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.use_standing, (self._enc_dt(at), rule_id))
