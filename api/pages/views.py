"""What the pages show, read from the store and shaped for the templates. No rule lives here:
who may see what is :mod:`signoff.service.access`'s, deciding is the service's; this module only
tells the story a run's records hold (its event log, spans, chat history, flow)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from signoff.engine.decisions import deadline, late_action
from signoff.engine.models import EXPIRED_ACTION, Event, FlowRecord, Job, JobStatus, PendingRequest, SpanRecord, utcnow
from signoff.engine.store.base import Store

# ---- small formatting helpers (also template filters) --------------------------------------------


def aware(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    when = aware(when)
    if when is None:
        return ""
    seconds = ((now or utcnow()) - when).total_seconds()
    if seconds < 45:
        return "just now"
    text = duration_text(seconds)
    if " min " in text and text.endswith(" s"):  # "3 min 12 s" -> "3 min"
        text = text.rsplit(" ", 2)[0]
    return text + " ago"


def stamp(when: datetime | None) -> str:
    when = aware(when)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else ""


def clock(when: datetime | None) -> str:
    when = aware(when)
    return when.strftime("%H:%M:%S") if when else ""


def iso(when: datetime | None) -> str:
    when = aware(when)
    return when.isoformat() if when else ""


def compact_json(value: Any, limit: int = 4000) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str, sort_keys=False)
    return text if len(text) <= limit else text[:limit] + "\n…"


STATUS_TEXT = {
    "queued": ("Queued", "circle"),
    "in_progress": ("Running", "running"),
    "suspended": ("Waiting for a decision", "pause"),
    "completed": ("Completed", "check"),
    "failed": ("Failed", "x"),
    "cancelled": ("Cancelled", "ban"),
    "timed_out": ("Timed out", "clock"),
}


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
    current = job.pending if job.pending is not None and job.pending.request_id == request_id else None
    if events is None:
        events = await store.read_events(job.job_id, limit=100_000)
    asked, after = _request_events(events, request_id)
    request = current or asked
    if request is None:
        return None
    outcome = await _outcome(names, job, request, after, waiting=current is not None and
                             job.status == JobStatus.suspended)
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
                    decided_at = datetime.fromisoformat(str(d["decided_at"]))
                except ValueError:
                    decided_at = ev.created_at
            vote_list = d.get("votes") or votes
            for v in vote_list:
                v.setdefault("user_name", await names.user(v.get("user")))
            return Outcome("decided", title, action_id=action, action_label=label, decided_by=who,
                           decided_at=decided_at or ev.created_at, values=d.get("values"), rerouted=rerouted,
                           requested_label=label_of(request, requested) if requested else None,
                           timed_out=timed_out, votes=vote_list)
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


# ---- the inbox ---------------------------------------------------------------------------------------


@dataclass
class InboxItem:
    job: Job
    request: PendingRequest
    flow_name: str
    owner_name: str
    mine: bool
    deadline: datetime | None

    @property
    def kind_label(self) -> str:
        return "Tool approval" if self.request.kind == "tool_approval" else "Gate"

    @property
    def quick(self) -> bool:
        """Whether its options can be chosen from the list (nothing to type)."""
        if self.request.kind == "tool_approval":
            return False
        fields = self.request.fields or {}
        return not any((fields.get(o.action_id) or {}).get("required") for o in self.request.options)

    @property
    def key(self) -> str:
        return self.request.request_id


async def inbox_items(names: Names, jobs: list[Job], me: str) -> list[InboxItem]:
    out = []
    for job in jobs:
        if job.pending is None:
            continue
        out.append(InboxItem(job=job, request=job.pending, flow_name=await names.flow_name(job.flow_id),
                             owner_name=await names.user(job.user_id), mine=job.user_id == me,
                             deadline=deadline(job.pending)))
    return out


def filter_inbox(items: list[InboxItem], *, flow: str | None, session: str | None, kind: str | None) -> list[InboxItem]:
    def keep(i: InboxItem) -> bool:
        if flow and i.job.flow_id != flow:
            return False
        if session and (i.job.session_id or "") != session:
            return False
        if kind and i.request.kind != kind:
            return False
        return True

    return [i for i in items if keep(i)]


# ---- the run -------------------------------------------------------------------------------------------

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 168, 56, 56, 20, 12

NODE_STATE_TEXT = {
    "built": ("Built", "check"),
    "decided": ("Decided", "check"),
    "paused": ("Paused", "pause"),
    "skipped": ("Skipped", "skip"),
    "failed": ("Failed", "x"),
    "running": ("Running", "running"),
    "not_reached": ("Not reached", "circle"),
}


@dataclass
class GraphNode:
    id: str
    type: str
    label: str
    state: str
    x: int
    y: int
    note: str = ""

    @property
    def state_text(self) -> str:
        return NODE_STATE_TEXT[self.state][0]

    @property
    def icon(self) -> str:
        return NODE_STATE_TEXT[self.state][1]


@dataclass
class GraphEdge:
    path: str
    live: bool


@dataclass
class Graph:
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    width: int
    height: int


def _node_label(node: dict[str, Any]) -> str:
    params = node.get("params") if isinstance(node.get("params"), dict) else {}
    return str(params.get("display_name") or node.get("id"))


def node_states(job: Job, spans: list[SpanRecord]) -> dict[str, tuple[str, str]]:
    """Each vertex's state from the run's spans and its pending request: (state, note)."""
    states: dict[str, tuple[str, str]] = {}
    for span in sorted(spans, key=lambda s: s.start_time):
        vid = span.attributes.get("signoff.vertex_id")
        if not vid or "." in str(vid) and span.type != "gate":
            continue
        vid = str(vid)
        if span.type == "gate":
            states[vid] = ("decided", str(span.attributes.get("signoff.action_label") or ""))
        elif span.status == "error":
            states[vid] = ("failed", str(span.attributes.get("signoff.error") or ""))
        elif span.attributes.get("signoff.skipped"):
            states[vid] = ("skipped", "")
        elif span.attributes.get("signoff.paused"):
            states[vid] = ("paused", "")
        elif span.end_time is None:
            states[vid] = ("running", "")
        elif vid not in states or states[vid][0] != "decided":
            states[vid] = ("built", "")
    if job.status == JobStatus.suspended and job.pending is not None:
        vid = job.pending.request_id.split(":", 1)[0]
        states[vid] = ("paused", "Waiting for a decision")
    if job.status == JobStatus.failed and job.error and job.error.get("vertex_id"):
        states[str(job.error["vertex_id"])] = ("failed", str(job.error.get("error") or ""))
    return states


def layout(spec: dict[str, Any], states: dict[str, tuple[str, str]]) -> Graph:
    """The flow drawn left to right: a vertex's column is the longest path to it."""
    nodes = [n for n in spec.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("id"), str)]
    ids = [n["id"] for n in nodes]
    known = set(ids)
    edges = []
    for e in spec.get("edges") or []:
        if not isinstance(e, dict):
            continue
        src = str(e.get("from", "")).split(".", 1)[0]
        dst = str(e.get("to", "")).split(".", 1)[0]
        if src in known and dst in known and src != dst:
            edges.append((src, dst))
    column = {i: 0 for i in ids}
    for _ in range(len(ids)):  # longest path by relaxation (a loop's back edge just stops changing it)
        changed = False
        for src, dst in edges:
            if column[dst] < column[src] + 1 and column[src] + 1 < len(ids):
                column[dst] = column[src] + 1
                changed = True
        if not changed:
            break
    rows: dict[int, int] = {}
    out_nodes: dict[str, GraphNode] = {}
    for n in nodes:
        col = column[n["id"]]
        row = rows.get(col, 0)
        rows[col] = row + 1
        state, note = states.get(n["id"], ("not_reached", ""))
        out_nodes[n["id"]] = GraphNode(id=n["id"], type=str(n.get("type", "")), label=_node_label(n), state=state,
                                       note=note, x=PAD + col * (NODE_W + GAP_X), y=PAD + row * (NODE_H + GAP_Y))
    out_edges = []
    for src, dst in edges:
        a, b = out_nodes[src], out_nodes[dst]
        x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
        x2, y2 = b.x, b.y + NODE_H // 2
        if x2 <= x1:  # a back edge (a loop): around the bottom
            low = max(a.y, b.y) + NODE_H + GAP_Y // 2
            path = f"M{x1},{y1} C{x1 + 40},{y1} {x1 + 40},{low} {x1},{low} L{x2},{low} C{x2 - 40},{low} {x2 - 40},{y2} {x2},{y2}"
        else:
            mid = (x1 + x2) // 2
            path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
        live = a.state in ("built", "decided") and b.state not in ("not_reached",)
        out_edges.append(GraphEdge(path=path, live=live))
    width = PAD * 2 + (max(column.values(), default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values(), default=1) * (NODE_H + GAP_Y) - GAP_Y + GAP_Y
    return Graph(nodes=list(out_nodes.values()), edges=out_edges, width=width, height=height)


@dataclass
class SpanView:
    span: SpanRecord
    depth: int
    offset_pct: float
    width_pct: float
    duration: float | None
    children: int

    @property
    def error(self) -> str:
        a = self.span.attributes
        return str(a.get("signoff.error") or a.get("exception.message") or "")


def span_rows(spans: list[SpanRecord], now: datetime | None = None) -> tuple[list[SpanView], float]:
    """The span tree flattened depth first (parents before children, by start), each with its
    place on the run's timeline (percent of the whole) and its duration; and the total."""
    if not spans:
        return [], 0.0
    now = now or utcnow()
    by_id = {s.span_id: s for s in spans}
    kids: dict[str | None, list[SpanRecord]] = {}
    for s in spans:
        parent = s.parent_id if s.parent_id in by_id and s.parent_id != s.span_id else None
        kids.setdefault(parent, []).append(s)
    for group in kids.values():
        group.sort(key=lambda s: (aware(s.start_time), s.span_id))
    start = min(aware(s.start_time) for s in spans)
    end = max(aware(s.end_time) or now for s in spans)
    total = max((end - start).total_seconds(), 1e-6)
    out: list[SpanView] = []
    seen: set[str] = set()

    def walk(parent: str | None, depth: int) -> None:
        for s in kids.get(parent, []):
            if s.span_id in seen:
                continue
            seen.add(s.span_id)
            s_start = aware(s.start_time)
            s_end = aware(s.end_time)
            dur = (s_end - s_start).total_seconds() if s_end else None
            offset = (s_start - start).total_seconds() / total * 100
            width = ((s_end or now) - s_start).total_seconds() / total * 100
            out.append(SpanView(span=s, depth=depth, offset_pct=round(max(offset, 0), 3),
                                width_pct=round(max(min(width, 100 - offset), 0.4), 3), duration=dur,
                                children=len(kids.get(s.span_id, []))))
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return out, total


@dataclass
class EventView:
    event: Event
    summary: str


async def event_views(names: Names, events: list[Event]) -> list[EventView]:
    out = []
    for ev in events:
        d = ev.data
        if ev.event == "human_input_required":
            text = f"Asked: {', '.join(o.get('label', '') for o in d.get('options', []))}"
        elif ev.event == "human_input_decision":
            who = await names.user(d.get("decided_by")) if d.get("decided_by") else "the deadline"
            text = f"{d.get('action_id')} by {who}"
        elif ev.event == "human_input_vote":
            text = f"vote {d.get('action_id')} by {await names.user(d.get('user'))} ({d.get('votes')}/{d.get('required')})"
        elif ev.event == "human_input_expired":
            text = f"late: {d.get('requested_action') or 'no answer'} rerouted to {d.get('rerouted_to')}"
        elif ev.event == "run_cancelled":
            text = f"reason: {d.get('reason')}" + (f", by run {d['superseded_by']}" if d.get("superseded_by") else "")
        elif ev.event == "run_failed":
            text = str(d.get("error") or "")
        elif ev.event == "end":
            text = str(d.get("status") or "")
        else:
            text = json.dumps(d, ensure_ascii=False, default=str)[:200]
        out.append(EventView(event=ev, summary=text))
    return out


def run_duration(job: Job) -> float | None:
    end = aware(job.finished_at) if job.finished_at else (None if not job.status.terminal else aware(job.updated_at))
    start = aware(job.created_at)
    if start is None:
        return None
    return ((end or utcnow()) - start).total_seconds()


def output_text(job: Job) -> str | None:
    result = job.result or {}
    output = result.get("output")
    if isinstance(output, dict) and output.get("text") is not None:
        return str(output["text"])
    if isinstance(output, str):
        return output
    return None


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


def time_left(due: datetime | None, now: datetime | None = None) -> str:
    if due is None:
        return ""
    left = (aware(due) - (now or utcnow())).total_seconds()
    if left <= 0:
        return "past its deadline"
    return duration_text(left) + " left"


def deadline_passed(due: datetime | None) -> bool:
    return due is not None and aware(due) <= utcnow()

