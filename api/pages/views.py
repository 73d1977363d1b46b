"""One request of a run, whatever became of it, as the card, the run page, the history and the
inbox's live stream tell it: read from the run's event log (who asked, voted, decided, or what
closed it). No rule lives here: who may see what is :mod:`signoff.service.access`'s, deciding is
the service's; this module only tells the story a run's records hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from signoff.engine.decisions import deadline, late_action
from signoff.engine.models import EXPIRED_ACTION, Event, FlowRecord, Job, PendingRequest, as_utc
from signoff.engine.store.base import Store

# ---- names -----------------------------------------------------------------------------------------


class Names:
    """User and flow names, each looked up once per page."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._users: dict[str, str] = {}
        self._flows: dict[tuple[str, int | None], FlowRecord | None] = {}

    async def user(self, user_id: str | None) -> str:
        if not user_id:
            return ""
        if user_id not in self._users:
            found = await self.store.get_user(user_id)
            self._users[user_id] = found.name if found else user_id
        return self._users[user_id]

    async def flow(self, flow_id: str, version: int | None = None) -> FlowRecord | None:
        key = (flow_id, version)
        if key not in self._flows:
            self._flows[key] = await self.store.get_flow(flow_id, version=version) if version else \
                await self.store.get_flow(flow_id)
        return self._flows[key]

    async def flow_name(self, flow_id: str) -> str:
        flow = await self.flow(flow_id)
        return flow.name if flow else flow_id


# ---- one request, whatever became of it --------------------------------------------------------------


@dataclass
class Outcome:
    state: str  # open, decided, applying, superseded, expired, stopped, cancelled, failed
    title: str  # what a person reads first: "Approved by alice", "Superseded by a new run"
    action_id: str | None = None
    action_label: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    values: dict[str, Any] | None = None
    rerouted: bool = False
    requested_label: str | None = None
    timed_out: bool = False
    superseded_by: str | None = None
    votes: list[dict[str, Any]] = field(default_factory=list)
    via: str | None = None  # the channel the decision came through (page, api, link, slack, ...)

    @property
    def mark(self) -> tuple[str, str]:
        """How the outcome is marked in lists (History, the card): ``(kind, icon)``, one kind per
        way a request ends, so a rejection never wears an approval's green check: approve,
        reject, respond, decided (another option), expired, superseded, stopped, failed, closed."""
        if self.state == "decided":
            words = f"{self.action_id or ''} {self.action_label or ''}".lower()
            if self.action_id == EXPIRED_ACTION or self.timed_out:
                return "expired", "clock"
            if any(w in words for w in REJECT_WORDS):
                return "reject", "x"
            if self.action_id in ("approve", "edit") or "approv" in words:
                return "approve", "check"
            if self.action_id == "respond":
                return "respond", "arrow"
            return "decided", "dot"
        return {"expired": ("expired", "clock"), "superseded": ("superseded", "skip"), "stopped": ("stopped", "ban"),
                "failed": ("failed", "alert")}.get(self.state, ("closed", "ban"))


REJECT_WORDS = ("reject", "deny", "denied", "decline")  # an option people read as a no


@dataclass
class RequestView:
    job: Job
    request: PendingRequest
    outcome: Outcome
    flow_name: str
    owner_name: str
    deadline: datetime | None = None
    late_label: str | None = None

    @property
    def is_open(self) -> bool:
        return self.outcome.state == "open"

    @property
    def kind_label(self) -> str:
        return "Tool approval" if self.request.kind == "tool_approval" else "Gate"


def label_of(request: PendingRequest, action_id: str | None) -> str:
    if action_id is None:
        return ""
    if action_id == EXPIRED_ACTION:
        return "Expired (no branch)"
    if action_id == "fallback":
        return "Fallback"
    if request.kind == "tool_approval" and action_id == "edit":
        return "Approve edited call"  # the button's words, not the engine's option label "Edit"
    for option in request.options:
        if option.action_id == action_id:
            return option.label
    return action_id.replace("_", " ").capitalize()


def _request_events(events: list[Event], request_id: str) -> tuple[PendingRequest | None, list[Event]]:
    """The request as it was asked, and the events after it."""
    asked, after = None, []
    for ev in events:
        if asked is None:
            if ev.event == "human_input_required" and ev.data.get("request_id") == request_id:
                try:
                    asked = PendingRequest.model_validate(ev.data)
                except ValueError:
                    return None, []
        else:
            after.append(ev)
    return asked, after


