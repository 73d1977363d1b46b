"""Spans and the traces they make, in SQL."""

from __future__ import annotations

from typing import Any

from signoff.engine.models import SpanRecord
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLSpans"]


class SQLSpans(SQLCore):
    """Part of SQLStore: spans and traces."""

    def _span(self, row: dict[str, Any]) -> SpanRecord:
        return SpanRecord(
            trace_id=row["trace_id"],
            span_id=row["span_id"],
            parent_id=row["parent_id"],
            name=row["name"],
            type=row["type"],
            start_time=self._dec_dt(row["start_time"]),
            end_time=self._dec_dt(row["end_time"]),
            status=row["status"],
            inputs=self._dec_json(row["inputs"]),
            outputs=self._dec_json(row["outputs"]),
            attributes=self._dec_json(row["attributes"]),
            run_id=row["run_id"],
            flow_id=row["flow_id"],
        )

    async def save_spans(self, spans: list[SpanRecord]) -> None:
        if not spans:
            return

        async def write(tx: Tx) -> None:
            users: dict[str | None, str | None] = {None: None}
            for run_id in sorted({s.run_id for s in spans} - {None}):  # in order: no lock cycle
                # saves of the run's spans at once queue here; run_id = job_id (DESIGN §1.5)
                job = await tx.fetchone(Q.lock_job_user, (run_id,))
                users[run_id] = job["user_id"] if job else None
            # the new sizes in place of the old, one usage row per user
            await self._refund(tx, await self._write_spans(tx, spans, users), spans[0].trace_id)

        await self._write(write)

    async def _write_spans(self, tx: Tx, spans: list[SpanRecord], users: dict[str | None, str | None]
                           ) -> list[dict[str, Any]]:
        """Upsert ``spans`` in ``tx``, whose job rows (``users``: run id → its user) the caller
        locked; returns what to give back (``charged_to``, ``size``): the old sizes, less the new."""
        spans = list({(s.trace_id, s.span_id): s for s in spans}.values())  # one span twice: the last
        encoded = [(self._enc_json(s.inputs), self._enc_json(s.outputs), self._enc_json(s.attributes)) for s in spans]
        sizes = [sum(self._json_octets(v) for v in e) for e in encoded]
        traces: dict[str, list[str]] = {}
        for s in spans:
            traces.setdefault(s.trace_id, []).append(s.span_id)
        old: list[dict[str, Any]] = []  # what the spans saved before counted (a span's end)
        for trace_id, span_ids in traces.items():
            for i in range(0, len(span_ids), 500):
                chunk = span_ids[i:i + 500]
                old += await tx.fetchall(Q.spans_stored.format(ids=", ".join("?" for _ in chunk)),
                                         (trace_id, *chunk))
        rows = [(s.trace_id, s.span_id, s.parent_id, s.name, s.type, self._enc_dt(s.start_time),
                 self._enc_dt(s.end_time), s.status, inputs, outputs, attributes, s.run_id, s.flow_id, size,
                 users.get(s.run_id)) for s, (inputs, outputs, attributes), size in zip(spans, encoded, sizes)]
        await tx.executemany(Q.upsert_span, rows)
        return old + [{"charged_to": r[-1], "size": -r[-2]} for r in rows]

    async def get_trace(self, trace_id: str) -> list[SpanRecord]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.trace, (trace_id,))
        return [self._span(r) for r in rows]

    async def list_traces(
        self, *, flow_id: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest first. ``status`` is "error" when any span failed, else the root span's status,
        else "ok" once every span has ended. The filters are part of the query, before its LIMIT
        (see Store.list_traces)."""
        conditions: list[str] = []
        params: list[Any] = []
        having = ""
        if flow_id is not None:
            conditions.append(Q.traces_of_flow)
            params.append(flow_id)
        if user_id is not None:
            conditions.append(Q.traces_of_user_candidates)
            params += [user_id, user_id]
            having = f"HAVING {Q.traces_of_user}"
            params.append(user_id)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        params.append(limit)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_traces.format(where=where, having=having), params)
        out = []
        for r in rows:
            if int(r["errors"] or 0) > 0:
                status = "error"
            elif r["root_status"] and r["root_status"] != "unset":
                status = r["root_status"]
            else:
                status = "ok" if int(r["open_spans"] or 0) == 0 else "unset"
            out.append(
                {
                    "trace_id": r["trace_id"],
                    "run_id": r["run_id"],
                    "flow_id": r["flow_id"],
                    "name": r["name"],
                    "status": status,
                    "start_time": self._dec_dt(r["start_time"]),
                    "end_time": self._dec_dt(r["end_time"]) if int(r["open_spans"] or 0) == 0 else None,
                }
            )
        return out
