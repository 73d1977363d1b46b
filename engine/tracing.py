"""One trace per run (DESIGN §1 invariant 5), with the OpenTelemetry API only.

The trace id is derived from the run id (a uuid is its own 128-bit trace id), and every span
id that matters is derived too, so the spans written before a pause and after a resume, by
different activities, workers or processes, land in one trace, and a retried activity
rewrites the same spans instead of adding new ones (the store upserts by span id):

- the **root** span of the run: ``root_span_id(run_id)``. Every process that starts or
  resumes a run attaches :func:`run_context` (a non-recording stand-in for the root) so
  Temporal's client spans, and through its headers the workflow and activity spans, join the
  trace. :func:`open_run` writes a provisional root to the store when the run starts (so the
  trace lists as running); :func:`close_run` emits the real root span when the run ends.
- a span per built vertex (:class:`RunTracer`, plugged into ``RunContext.wrap_build`` and
  ``on_vertex_built``): component type, inputs and outputs truncated to a bound, error status
  when the component fails. A Human Input build that pauses, and its rebuild once decided, are
  not vertex spans: the gate span stands for them.
- the **gate** span ``Human In The Loop — {label}`` (:func:`record_gate`), from the pause to the
  decision, with the action id, who decided and the rerouted action as attributes.

Span ids are requested through :data:`requested_ids`; the SDK side (``signoff.telemetry``)
installs an id generator that honours them. Without it spans still form one trace (the parent
carries the trace id) but retried builds get fresh ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from signoff.engine.models import EXPIRED_ACTION, FALLBACK_ACTION, AppliedDecision, PendingRequest, SpanRecord

if TYPE_CHECKING:  # pragma: no cover
    from signoff.engine.graph import Graph
    from signoff.engine.run import RunState, VertexResult
    from signoff.engine.store.base import Store

TRACER_NAME = "signoff"
GATE_PREFIX = "Human In The Loop — "
GATE_TYPES = frozenset({"HumanInput"})  # components whose pause/rebuild the gate span stands for
MAX_VALUE_CHARS = 2000  # each input/output value is cut to this many characters of JSON

# Attribute names (the store exporter maps them back to SpanRecord fields).
A_RUN = "signoff.run_id"
A_JOB = "signoff.job_id"
A_FLOW = "signoff.flow_id"
A_KIND = "signoff.kind"  # flow | component | gate
A_PARENT = "signoff.parent_span_id"  # the parent in signoff's own span tree (hex)
A_VERTEX = "signoff.vertex_id"
A_COMPONENT = "signoff.component_type"
A_INPUTS = "signoff.inputs"  # JSON object, values truncated
A_OUTPUTS = "signoff.outputs"


@dataclass(frozen=True)
class RequestedIds:
    trace_id: int | None = None
    span_id: int | None = None


# The ids the next span started in this context should get (read by the SDK id generator).
requested_ids: ContextVar[RequestedIds | None] = ContextVar("signoff_requested_ids", default=None)
# The vertex span being built in this task (nested runs hang their spans under it).
_current_vertex: ContextVar[tuple[str, int] | None] = ContextVar("signoff_current_vertex", default=None)
# The vertex span waiting for on_vertex_built (set when wrap_build exits normally).
_ending: ContextVar[Any] = ContextVar("signoff_ending_span", default=None)


@dataclass(frozen=True)
class _Owner:
    """The span that a component's own child spans (model calls, tool calls) hang under."""

    run_id: str
    job_id: str | None
    flow_id: str | None
    span_id: int
    limit: int


_owner: ContextVar[_Owner | None] = ContextVar("signoff_span_owner", default=None)


# Writes the spans ended so far in this context to their store (set by the SDK side around an
# activity: signoff.telemetry.collect_spans).
flusher: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("signoff_span_flusher", default=None)


async def flush() -> None:
    """Write the spans ended so far (in this activity) to the store now: call it before a
    status change that tells readers the run has reached a point (completed, failed), so the
    trace is complete when they look. Nothing to do without the SDK."""
    f = flusher.get()
    if f is not None:
        await f()



def _mark_interrupted(span: Any, exc: BaseException, limit: int) -> None:
    """A span whose work raised: error status with the exception for a failure, the
    ``signoff.cancelled`` mark for a cancellation."""
    if isinstance(exc, Exception):
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{exc.__class__.__name__}: {exc}"[:limit]))
        span.set_attribute("signoff.error.type", exc.__class__.__name__)
    else:
        span.set_attribute("signoff.cancelled", True)

def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


# ---- ids ----------------------------------------------------------------------------------


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


