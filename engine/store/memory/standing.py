"""Standing approvals, in memory (DESIGN §17, engine/standing.py): rule id -> rule."""

from __future__ import annotations

from datetime import datetime

from signoff.engine.models import StandingApproval, as_utc
from signoff.engine.store.memory.core import MemoryCore


def _newest(rules: list[StandingApproval]) -> list[StandingApproval]:
    return sorted(rules, key=lambda r: (r.created_at, r.id), reverse=True)


class MemoryStanding(MemoryCore):
    """Part of MemoryStore: standing approval rules."""

    async def create_standing_approval(self, rule: StandingApproval) -> StandingApproval:
        rules = self._tables().standing
        if rule.id not in rules:
            rules[rule.id] = rule.model_copy(update={"revoked_at": None, "uses": 0, "last_used_at": None})
        return rules[rule.id].model_copy()

    async def get_standing_approval(self, rule_id: str) -> StandingApproval | None:
        rule = self._tables().standing.get(rule_id)
        return rule.model_copy() if rule is not None else None

    async def list_standing_approvals(self, user_id: str, *, limit: int = 500) -> list[StandingApproval]:
        mine = [r for r in self._tables().standing.values() if user_id in (r.maker_id, r.flow_owner_id)]
        return [r.model_copy() for r in _newest(mine)[:max(0, int(limit))]]

    async def count_standing_approvals(self, maker_id: str, now: datetime) -> int:
        now = as_utc(now)
        return sum(1 for r in self._tables().standing.values() if r.maker_id == maker_id and r.active(now))

    async def find_standing_approvals(self, flow_id: str, tool: str, session_id: str, session_user_id: str,
                                      now: datetime, *, limit: int = 10) -> list[StandingApproval]:
        now = as_utc(now)
        found = [r for r in self._tables().standing.values()
                 if r.flow_id == flow_id and r.tool == tool and r.active(now)
                 and (r.scope == "flow" or (r.session_id == session_id and r.session_user_id == session_user_id))]
        return [r.model_copy() for r in _newest(found)[:max(0, int(limit))]]

    async def revoke_standing_approval(self, rule_id: str, at: datetime) -> bool:
        rule = self._tables().standing.get(rule_id)
        if rule is None or rule.revoked_at is not None:
            return False
        rule.revoked_at = as_utc(at)
        return True

    async def use_standing_approval(self, rule_id: str, at: datetime) -> None:
        rule = self._tables().standing.get(rule_id)
        if rule is not None:
            rule.uses += 1
            rule.last_used_at = as_utc(at)
