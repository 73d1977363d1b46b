"""A waiting request's rules in words, before anyone breaks them (DESIGN §9, issue 29): how many
approvals it needs and has, who voted, whom it still waits on (a group with its members), whom
it escalates to and when; and where the person reading it stands: whether they may decide it,
and if not, why ("You started this run; someone else must approve it"), or that they voted and
it waits on others. The rules themselves are the engine's (engine/decisions.py: check_decider,
count_vote), asked here exactly as the service asks them before a resume, so the page offers
only what the server would take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from signoff.engine.access import Access, current_approvers
from signoff.engine.decisions import check_decider
from signoff.engine.errors import Forbidden, NotAnApprover
from signoff.engine.models import Job, PendingRequest, User, as_utc, utcnow

from signoff.api.pages.views import Names

MAX_NAMED = 6  # the people a line names (a group of thousands is "and N more", each never read)


@dataclass
class Standing:
    """Where the reader stands on an open request: ``reason`` why they may not decide it (no
    buttons then), or ``voted``: they voted and it waits on others (no buttons either)."""

    reason: str | None = None
    voted: str | None = None

    @property
    def may_decide(self) -> bool:
        return self.reason is None and self.voted is None


def in_time(seconds: float) -> str:
    """A time ahead, as people say it: "in 2 days", "in 3 hours", "in 5 min", "in a moment"."""
    if seconds < 60:
        return "in a moment"
    if seconds < 3600:
        return f"in {int(seconds // 60)} min"
    if seconds < 36 * 3600:
        hours = round(seconds / 3600)
        return "in 1 hour" if hours == 1 else f"in {hours} hours"
    return f"in {round(seconds / 86400)} days"


def _names(people: list[str], more: int = 0) -> str:
    if more:
        return ", ".join(people) + f" and {more} more"
    if len(people) <= 2:
        return " and ".join(people)
    return ", ".join(people[:-1]) + " and " + people[-1]


def _verb(req: PendingRequest) -> str:
    label = next((o.label for o in req.options if o.action_id == req.quorum_action), req.quorum_action or "")
    return "approved" if label.lower().startswith("approv") else f"chose “{label}”"


async def _waiting_on(names: Names, refs: list[str], voted: set[str]) -> str:
    """Whom the request still waits on: people by name, groups with their members who have not
    voted (at most MAX_NAMED people named in all; the rest counted, never looked up)."""
    parts: list[str] = []
    budget = MAX_NAMED
    for ref in refs[:MAX_NAMED]:
        if ref.startswith("user:"):
            uid = ref[len("user:"):]
            if uid not in voted:
                parts.append(await names.user(uid))
                budget -= 1
        elif ref.startswith("group:"):
            owner, _, gname = ref[len("group:"):].partition("/")
            group = await names.store.get_group(owner, gname)
            left = [m for m in (group.members if group else []) if m not in voted]
            shown = sorted([await names.user(m) for m in left[:max(1, budget)]], key=str.lower)
            budget -= len(shown)
            extra = len(left) - len(shown)
            parts.append(f"{gname} ({_names(shown, extra)})" if shown else f"{gname} (nobody in it)")
    if len(refs) > MAX_NAMED:
        parts.append(f"{len(refs) - MAX_NAMED} more")
    return ", ".join(parts)


async def rules_line(names: Names, job: Job, req: PendingRequest, votes: list[dict[str, Any]],
                     now: datetime | None = None) -> str | None:
    """"1 of 2 approvals · bob approved · waiting on finance (dave, erin) · escalates to carol in
    2 days", for a request that names approvers, needs several or escalates; None for a plain
    gate its run's owner decides alone."""
    named = bool(req.approvers or req.approver_refs)
    escalates = bool(req.escalate_after_seconds and req.escalate_to)
    if not named and req.required_approvals <= 1 and not escalates:
        return None
    parts: list[str] = []
    voted = {str(v.get("user")) for v in votes}
    if not req.allow_self_approval and job.user_id:
        voted.add(job.user_id)  # named or not, the run's owner may not decide it: nobody waits on them
    if req.required_approvals > 1:
        parts.append(f"{len(votes)} of {req.required_approvals} approvals")
    if votes:
        who = [str(v.get("user_name") or v.get("user")) for v in votes[:MAX_NAMED]]
        parts.append(f"{_names(who, max(0, len(votes) - MAX_NAMED))} {_verb(req)}")
    refs = await current_approvers(names.store, job) if job.waits_for(req.request_id) else list(req.approver_refs)
    if refs:
        waiting = await _waiting_on(names, refs, voted)
        if waiting:
            parts.append(f"waiting on {waiting}")
    elif named:
        parts.append("waiting on " + _names(req.approvers[:MAX_NAMED], max(0, len(req.approvers) - MAX_NAMED)))
    else:
        parts.append(f"waiting on {await names.user(job.user_id)}")
    if escalates:
        to = _names(req.escalate_to[:MAX_NAMED], max(0, len(req.escalate_to) - MAX_NAMED))
        due = as_utc(req.paused_at) + timedelta(seconds=req.escalate_after_seconds)
        left = (due - (now or utcnow())).total_seconds()
        parts.append(f"escalates to {to} {in_time(left)}" if left > 0 else f"escalated to {to}")
    return " · ".join(parts)


async def standing(access: Access, user: User, job: Job, req: PendingRequest,
                   votes: list[dict[str, Any]]) -> Standing:
    """Where ``user`` stands on ``job``'s waiting request ``req`` (:class:`Standing`), by the
    engine's own rule (check_decider with the approvers as they are now)."""
    pending = await access.current_request(job, req.request_id)
    if pending is None:
        return Standing()
    decider = await access.decider(job, user, pending)
    try:
        check_decider(pending, decider)
    except Forbidden:
        return Standing(reason="You may no longer run this flow, so you may not decide its runs.")
    except NotAnApprover:
        if decider.owner and not pending.allow_self_approval:
            return Standing(reason="You started this run; someone else must approve it.")
        return Standing(reason="This request is for its approvers to decide, and you are not one of them.")
    if any(v.get("user") == user.id for v in votes):
        left = max(0, pending.required_approvals - len(votes))
        return Standing(voted=f"You {_verb(pending)} · waiting for {left} more")
    return Standing()


async def mark(access: Access, user: User, items: list[Any]) -> None:
    """Each inbox row's :class:`Standing` for ``user`` (``item.standing``): a row they may not
    decide, or voted on, is drawn without its buttons. A row naming no approvers is the reader's
    own plain gate (Store.inbox lists no other): it is not read again (a page of the inbox stays
    a page of reads; a flow unshared since is still refused by the service when decided)."""
    for item in items:
        if not (item.request.approvers or item.request.approver_refs or item.request.escalate_to):
            continue
        votes = [{"user": v.user} for v in await access.votes(item.job.job_id, item.request.request_id)] \
            if item.request.quorum_action else []
        item.standing = await standing(access, user, item.job, item.request, votes)