def _parent_context(run_id: str) -> otel_context.Context:
    """The current context when its span belongs to the run's trace (e.g. Temporal's
    RunActivity span), else the run's root."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid and current.trace_id == trace_id_for(run_id):
        return otel_context.get_current()
    return root_context(run_id)


@contextlib.contextmanager
def _ids(trace_id: int | None, span_id: int | None) -> Iterator[None]:
    token = requested_ids.set(RequestedIds(trace_id, span_id))
    try:
        yield
    finally:
        requested_ids.reset(token)


def _ns(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1_000_000_000)


# ---- values -------------------------------------------------------------------------------


def bounded(values: dict[str, Any] | None, limit: int = MAX_VALUE_CHARS) -> dict[str, Any]:
    """The values with each one cut to ``limit`` characters of JSON (a cut value becomes a
    string ending in '…'). Always JSON-serialisable."""
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        try:
            raw = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            raw = json.dumps(str(value), ensure_ascii=False)
        if len(raw) <= limit:
            out[str(key)] = json.loads(raw)
        else:
            out[str(key)] = raw[: max(limit - 1, 0)] + "…"
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _json_attr(values: dict[str, Any] | None, limit: int) -> str:
    return json.dumps(bounded(values, limit), ensure_ascii=False)


def gate_label(pending: PendingRequest | None, action_id: str) -> str:
    """The chosen option's own label; ``Expired`` for the sentinel, ``Fallback`` for the fallback
    branch (unless an option of that id has its own label)."""
    for option in pending.options if pending is not None else []:
        if option.action_id == action_id:
            return option.label
    if action_id == EXPIRED_ACTION:
        return "Expired"
    if action_id == FALLBACK_ACTION:
        return "Fallback"
    return action_id


def gate_span_name(pending: PendingRequest | None, action_id: str) -> str:
    return GATE_PREFIX + gate_label(pending, action_id)


def _base_attributes(run_id: str, job_id: str | None, flow_id: str | None, kind: str, parent: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {A_RUN: str(run_id), A_KIND: kind, A_PARENT: hex_span(parent)}
    if job_id:
        attrs[A_JOB] = str(job_id)
    if flow_id:
        attrs[A_FLOW] = str(flow_id)
    return attrs


# ---- the run's root ------------------------------------------------------------------------


async def open_run(
    store: "Store", *, run_id: str, flow_id: str | None, name: str, start: datetime, job_id: str | None = None
) -> None:
    """Write the provisional root (no end time) so the trace lists as running from the start.
    :func:`close_run` replaces it."""
    await store.save_spans([
        SpanRecord(
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
    ])


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
    with _ids(trace_id_for(run_id), root_span_id(run_id)):
        span = tracer().start_span(
            name, context=otel_context.Context(), kind=SpanKind.INTERNAL, attributes=attrs, start_time=_ns(start)
        )
    if status == "completed":
        span.set_status(Status(StatusCode.OK))
    elif status == "failed":
        span.set_status(Status(StatusCode.ERROR, str((error or {}).get("error") or "failed")[:MAX_VALUE_CHARS]))
    else:  # cancelled, timed_out: the run did not complete (signoff.status says how it ended)
        span.set_status(Status(StatusCode.ERROR, status))
    span.end(end_time=max(_ns(end), _ns(start)))


# ---- the gate -------------------------------------------------------------------------------


def record_gate(
    *,
    run_id: str,
    pending: PendingRequest,
    applied: AppliedDecision,
    vertex_id: str | None = None,
    job_id: str | None = None,
    flow_id: str | None = None,
    limit: int = MAX_VALUE_CHARS,
) -> None:
    """Emit the gate span ``Human In The Loop — {label}`` for an applied decision: from the pause
    to the decision, with the action id, who decided and the rerouted action."""
    root = root_span_id(run_id)
    attrs = _base_attributes(run_id, job_id, flow_id, "gate", root)
    attrs.update({
        "signoff.request_id": applied.request_id,
        "signoff.request_kind": pending.kind,
        "signoff.action_id": applied.action_id,
        "signoff.action_label": gate_label(pending, applied.action_id),
        "signoff.requested_action": applied.requested_action,
        "signoff.decided_by": applied.decided_by or "",
        "signoff.rerouted": applied.rerouted,
        A_INPUTS: _json_attr({"prompt": pending.prompt, "options": [o.label for o in pending.options]}, limit),
        A_OUTPUTS: _json_attr({"action_id": applied.action_id, "values": applied.values}, limit),
    })
    if applied.rerouted:
        attrs["signoff.rerouted_action"] = applied.action_id
        attrs["signoff.timeout_seconds"] = applied.timeout_seconds
    if vertex_id:
        attrs[A_VERTEX] = vertex_id
        attrs[A_COMPONENT] = "HumanInput" if pending.kind == "node_input" else "tool_approval"
    start, end = _ns(pending.paused_at), _ns(applied.decided_at)
    with _ids(None, span_id_for(str(run_id), "gate", applied.request_id)):
        span = tracer().start_span(
            gate_span_name(pending, applied.action_id), context=_parent_context(run_id), attributes=attrs,
            start_time=start,
        )
    span.set_status(Status(StatusCode.OK))
    span.end(end_time=max(start, end))


# ---- a span per built vertex ---------------------------------------------------------------


class RunTracer:
    """The span hooks for one run: ``RunContext(wrap_build=t.wrap_build,
    on_vertex_built=t.on_vertex_built)``. ``graph`` and ``state`` are the run's before the
    layer (inputs are resolved from them; span ids use the vertex's build count)."""

    def __init__(self, graph: "Graph", state: "RunState", *, limit: int = MAX_VALUE_CHARS) -> None:
        self.graph = graph
        self.state = state
        self.limit = limit
        self.run_id = state.run_id

    def hooks(self) -> dict[str, Any]:
        return {"wrap_build": self.wrap_build, "on_vertex_built": self.on_vertex_built}

    def _is_gate_build(self, vertex_id: str, component_type: str) -> bool:
        vertex = self.graph.vertices.get(vertex_id)
        return component_type in GATE_TYPES and vertex is not None and bool(vertex.out_edges)

    @contextlib.asynccontextmanager
    async def wrap_build(self, vertex_id: str, component_type: str) -> AsyncIterator[None]:
        from signoff.engine.run import resolve_inputs

        nested = _current_vertex.get()
        state = self.state
        if nested is None and self._is_gate_build(vertex_id, component_type):
            _ending.set(None)
            yield  # the gate span stands for this build
            return
        if nested is None:
            parent = root_span_id(self.run_id)
            span_id = span_id_for(self.run_id, "vertex", vertex_id, str(state.build_counts.get(vertex_id, 0)))
            vertex = self.graph.vertices.get(vertex_id)
            name = vertex.display_name if vertex is not None else vertex_id
            inputs = resolve_inputs(self.graph, state, vertex_id) if vertex is not None else {}
            parent_ctx = _parent_context(self.run_id)
        else:  # a vertex of a nested run (RunFlow): under the RunFlow vertex's span
            parent = nested[1]
            span_id = span_id_for(hex_span(parent), "vertex", vertex_id)
            name = vertex_id
            inputs = {}
            parent_ctx = otel_context.get_current()
        attrs = _base_attributes(self.run_id, state.job_id, state.flow_id, "component", parent)
        attrs.update({A_VERTEX: vertex_id, A_COMPONENT: component_type, A_INPUTS: _json_attr(inputs, self.limit)})
        if nested is not None:
            attrs["signoff.nested"] = True
        with _ids(None, span_id):
            span = tracer().start_span(name, context=parent_ctx, attributes=attrs)
        token = _current_vertex.set((vertex_id, span_id))
        owner_token = _owner.set(_Owner(self.run_id, state.job_id, state.flow_id, span_id, self.limit))
        ctx_token = otel_context.attach(trace.set_span_in_context(span, parent_ctx))
        try:
            yield
        except BaseException as exc:
            _mark_interrupted(span, exc, self.limit)
            span.end()
            _ending.set(None)
            raise
        finally:
            otel_context.detach(ctx_token)
            _owner.reset(owner_token)
            _current_vertex.reset(token)
        _ending.set(span)

    def on_vertex_built(self, result: "VertexResult") -> None:
        span = _ending.get()
        if span is None:
            return
        _ending.set(None)
        span.set_attribute(A_OUTPUTS, _json_attr(result.outputs, self.limit))
        if result.pause is not None:
            span.set_attribute("signoff.paused", True)
            span.set_attribute("signoff.request_id", result.pause.request_id)
        if result.skipped:
            span.set_attribute("signoff.skipped", True)
        if result.stopped:
            span.set_attribute("signoff.stopped_outputs", list(result.stopped))
        span.set_status(Status(StatusCode.OK))
        span.end()


# ---- a component's own child spans: model calls and tool calls --------------------------


class ChildSpan:
    """A model or tool call span being recorded (a no-op outside a traced vertex build)."""

    def __init__(self, span: Any = None, limit: int = MAX_VALUE_CHARS) -> None:
        self.span = span
        self.limit = limit

    @property
    def recording(self) -> bool:
        return self.span is not None

    def set(self, key: str, value: Any) -> None:
        if self.span is not None and value is not None:
            self.span.set_attribute(key, value)

    def outputs(self, values: dict[str, Any]) -> None:
        self.set(A_OUTPUTS, _json_attr(values, self.limit))

    def model_result(self, result: Any) -> None:
        """What a model answered (an ``engine.llm.ChatResult``): text, tool calls, token usage
        when the endpoint returned it (``gen_ai.usage.*``), finish reason, attempts."""
        if self.span is None:
            return
        calls = [{"name": c.name, "args": _cut(c.raw_arguments or "", max(self.limit // 4, 1))}
                 for c in getattr(result, "tool_calls", None) or []]
        self.outputs({"content": getattr(result, "content", ""), "tool_calls": calls})
        self.set("gen_ai.response.finish_reasons", [result.finish_reason] if result.finish_reason else None)
        self.set("signoff.llm.attempts", getattr(result, "attempts", None))
        self.set("signoff.llm.tool_calls", [c["name"] for c in calls] or None)
        usage = result.usage if isinstance(getattr(result, "usage", None), dict) else {}
        for key, attr in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                          ("completion_tokens", "gen_ai.usage.output_tokens"),
                          ("total_tokens", "signoff.llm.total_tokens")):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.set(attr, value)

    def fail(self, message: str) -> None:
        """Error status without an exception passing through (e.g. a tool error the model sees)."""
        if self.span is not None:
            self.span.set_status(Status(StatusCode.ERROR, message[: self.limit]))
            self._failed = True

    _failed = False


@contextlib.contextmanager
def _child_span(kind: str, name: str, key: str, attributes: dict[str, Any], inputs: dict[str, Any],
                *, owns_builds: bool = False) -> Iterator[ChildSpan]:
    owner = _owner.get()
    if owner is None:  # not inside a traced vertex build: nothing to hang the span on
        yield ChildSpan()
        return
    span_id = span_id_for(hex_span(owner.span_id), kind, key)
    attrs = _base_attributes(owner.run_id, owner.job_id, owner.flow_id, kind, owner.span_id)
    attrs.update({k: v for k, v in attributes.items() if v is not None})
    attrs[A_INPUTS] = _json_attr(inputs, owner.limit)
    parent_ctx = otel_context.get_current()
    with _ids(None, span_id):
        span = tracer().start_span(name, context=parent_ctx, attributes=attrs)
    handle = ChildSpan(span, owner.limit)
    ctx_token = otel_context.attach(trace.set_span_in_context(span, parent_ctx))
    owner_token = _owner.set(_Owner(owner.run_id, owner.job_id, owner.flow_id, span_id, owner.limit))
    # a tool that is itself a flow (RunFlow) hangs its vertices under the tool span
    vertex_token = _current_vertex.set((name, span_id)) if owns_builds else None
    try:
        yield handle
    except BaseException as exc:
        _mark_interrupted(span, exc, owner.limit)
        span.end()
        raise
    finally:
        if vertex_token is not None:
            _current_vertex.reset(vertex_token)
        _owner.reset(owner_token)
        otel_context.detach(ctx_token)
    if not handle._failed:
        span.set_status(Status(StatusCode.OK))
    span.end()


def model_call(*, model: str, number: int, endpoint: str | None = None, messages: list[dict[str, Any]] | None = None,
               tools: list[str] | None = None) -> contextlib.AbstractContextManager[ChildSpan]:
    """A span (type ``llm``) for one model request of a component, under the component's vertex
    span: ``with model_call(model=..., number=n) as s: result = await ...; s.model_result(result)``.
    ``number`` numbers the component's model calls (the span id derives from it, so a retried
    build rewrites the same span). An exception through the block gives it error status."""
    last = (messages or [])[-1:] or [{}]
    return _child_span("llm", model, f"llm:{number}", {
        "gen_ai.system": "openai",
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "signoff.llm.model": model,
        "signoff.llm.endpoint": endpoint,
        "signoff.llm.call": number,
        "signoff.llm.messages": len(messages or []),
        "signoff.llm.tools": list(tools) if tools else None,
    }, {"last_message": last[0], "messages": len(messages or [])})


def tool_call(*, name: str, args: dict[str, Any] | None, number: int, component_type: str | None = None,
              call_id: str | None = None, outcome: str | None = None) -> contextlib.AbstractContextManager[ChildSpan]:
    """A span (type ``tool``) for one tool run of a component (an Agent's tool call), under the
    component's vertex span; its arguments are truncated like any value. ``outcome``: how the
    call came to run (``ran``, ``approved``, ``edited``)."""
    owner = _owner.get()
    limit = owner.limit if owner is not None else MAX_VALUE_CHARS
    return _child_span("tool", name, f"tool:{number}", {
        "signoff.tool.name": name,
        "signoff.tool.args": _json_attr({"args": args or {}}, limit),
        "signoff.tool.call_id": call_id,
        "signoff.tool.outcome": outcome,
        A_COMPONENT: component_type,
    }, dict(args or {}), owns_builds=True)


# ---- a run driven in one process --------------------------------------------------------------


class RunTracing:
    """The one-trace story for a run driven in one process (``engine.runner.InProcessRunner``,
    a synchronous in-process path): the same root, vertex and gate spans as a run on Temporal.

    The runner calls :meth:`started` once, :meth:`hooks` for each layer, :meth:`decided` when a
    decision is applied, :meth:`paused` at a pause and :meth:`ended` when the run ends
    (completed, failed or cancelled). Spans go wherever the process's SDK sends them (the span
    sink of ``signoff.telemetry.collect_spans``, an OTLP exporter); :meth:`paused` and
    :meth:`ended` call :func:`flush`.

    ``store``: when given, :meth:`started` writes the provisional root (:func:`open_run`) so the
    trace lists as running. ``started_at(state)``: the run's start time when known outside the
    runner (a job's ``created_at``); else the time :meth:`started` saw, else (a resume in a new
    process) the ``paused_at`` of the pause it resumes from. ``name``: the root's name (default: the flow's)."""

    def __init__(
        self,
        store: "Store | None" = None,
        *,
        started_at: Callable[["RunState"], datetime | None] | None = None,
        name: str | None = None,
        limit: int = MAX_VALUE_CHARS,
    ) -> None:
        self.store = store
        self.started_at = started_at
        self.name = name
        self.limit = limit
        self._starts: dict[str, datetime] = {}

    def root_name(self, state: "RunState") -> str:
        return self.name or str((state.flow or {}).get("name") or state.flow_id or "flow")

    def start_of(self, state: "RunState") -> datetime:
        known = self.started_at(state) if self.started_at is not None else None
        if known is None:
            known = self._starts.get(state.run_id)
        if known is None:
            times = [_aware(d.decided_at) for d in state.decisions]
            if state.pending is not None:
                times.append(_aware(state.pending.paused_at))
            known = min(times) if times else None
        return _aware(known) if known is not None else datetime.now(timezone.utc)

    async def started(self, state: "RunState", *, start: datetime) -> None:
        self._starts.setdefault(state.run_id, _aware(start))
        if self.store is not None:
            await open_run(self.store, run_id=state.run_id, job_id=state.job_id, flow_id=state.flow_id,
                           name=self.root_name(state), start=self.start_of(state))

    def hooks(self, graph: "Graph", state: "RunState") -> dict[str, Any]:
        """``wrap_build`` and ``on_vertex_built`` for one layer built from ``state``."""
        return RunTracer(graph, state, limit=self.limit).hooks()

    def decided(self, state: "RunState", applied: AppliedDecision) -> None:
        """The gate span of a decision applied to ``state`` (the state before the decision)."""
        if state.pending is None:
            return
        # a resume in a new process: the run started before this pause at the latest
        self._starts.setdefault(state.run_id, _aware(state.pending.paused_at))
        record_gate(run_id=state.run_id, pending=state.pending, applied=applied, vertex_id=state.pending_vertex,
                    job_id=state.job_id, flow_id=state.flow_id, limit=self.limit)

    async def paused(self, state: "RunState") -> None:
        await flush()

    async def ended(self, state: "RunState", *, status: str, end: datetime,
                    error: dict[str, Any] | None = None) -> None:
        close_run(run_id=state.run_id, job_id=state.job_id, flow_id=state.flow_id, name=self.root_name(state),
                  start=self.start_of(state), end=_aware(end), status=status, error=error)
        self._starts.pop(state.run_id, None)
        await flush()


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)


__all__ = [
    "ChildSpan",
    "GATE_PREFIX",
    "MAX_VALUE_CHARS",
    "RunTracer",
    "RunTracing",
    "TRACER_NAME",
    "bounded",
    "close_run",
    "flush",
    "gate_label",
    "gate_span_name",
    "hex_span",
    "hex_trace",
    "model_call",
    "open_run",
    "record_gate",
    "requested_ids",
    "root_context",
    "root_span_id",
    "run_context",
    "span_id_for",
    "tool_call",
    "trace_id_for",
]
