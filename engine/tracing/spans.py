"""The run's root span (provisional at the start, real at the end), the gate span, and the flush
that writes a run's ended spans to the store before a status says the run reached a point."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import datetime
from typing import Any, Awaitable, Callable

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode

from signoff.engine.models import AppliedDecision, PendingRequest, SpanRecord
from signoff.engine.store.base import Store
from signoff.engine.tracing.attributes import (
    A_COMPONENT,
    A_FLOW,
    A_INPUTS,
    A_JOB,
    A_KIND,
    A_OUTPUTS,
    A_RUN,
    A_VERTEX,
    MAX_VALUE_CHARS,
    base_attributes,
    gate_label,
    gate_span_name,
    json_attr,
)
from signoff.engine.tracing.ids import (
    hex_span,
    ns,
    parent_context,
    requesting,
    root_span_id,
    span_id_for,
    trace_id_for,
    tracer,
)

# Writes the spans ended so far in this context to their store (set by the SDK side around an
# activity: signoff.engine.tracing.sdk.collect_spans).
flusher: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("signoff_span_flusher", default=None)


async def flush() -> None:
    """Write the spans ended so far (in this activity) to the store now: call it before a
    status change that tells readers the run has reached a point (completed, failed), so the
    trace is complete when they look. Nothing to do without the SDK."""
    f = flusher.get()
    if f is not None:
        await f()



def run_root(*, run_id: str, flow_id: str | None, name: str, start: datetime, job_id: str | None = None
             ) -> SpanRecord:
    """The provisional root (no end time) that lists the trace as running from the start, for a
    write to carry (Store.set_status's ``spans``: the run's start in one commit, issue 33).
    :func:`close_run` replaces it."""
    return SpanRecord(
        trace_id=str(run_id),
        span_id=hex_span(root_span_id(run_id)),
        name=name,
        type="flow",
        start_time=start,
        status="unset",
        attributes={A_RUN: str(run_id), A_JOB: str(job_id or run_id), A_KIND: "flow", "signoff.status": "running"},
        run_id=str(run_id),
        flow_id=flow_id,
    )


async def open_run(
    store: Store, *, run_id: str, flow_id: str | None, name: str, start: datetime, job_id: str | None = None
) -> None:
    """Write the provisional root (:func:`run_root`) so the trace lists as running from the start.
    :func:`close_run` replaces it."""
    await store.save_spans([run_root(run_id=run_id, flow_id=flow_id, name=name, start=start, job_id=job_id)])


def close_run(
    *,
    run_id: str,
    flow_id: str | None,
    name: str,
    start: datetime,
    end: datetime,
    status: str,
    error: dict[str, Any] | None = None,
    job_id: str | None = None,
) -> None:
    """Emit the run's root span (same ids as the provisional one): OK when completed, ERROR when
    failed (with the error and the vertex it died in), ERROR described by the status for any
    other end (``cancelled``, ``timed_out``); ``signoff.status`` is the run's status."""
    attrs: dict[str, Any] = {A_RUN: str(run_id), A_KIND: "flow", "signoff.status": status}
    if job_id:
        attrs[A_JOB] = str(job_id)
    if flow_id:
        attrs[A_FLOW] = str(flow_id)
    if error:
        for key in ("error", "type", "vertex_id"):
            if error.get(key) is not None:
                attrs[f"signoff.error.{key}"] = str(error[key])[:MAX_VALUE_CHARS]
    with requesting(trace_id_for(run_id), root_span_id(run_id)):
        span = tracer().start_span(
            name, context=otel_context.Context(), kind=SpanKind.INTERNAL, attributes=attrs, start_time=ns(start)
        )
    if status == "completed":
        span.set_status(Status(StatusCode.OK))
    elif status == "failed":
        span.set_status(Status(StatusCode.ERROR, str((error or {}).get("error") or "failed")[:MAX_VALUE_CHARS]))
    else:  # cancelled, timed_out: the run did not complete (signoff.status says how it ended)
        span.set_status(Status(StatusCode.ERROR, status))
    span.end(end_time=max(ns(end), ns(start)))


# ---- the gate -------------------------------------------------------------------------------


def record_gate(
    *,
    run_id: str,
    pending: PendingRequest,
    applied: AppliedDecision,
    vertex_id: str | None = None,
    job_id: str | None = None,
    flow_id: str | None = None,
    component_type: str | None = None,
    limit: int = MAX_VALUE_CHARS,
) -> None:
    """Emit the gate span ``Human In The Loop — {label}`` for an applied decision: from the pause
    to the decision, with the action id, who decided and the rerouted action."""
    root = root_span_id(run_id)
    attrs = base_attributes(run_id, job_id, flow_id, "gate", root)
    attrs.update({
        "signoff.request_id": applied.request_id,
        "signoff.request_kind": pending.kind,
        "signoff.action_id": applied.action_id,
        "signoff.action_label": gate_label(pending, applied.action_id),
        "signoff.requested_action": applied.requested_action,
        "signoff.decided_by": applied.decided_by or "",
        "signoff.rerouted": applied.rerouted,
        A_INPUTS: json_attr({"prompt": pending.prompt, "options": [o.label for o in pending.options]}, limit),
        A_OUTPUTS: json_attr({"action_id": applied.action_id, "values": applied.values}, limit),
    })
    if applied.rerouted:
        attrs["signoff.rerouted_action"] = applied.action_id
        attrs["signoff.timeout_seconds"] = applied.timeout_seconds
    if vertex_id:
        attrs[A_VERTEX] = vertex_id
        attrs[A_COMPONENT] = component_type or ("HumanInput" if pending.kind == "node_input" else "tool_approval")
    start, end = ns(pending.paused_at), ns(applied.decided_at)
    with requesting(None, span_id_for(str(run_id), "gate", applied.request_id)):
        span = tracer().start_span(
            gate_span_name(pending, applied.action_id), context=parent_context(run_id), attributes=attrs,
            start_time=start,
        )
    span.set_status(Status(StatusCode.OK))
    span.end(end_time=max(start, end))