"""The OpenTelemetry SDK where signoff's processes start (worker, API, `signoff dev`, `signoff run`).

:func:`install` sets one process-wide ``TracerProvider`` (idempotent) with:

- signoff's id generator, which gives the ids ``engine.tracing`` asks for (the trace id is the
  run id, span ids derived from the run, so retries and restarts rewrite the same spans);
- a processor that hands signoff's own spans (instrumentation scope ``signoff``) to the
  **span sink** of the activity that ended them; :class:`SpanFlushInterceptor` writes the sink
  to the store (``Store.save_spans``) **before the activity returns** (:func:`collect_spans`
  around each activity, from the worker's interceptor), so no span is lost when a worker dies
  between two activities;
- when ``settings.otlp_traces_endpoint`` is set (the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), a batch processor to an OTLP/HTTP exporter with every
  span (Temporal's included), force-flushed at the end of each activity too. The exporter
  reads its other standard variables (headers, timeout, compression) itself.

Temporal's spans come from ``temporalio.contrib.opentelemetry.TracingInterceptor`` on the
client (:func:`client_interceptors`); client calls made inside ``engine.tracing.run_context``
(start, resume) put the workflow and its activities in the run's trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import StatusCode

from signoff.engine.tracing import attributes as A
from signoff.engine.tracing import ids as I
from signoff.engine.tracing import spans as S
from signoff.engine.models import SpanRecord
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

log = logging.getLogger("signoff.telemetry")

# The spans of signoff's tracer ended in this context (an activity, or collect_spans()).
_sink: ContextVar[list[SpanRecord] | None] = ContextVar("signoff_span_sink", default=None)


class SignoffIdGenerator(RandomIdGenerator):
    """Random ids, except the ones ``engine.tracing`` requested for the span being started."""

    def generate_span_id(self) -> int:
        req = I.requested_ids.get()
        if req is not None and req.span_id:
            return req.span_id
        return super().generate_span_id()

    def generate_trace_id(self) -> int:
        req = I.requested_ids.get()
        if req is not None and req.trace_id:
            return req.trace_id
        return super().generate_trace_id()


def _dt(ns: int | None) -> datetime | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1_000_000_000, tz=timezone.utc)


def _json_obj(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"value": str(raw)}
    return value if isinstance(value, dict) else {"value": value}


def to_record(span: ReadableSpan) -> SpanRecord:
    """A span of signoff's tracer as the store keeps it: trace id = the run id, parent = the
    parent in signoff's own tree (the root for components and gates)."""
    attrs = dict(span.attributes or {})
    ctx = span.get_span_context()
    run_id = str(attrs.pop(A.A_RUN, "") or "")
    if not run_id:
        import uuid

        run_id = str(uuid.UUID(int=ctx.trace_id))
    kind = str(attrs.pop(A.A_KIND, "component"))
    parent = attrs.pop(A.A_PARENT, None)
    if parent is None and kind != "flow" and span.parent is not None:
        parent = I.hex_span(span.parent.span_id)
    inputs = _json_obj(attrs.pop(A.A_INPUTS, None))
    outputs = _json_obj(attrs.pop(A.A_OUTPUTS, None))
    code = span.status.status_code
    status = "ok" if code == StatusCode.OK else "error" if code == StatusCode.ERROR else "unset"
    if code == StatusCode.ERROR and span.status.description:
        attrs["signoff.error"] = span.status.description
    for event in span.events:
        if event.name == "exception" and event.attributes:
            attrs.setdefault("exception.type", event.attributes.get("exception.type"))
            attrs.setdefault("exception.message", event.attributes.get("exception.message"))
    attrs["otel.trace_id"] = I.hex_trace(ctx.trace_id)
    if span.parent is not None:
        attrs["otel.parent_span_id"] = I.hex_span(span.parent.span_id)
    clean = {k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs.items() if v is not None}
    return SpanRecord(
        trace_id=run_id,
        span_id=I.hex_span(ctx.span_id),
        parent_id=None if kind == "flow" else parent,
        name=span.name,
        type=kind,
        start_time=_dt(span.start_time) or datetime.now(timezone.utc),
        end_time=_dt(span.end_time),
        status=status,
        inputs=inputs,
        outputs=outputs,
        attributes=clean,
        run_id=run_id,
        flow_id=str(attrs[A.A_FLOW]) if attrs.get(A.A_FLOW) else None,
    )


