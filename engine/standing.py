"""Standing approvals (DESIGN §17): "approve and don't ask again". A tool approval's approve or
edit may carry ``remember: {"scope": "session"|"flow", "for": duration}``; the decision then
makes a rule, and later calls of that tool in that scope are approved by the rule without
pausing, each on the record as an approve decided by the rule's maker (``authority:
standing:<rule id>``). Docs: docs/agent.md, "Standing approvals".

- ``engine/decisions.py: check_remember`` (pure): what a ``remember`` may be; ``check_decision``
  calls it, so every surface refuses the same way (422 INVALID_STANDING_APPROVAL).
- :func:`make_rule`: the rule a decision makes (its id derived from the run and request, so a
  retried activity makes it once).
- :class:`StandingLookup`: the hook an Agent calls (``RunContext.standing``) before it pauses
  for a gated call: one indexed query for the rules in force, then the maker's permission as it
  is now (a revoked share, a deleted user, a lost approver status: the rule covers nothing and
  the call asks again), then :func:`record_standing_use`.
- :func:`record_standing_use`: the ONE place a use is recorded (its event, its count, the
  metric): a receipt per use belongs here too.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from signoff.engine import metrics
from signoff.engine.access import Access
from signoff.engine.audit.keys import ReceiptKeys, SigningKey
from signoff.engine.audit.receipts import ReceiptDraft
from signoff.engine.decisions import Remember, check_decider
from signoff.engine.errors import SignoffError, StandingApprovalLimit
from signoff.engine.models import Job, PendingRequest, StandingApproval, as_utc, utcnow
from signoff.engine.store.base import Store

STANDING_EVENT = "human_input_standing_approval"
CREATED_EVENT = "standing_approval_created"
FIND_LIMIT = 10  # rules looked at per gated call (newest first): the lookup stays bounded


def rule_id(job_id: str, request_id: str) -> str:
    """The id of the rule the decision on ``request_id`` of ``job_id`` makes: one per decision,
    the same on a retry."""
    return "sa_" + hashlib.sha256(f"{job_id}\n{request_id}".encode()).hexdigest()[:32]


def make_rule(job: Job, flow_owner_id: str, pending: PendingRequest, maker_id: str, remember: Remember,
              now: datetime) -> StandingApproval:
    """The rule that ``maker_id``'s decision on ``pending`` of ``job`` makes."""
    now = as_utc(now)
    session = remember.scope == "session"
    return StandingApproval(
        id=rule_id(job.job_id, pending.request_id), maker_id=maker_id, flow_id=job.flow_id,
        flow_owner_id=flow_owner_id, tool=str((pending.tool or {}).get("name") or ""), scope=remember.scope,  # type: ignore[arg-type]
        session_id=job.effective_session if session else None,  # the session a rule of scope session covers
        session_user_id=job.user_id if session else None,
        job_id=job.job_id, request_id=pending.request_id, created_at=now,
        expires_at=now + timedelta(seconds=remember.seconds))


def rule_public(rule: StandingApproval, now: datetime | None = None) -> dict[str, Any]:
    """A rule as the API and the pages show it (``status``: active, revoked or expired)."""
    now = as_utc(now or utcnow())
    data = rule.model_dump(mode="json")
    data["status"] = "revoked" if rule.revoked_at is not None else "active" if rule.expires_at > now else "expired"
    return data


async def record_standing_use(store: Store, rule: StandingApproval, job: Job, pending: PendingRequest,
                              maker_name: str | None, now: datetime, signing: SigningKey | None = None) -> dict[str, Any]:
    """Record that ``rule`` approved the call ``pending`` describes (the request the Agent would
    have paused with): the event ``human_input_standing_approval`` (what a receipt needs: the
    rule, the maker as the decider, the authority, the tool and its arguments as proposed and
    executed, the request id, the time), the rule's use count (in one store call: the event,
    its receipt and the count in one transaction, so a use is never counted without its record or
    twice) and the metric. Returns the event's
    data. With a ``signing`` key the use's signed receipt (``authority: standing:<rule id>``,
    ``decided_by`` the maker, docs/audit.md) is written with the event, in its transaction. The
    event is written once per request (its dedupe key is the request id); a retried
    layer does not come here for a use its earlier attempt recorded (StandingLookup, ``again``)."""
    tool = pending.tool or {}
    data: dict[str, Any] = {
        "request_id": pending.request_id,
        "kind": "tool",
        "job_id": job.job_id,
        "flow_id": job.flow_id,
        "flow_version": job.flow_version,
        "rule_id": rule.id,
        "scope": rule.scope,
        "session_id": rule.session_id,
        "action_id": "approve",
        "values": None,
        "decided_by": rule.maker_id,
        "decided_by_name": maker_name,
        "authority": f"standing:{rule.id}",
        "via": "standing",
        "tool": tool.get("name"),
        "call_id": tool.get("call_id"),
        "proposed_args": tool.get("args"),
        "executed_args": tool.get("args"),
        "shown": {"prompt": pending.prompt, "tool": tool},
        "rule_made_at": rule.created_at.isoformat(),
        "rule_expires_at": rule.expires_at.isoformat(),
        "decided_at": as_utc(now).isoformat(),
    }
    receipt = None
    if signing is not None:
        draft = ReceiptDraft.of(job_id=job.job_id, flow_id=job.flow_id, flow_version=job.flow_version, pending=pending,
                                key=f"standing:{pending.request_id}", action_id="approve", values=None,
                                decided_by={"id": rule.maker_id, "name": maker_name or rule.maker_id},
                                authority=f"standing:{rule.id}", via="standing", at=data["decided_at"])
        receipt = partial(draft.signed, key_id=signing.key_id, private=signing.private)
    # the event, its receipt and the rule's use in one transaction: a use is counted once, with
    # its record (a retry that finds the event counts nothing again)
    await store.append_event(job.job_id, STANDING_EVENT, data, dedupe_key=f"standing:{pending.request_id}",
                             receipt=receipt, standing_use=(rule.id, now))
    metrics.standing_approval_used(job.flow_id)
    return data


