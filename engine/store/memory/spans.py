"""Spans and traces, in memory."""

from __future__ import annotations

import json
from typing import Any

from signoff.engine.models import SpanRecord
from signoff.engine.store.encoding import as_utc, dumps, octets
from signoff.engine.store.memory.core import _first, MemoryCore, _Span


class MemorySpans(MemoryCore):
    """Part of MemoryStore: spans."""

    @staticmethod
    def _span(row: _Span) -> SpanRecord:
        return SpanRecord(
            trace_id=row.trace_id,
            span_id=row.span_id,
            parent_id=row.parent_id,
            name=row.name,
            type=row.type,
            start_time=row.start_time,
            end_time=row.end_time,
            status=row.status,  # type: ignore[arg-type]  # stored from a SpanRecord
            inputs=json.loads(row.inputs),
            outputs=json.loads(row.outputs),
            attributes=json.loads(row.attributes),
            run_id=row.run_id,
            flow_id=row.flow_id,
        )

    async def save_spans(self, spans: list[SpanRecord]) -> None:
        """Upsert by (trace_id, span_id); every span is encoded before the first is stored."""
        rows = [
            _Span(
                trace_id=s.trace_id,
                span_id=s.span_id,
                parent_id=s.parent_id,
                name=s.name,
                type=s.type,
                start_time=as_utc(s.start_time),
                end_time=as_utc(s.end_time) if s.end_time is not None else None,
                status=s.status,
                inputs=dumps(s.inputs),
                outputs=dumps(s.outputs),
                attributes=dumps(s.attributes),
                run_id=s.run_id,
                flow_id=s.flow_id,
            )
            for s in spans
        ]
        if not rows:
            return
        t = self._tables()
        for row in rows:
            row.size = octets(row.inputs) + octets(row.outputs) + octets(row.attributes)
            row.charged_to = self._job_user(t, row.run_id)  # run_id = job_id (DESIGN §1.5)
            old = t.spans.get((row.trace_id, row.span_id))
            if old is not None:  # saved again (its end): its new size counts instead of the old
                self._charge(t, old.charged_to, -old.size)
            t.spans[(row.trace_id, row.span_id)] = row
            self._charge(t, row.charged_to, row.size)

    async def get_trace(self, trace_id: str) -> list[SpanRecord]:
        found = [r for r in self._tables().spans.values() if r.trace_id == trace_id]
        return [self._span(r) for r in sorted(found, key=lambda r: (r.start_time, r.span_id))]

    async def list_traces(
        self, *, flow_id: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest first. ``status`` is "error" when any span failed, else the root span's status,
        else "ok" once every span has ended. Filtered before the limit (see Store.list_traces)."""
        t = self._tables()
        traces: dict[str, list[_Span]] = {}
        for row in t.spans.values():
            traces.setdefault(row.trace_id, []).append(row)
        if flow_id is not None:
            traces = {k: v for k, v in traces.items() if any(s.flow_id == flow_id for s in v)}
        if user_id is not None:
            runs = {r.job_id for r in t.jobs.values() if r.user_id == user_id}  # run_id = job_id
            traces = {
                k: v
                for k, v in traces.items()
                if max((s.run_id for s in v if s.run_id is not None), default=k) in runs
            }
        out = []
        for trace_id, spans in traces.items():
            root = min(spans, key=lambda s: (s.parent_id is not None, s.start_time))
            open_spans = sum(1 for s in spans if s.end_time is None)
            if any(s.status == "error" for s in spans):
                status = "error"
            elif root.status and root.status != "unset":
                status = root.status
            else:
                status = "ok" if open_spans == 0 else "unset"
            out.append(
                {
                    "trace_id": trace_id,
                    "run_id": max((s.run_id for s in spans if s.run_id is not None), default=None),
                    "flow_id": max((s.flow_id for s in spans if s.flow_id is not None), default=None),
                    "name": root.name,
                    "status": status,
                    "start_time": min(s.start_time for s in spans),
                    "end_time": max(s.end_time for s in spans if s.end_time is not None) if open_spans == 0 else None,
                }
            )
        out.sort(key=lambda r: r["trace_id"])
        out.sort(key=lambda r: r["start_time"], reverse=True)  # stable: ties stay by trace_id
        return _first(out, limit)