async def request_view(store: Store, names: Names, job: Job, request_id: str,
                       events: list[Event] | None = None) -> RequestView | None:
    """The request ``request_id`` of ``job``: as it waits, or what became of it. None when the
    job never asked it."""
    current = job.pending if job.waits_for(request_id) else None
    if events is None:
        events = await store.read_events(job.job_id, limit=100_000)
    asked, after = _request_events(events, request_id)
    request = current or asked
    if request is None:
        return None
    outcome = await _outcome(names, job, request, after, waiting=current is not None)
    due = deadline(request)
    late = None
    if due is not None:
        action, _ = late_action(request)
        late = label_of(request, action)
    return RequestView(job=job, request=request, outcome=outcome, flow_name=await names.flow_name(job.flow_id),
                       owner_name=await names.user(job.user_id), deadline=due, late_label=late)


async def _outcome(names: Names, job: Job, request: PendingRequest, after: list[Event], *, waiting: bool) -> Outcome:
    rid = request.request_id
    votes = [ev.data for ev in after if ev.event == "human_input_vote" and ev.data.get("request_id") == rid]
    for v in votes:
        v["user_name"] = await names.user(v.get("user"))
    if waiting:
        return Outcome("open", "Waiting for a decision", votes=votes)
    requested = None
    for ev in after:
        if ev.event == "human_input_expired" and ev.data.get("request_id") == rid:
            requested = ev.data.get("requested_action")
        if ev.event == "human_input_decision" and ev.data.get("request_id") == rid:
            d = ev.data
            action = d.get("action_id")
            who = await names.user(d.get("decided_by"))
            label = label_of(request, action)
            timed_out = bool(d.get("timed_out"))
            rerouted = bool(requested) or bool(d.get("rerouted")) or timed_out
            if timed_out:
                title = f"{label}: applied by its deadline (nobody answered)"
            elif rerouted and requested:
                title = f"{label_of(request, requested)} by {who}, too late: rerouted to {label}"
            else:
                title = f"{label} by {who}" if who else label
            decided_at = None
            if d.get("decided_at"):
                try:
                    decided_at = as_utc(datetime.fromisoformat(str(d["decided_at"])))
                except ValueError:
                    decided_at = ev.created_at
            vote_list = d.get("votes") or votes
            for v in vote_list:
                v.setdefault("user_name", await names.user(v.get("user")))
            return Outcome("decided", title, action_id=action, action_label=label, decided_by=who,
                           decided_at=decided_at or ev.created_at, values=d.get("values"), rerouted=rerouted,
                           requested_label=label_of(request, requested) if requested else None,
                           timed_out=timed_out, votes=vote_list, via=d.get("via"))
        if ev.event == "human_input_required" and ev.data.get("request_id") != rid:
            break  # the run asked something else: this one was answered before (its event is above)
    for ev in after:
        if ev.event == "run_cancelled":
            reason = ev.data.get("reason")
            if reason == "superseded":
                return Outcome("superseded", "Superseded by a new run", superseded_by=ev.data.get("superseded_by"),
                               decided_at=ev.created_at)
            if reason == "stopped":
                return Outcome("stopped", "Closed: the run was stopped", decided_at=ev.created_at)
            if reason == "flow_deleted":
                return Outcome("cancelled", "Closed: its flow was deleted", decided_at=ev.created_at)
            return Outcome("cancelled", "Closed: the run was cancelled", decided_at=ev.created_at)
        if ev.event == "run_timed_out":
            return Outcome("expired", "Expired", decided_at=ev.created_at)
        if ev.event == "run_failed":
            return Outcome("failed", "Closed: the run failed", decided_at=ev.created_at)
    if job.status.terminal:
        return Outcome("cancelled", f"Closed: the run is {job.status.value.replace('_', ' ')}")
    return Outcome("applying", "A decision is being applied")


def request_ids_of(events: list[Event]) -> list[str]:
    seen: list[str] = []
    for ev in events:
        if ev.event == "human_input_required":
            rid = ev.data.get("request_id")
            if isinstance(rid, str) and rid not in seen:
                seen.append(rid)
    return seen


def requests_decided_by(events: list[Event], user_id: str) -> set[str]:
    """The request ids ``user_id`` decided or voted on, by the log."""
    return {str(ev.data.get("request_id")) for ev in events
            if (ev.event == "human_input_decision" and ev.data.get("decided_by") == user_id)
            or (ev.event == "human_input_vote" and ev.data.get("user") == user_id)}