class StandingLookup:
    """``RunContext.standing`` for one run (set by the activities, engine.run.context_for): called
    by an Agent with the request it is about to pause with; answers the recorded use (the
    event's data) when a rule in force covers it and its maker may still decide it, else None
    (the Agent pauses and a person is asked)."""

    def __init__(self, store: Store, access: Access, *, job_id: str | None, again: bool = False,
                 keys: ReceiptKeys | None = None) -> None:
        # again: a retry of the layer (an earlier attempt may have recorded uses already);
        # keys: each use's receipt is signed with them (None: no receipt)
        self.store, self.access, self.job_id, self.again, self.keys = store, access, job_id, again, keys

    async def __call__(self, pending: PendingRequest) -> dict[str, Any] | None:
        if self.job_id is None or pending.kind != "tool_approval" or not pending.tool:
            return None
        if self.again:
            # a use an earlier attempt of this layer recorded stands (the call may have run): it
            # is not looked up, checked or counted again
            for event in await self.store.read_events_named(self.job_id, STANDING_EVENT):
                if event.data.get("request_id") == pending.request_id:
                    return dict(event.data)
        job = await self.store.get_job(self.job_id)
        if job is None:
            return None
        now = utcnow()  # the wall clock: a rule revoked or expired a moment ago covers nothing
        rules = await self.store.find_standing_approvals(
            job.flow_id, str(pending.tool.get("name") or ""), job.effective_session, job.user_id,
            now, limit=FIND_LIMIT)
        for rule in rules:
            maker = await self.store.get_user(rule.maker_id)
            if maker is None:  # a deleted user's rules end with them
                continue
            try:
                check_decider(pending, await self.access.decider(job, maker, pending))
            except SignoffError:  # they may no longer decide it (a revoked share, not an approver)
                continue
            signing = await self.keys.signing() if self.keys is not None else None
            return await record_standing_use(self.store, rule, job, pending, maker.name, now, signing)
        return None


async def check_room(store: Store, maker_id: str, cap: int, now: datetime | None = None) -> None:
    """StandingApprovalLimit when ``maker_id`` has ``cap`` rules in force already
    (SIGNOFF_MAX_STANDING_PER_USER): checked before the decision is sent and again before its
    claim, so a refused rule refuses its decision too (nothing applied)."""
    if await store.count_standing_approvals(maker_id, as_utc(now or utcnow())) >= cap:
        raise StandingApprovalLimit(
            f"You have {cap} standing approvals in force, the most one person may (SIGNOFF_MAX_STANDING_PER_USER); "
            "revoke one (DELETE /api/v1/standing-approvals/{id}, or the Standing approvals page) or decide without "
            "remember", limit=cap)


async def remember_decision(store: Store, job: Job, pending: PendingRequest, maker_id: str, remember: Remember,
                            now: datetime | None = None) -> StandingApproval:
    """The rule a recorded decision with ``remember`` makes, stored (once: its id is the
    decision's) with the run's event ``standing_approval_created``."""
    flow = await store.get_flow(job.flow_id)
    rule = make_rule(job, flow.owner_id if flow is not None else job.user_id, pending, maker_id, remember,
                     now or utcnow())
    made = await store.create_standing_approval(rule)
    await store.append_event(job.job_id, CREATED_EVENT, rule_public(made), dedupe_key=f"standing-made:{made.id}")
    return made
