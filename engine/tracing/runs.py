"""The one-trace story for a run driven in one process (the in-process runner)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from signoff.engine.graph import Graph
from signoff.engine.state import RunState
from signoff.engine.models import AppliedDecision, as_utc
from signoff.engine.store.base import Store
from signoff.engine.tracing.attributes import MAX_VALUE_CHARS
from signoff.engine.tracing.spans import close_run, flush, open_run, record_gate
from signoff.engine.tracing.vertex import RunTracer


class RunTracing:
    """The one-trace story for a run driven in one process (``engine.runner.InProcessRunner``,
    a synchronous in-process path): the same root, vertex and gate spans as a run on Temporal.

    The runner calls :meth:`started` once, :meth:`hooks` for each layer, :meth:`decided` when a
    decision is applied, :meth:`paused` at a pause and :meth:`ended` when the run ends
    (completed, failed or cancelled). Spans go wherever the process's SDK sends them (the span
    sink of ``signoff.engine.tracing.sdk.collect_spans``, an OTLP exporter); :meth:`paused` and
    :meth:`ended` call :func:`flush`.

    ``store``: when given, :meth:`started` writes the provisional root (:func:`open_run`) so the
    trace lists as running. ``started_at(state)``: the run's start time when known outside the
    runner (a job's ``created_at``); else the time :meth:`started` saw, else (a resume in a new
    process) the ``paused_at`` of the pause it resumes from. ``name``: the root's name (default: the flow's)."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        started_at: Callable[[RunState], datetime | None] | None = None,
        name: str | None = None,
        limit: int = MAX_VALUE_CHARS,
    ) -> None:
        self.store = store
        self.started_at = started_at
        self.name = name
        self.limit = limit
        self._starts: dict[str, datetime] = {}

    def root_name(self, state: RunState) -> str:
        return self.name or str((state.flow or {}).get("name") or state.flow_id or "flow")

    def start_of(self, state: RunState) -> datetime:
        known = self.started_at(state) if self.started_at is not None else None
        if known is None:
            known = self._starts.get(state.run_id)
        if known is None:
            times = [d.decided_at for d in state.decisions]
            if state.pending is not None:
                times.append(state.pending.paused_at)
            known = min(times) if times else None
        return as_utc(known) if known is not None else datetime.now(timezone.utc)

    async def started(self, state: RunState, *, start: datetime) -> None:
        self._starts.setdefault(state.run_id, as_utc(start))
        if self.store is not None:
            await open_run(self.store, run_id=state.run_id, job_id=state.job_id, flow_id=state.flow_id,
                           name=self.root_name(state), start=self.start_of(state))

    def hooks(self, graph: Graph, state: RunState) -> dict[str, Any]:
        """The context hooks (:meth:`RunTracer.hooks`) for one layer built from ``state``."""
        return RunTracer(graph, state, limit=self.limit).hooks()

    def decided(self, state: RunState, applied: AppliedDecision) -> None:
        """The gate span of a decision applied to ``state`` (the state before the decision)."""
        if state.pending is None:
            return
        # a resume in a new process: the run started before this pause at the latest
        self._starts.setdefault(state.run_id, state.pending.paused_at)
        record_gate(run_id=state.run_id, pending=state.pending, applied=applied, vertex_id=state.pending_vertex,
                    job_id=state.job_id, flow_id=state.flow_id, limit=self.limit)

    async def paused(self, state: RunState) -> None:
        await flush()

    async def ended(self, state: RunState, *, status: str, end: datetime,
                    error: dict[str, Any] | None = None) -> None:
        close_run(run_id=state.run_id, job_id=state.job_id, flow_id=state.flow_id, name=self.root_name(state),
                  start=self.start_of(state), end=as_utc(end), status=status, error=error)
        self._starts.pop(state.run_id, None)
        await flush()
