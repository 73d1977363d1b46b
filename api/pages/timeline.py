"""A run's story as the run page lists it: its spans as a timeline (a flattened tree, each
with its place on the run's time) and its event log in a line each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from signoff.engine.models import Event, SpanRecord, utcnow

from signoff.api.pages.formatting import aware
from signoff.api.pages.views import Names


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

