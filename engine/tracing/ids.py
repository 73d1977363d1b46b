"""Trace and span ids derived from the run (the trace id is the run id), the contexts that put a
process's work into a run's trace, and the tracer. See the package docstring."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from signoff.engine.models import as_utc

TRACER_NAME = "signoff"


@dataclass(frozen=True)
class RequestedIds:
    trace_id: int | None = None
    span_id: int | None = None


# The ids the next span started in this context should get (read by the SDK id generator).
requested_ids: ContextVar[RequestedIds | None] = ContextVar("signoff_requested_ids", default=None)
# The vertex span being built in this task (nested runs hang their spans under it).


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def trace_id_for(run_id: str) -> int:
    """The run's 128-bit trace id: the uuid itself (hex without dashes in a collector), else a
    hash of the id."""
    try:
        value = uuid.UUID(str(run_id)).int
    except ValueError:
        value = int.from_bytes(hashlib.sha256(str(run_id).encode()).digest()[:16], "big")
    return value or 1


def span_id_for(*parts: str) -> int:
    """A deterministic, non-zero 64-bit span id."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def root_span_id(run_id: str) -> int:
    return span_id_for(str(run_id), "root")


def hex_span(span_id: int) -> str:
    return format(span_id, "016x")


def hex_trace(trace_id: int) -> str:
    return format(trace_id, "032x")


def root_context(run_id: str) -> otel_context.Context:
    """An OpenTelemetry context whose current span stands for the run's root span."""
    sc = SpanContext(
        trace_id=trace_id_for(run_id),
        span_id=root_span_id(run_id),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(sc))


@contextlib.contextmanager
def run_context(run_id: str) -> Iterator[None]:
    """Make the run's root the current span: what a process starts (Temporal client calls:
    start, resume Update) joins the run's trace."""
    token = otel_context.attach(root_context(run_id))
    try:
        yield
    finally:
        otel_context.detach(token)



def parent_context(run_id: str) -> otel_context.Context:
    """The current context when its span belongs to the run's trace (e.g. Temporal's
    RunActivity span), else the run's root."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid and current.trace_id == trace_id_for(run_id):
        return otel_context.get_current()
    return root_context(run_id)


@contextlib.contextmanager
def requesting(trace_id: int | None, span_id: int | None) -> Iterator[None]:
    """The next span started in this block gets these ids (from the SDK's id generator)."""
    token = requested_ids.set(RequestedIds(trace_id, span_id))
    try:
        yield
    finally:
        requested_ids.reset(token)


def ns(dt: datetime) -> int:
    return int(as_utc(dt).timestamp() * 1_000_000_000)
