"""Standing approvals as people see and end them (DESIGN §17, engine/standing.py): the rules a
person made and those on the flows they own; a rule anyone else names is "not found", never
"forbidden" (like every other id, DESIGN §6). The API (api/routes/standing.py) and the page
(/standing-approvals) read them through here."""

from __future__ import annotations

from signoff.engine.errors import StandingApprovalNotFound
from signoff.engine.models import StandingApproval, User, utcnow
from signoff.engine.store.base import Store
from signoff.service.access import valid_id

LIST_LIMIT = 500  # the most rules one list shows (each person has at most SIGNOFF_MAX_STANDING_PER_USER in force)


def sees(user: User, rule: StandingApproval) -> bool:
    """Whether ``user`` may see and revoke ``rule``: its maker or the owner of its flow."""
    return user.id in (rule.maker_id, rule.flow_owner_id)


async def rules_of(store: Store, user: User) -> list[StandingApproval]:
    """The rules ``user`` made and those on flows they own, newest first (revoked and expired
    ones too, so the record of what was allowed stays visible)."""
    return await store.list_standing_approvals(user.id, limit=LIST_LIMIT)


async def visible_rule(store: Store, user: User, rule_id: str) -> StandingApproval:
    """The rule if ``user`` may see it; anything else is StandingApprovalNotFound."""
    rule = await store.get_standing_approval(rule_id) if valid_id(rule_id) else None
    if rule is None or not sees(user, rule):
        raise StandingApprovalNotFound(f"No standing approval {rule_id[:100]!r}")
    return rule


async def revoke(store: Store, user: User, rule_id: str) -> StandingApproval:
    """Revoke a rule (its maker or its flow's owner): the next call it would have covered asks a
    person again. Revoking a revoked rule changes nothing (the first time is kept)."""
    rule = await visible_rule(store, user, rule_id)
    await store.revoke_standing_approval(rule.id, utcnow())
    return await visible_rule(store, user, rule_id)