class SinkSpanProcessor(SpanProcessor):
    """Hands each ended span of signoff's tracer to the sink of the context that ended it. A
    span ended outside any sink is kept in :attr:`unsunk` (none are, in the worker: every build
    runs inside an activity)."""

    def __init__(self) -> None:
        self.unsunk: list[SpanRecord] = []
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if scope is None or scope.name != I.TRACER_NAME:
            return
        record = to_record(span)
        sink = _sink.get()
        if sink is not None:
            sink.append(record)
        else:
            with self._lock:
                self.unsunk.append(record)
                del self.unsunk[:-1000]

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class Telemetry:
    """The process's tracing setup (one per process)."""

    def __init__(self, provider: TracerProvider, sink_processor: SinkSpanProcessor) -> None:
        self.provider = provider
        self.sink_processor = sink_processor
        self.otlp_endpoints: set[str] = set()
        self._otlp: list[BatchSpanProcessor] = []

    @property
    def exports_otlp(self) -> bool:
        return bool(self._otlp)

    def add_otlp(self, endpoint: str) -> None:
        if endpoint in self.otlp_endpoints:
            return
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
        self.provider.add_span_processor(processor)
        self._otlp.append(processor)
        self.otlp_endpoints.add(endpoint)

    def flush_otlp(self, timeout_millis: int = 10_000) -> bool:
        ok = True
        for processor in self._otlp:
            ok = processor.force_flush(timeout_millis) and ok
        return ok

    async def flush(self, store: Store, spans: list[SpanRecord]) -> None:
        """Write the spans to the store, then push the OTLP batch out (in a thread)."""
        if spans:
            await store.save_spans(spans)
        if self._otlp:
            await asyncio.to_thread(self.flush_otlp)

    def shutdown(self) -> None:
        self.provider.force_flush()


_telemetry: Telemetry | None = None
_install_lock = threading.Lock()


def install(settings: Settings | None = None, *, service_name: str = "signoff") -> Telemetry:
    """Install the SDK once per process (later calls add a newly configured OTLP endpoint)."""
    global _telemetry
    with _install_lock:
        if _telemetry is None:
            provider = TracerProvider(
                resource=Resource.create({"service.name": service_name}),
                id_generator=SignoffIdGenerator(),
                shutdown_on_exit=True,
            )
            sink_processor = SinkSpanProcessor()
            provider.add_span_processor(sink_processor)
            trace.set_tracer_provider(provider)
            if trace.get_tracer_provider() is not provider:
                log.warning("another TracerProvider was installed first: signoff's spans go there, not to the store")
            _telemetry = Telemetry(provider, sink_processor)
        endpoint = settings.otlp_traces_endpoint_resolved if settings is not None else None
        if endpoint:
            _telemetry.add_otlp(endpoint)
        return _telemetry


def current() -> Telemetry | None:
    return _telemetry


def take_spans() -> list[SpanRecord]:
    """The spans ended so far in this context's collector (:func:`collect_spans`), taken out of
    it: the caller writes them (Store.set_status carries them in the status' own transaction)
    instead of the collector's next write. Empty without a collector."""
    sink = _sink.get()
    if not sink:
        return []
    spans = sink[:]
    del sink[: len(spans)]
    return spans


def keep_spans(spans: list[SpanRecord]) -> None:
    """Spans :func:`take_spans` took and that were not written: back to the collector, first."""
    sink = _sink.get()
    if sink is not None and spans:
        sink[:0] = spans


@asynccontextmanager
async def collect_spans(store: Store) -> AsyncIterator[list[SpanRecord]]:
    """Collect the signoff spans ended inside the block and write them to ``store`` when it
    ends (also when it raises). What the activity interceptor does around each activity."""
    sink: list[SpanRecord] = []

    async def write() -> None:
        spans = sink[:]
        del sink[: len(spans)]
        tel = _telemetry
        if tel is not None:
            await tel.flush(store, spans)
        elif spans:
            await store.save_spans(spans)

    token = _sink.set(sink)
    ftoken = S.flusher.set(write)  # engine.tracing.flush() writes what has ended so far
    try:
        yield sink
    finally:
        S.flusher.reset(ftoken)
        _sink.reset(token)
        await write()
