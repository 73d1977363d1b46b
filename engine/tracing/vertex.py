"""A span per built vertex (:class:`RunTracer`, plugged into the build hooks of a run's
context), and a component's own child spans: model calls and tool calls."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from signoff.engine.components import get_component
from signoff.engine.graph import Graph
from signoff.engine.liveness import resolve_inputs
from signoff.engine.state import RunState, VertexResult
from signoff.engine.tracing.attributes import (
    A_COMPONENT,
    A_INPUTS,
    A_OUTPUTS,
    A_VERTEX,
    MAX_VALUE_CHARS,
    base_attributes,
    cut,
    json_attr,
    mark_interrupted,
)
from signoff.engine.tracing.ids import hex_span, parent_context, requesting, root_span_id, span_id_for, tracer

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


def shown(value: Any) -> Any:
    """A vertex's inputs or outputs as its span shows them: every tool descriptor in them (an
    Agent's ``tools`` input, a component's ``tool`` output) with its credentials masked (its
    params travel with it so that an Agent can call the tool). What holds no descriptor is
    returned as it is, not copied (this runs for every traced vertex)."""
    if isinstance(value, list):
        items = [shown(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if not isinstance(value, dict):
        return value
    cls = get_component(value["component_type"]) if isinstance(value.get("component_type"), str) else None
    if cls is not None and isinstance(value.get("params"), dict):
        return {**value, "params": cls.masked_params(value["params"])}
    items = {k: shown(v) for k, v in value.items()}
    return value if all(items[k] is v for k, v in value.items()) else items


class RunTracer:
    """The span hooks for one run: ``RunContext(wrap_build=t.wrap_build,
    on_vertex_built=t.on_vertex_built)``. ``graph`` and ``state`` are the run's before the
    layer (inputs are resolved from them; span ids use the vertex's build count)."""

    def __init__(self, graph: Graph, state: RunState, *, limit: int = MAX_VALUE_CHARS) -> None:
        self.graph = graph
        self.state = state
        self.limit = limit
        self.run_id = state.run_id

    def hooks(self) -> dict[str, Any]:
        """The run context's tracing hooks (``context_for(state, **tracer.hooks())``): a span per
        built vertex, and the spans of the components' model and tool calls."""
        return {"wrap_build": self.wrap_build, "on_vertex_built": self.on_vertex_built,
                "model_span": model_call, "tool_span": tool_call}

    def _is_gate_build(self, vertex_id: str, component_type: str) -> bool:
        vertex = self.graph.vertices.get(vertex_id)
        return vertex is not None and vertex.component_class.gate and bool(vertex.out_edges)

    @contextlib.asynccontextmanager
    async def wrap_build(self, vertex_id: str, component_type: str) -> AsyncIterator[None]:
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
            parent_ctx = parent_context(self.run_id)
        else:  # a vertex of a nested run (RunFlow): under the RunFlow vertex's span
            parent = nested[1]
            span_id = span_id_for(hex_span(parent), "vertex", vertex_id)
            name = vertex_id
            inputs = {}
            parent_ctx = otel_context.get_current()
        attrs = base_attributes(self.run_id, state.job_id, state.flow_id, "component", parent)
        attrs.update({A_VERTEX: vertex_id, A_COMPONENT: component_type, A_INPUTS: json_attr(shown(inputs), self.limit)})
        if nested is not None:
            attrs["signoff.nested"] = True
        with requesting(None, span_id):
            span = tracer().start_span(name, context=parent_ctx, attributes=attrs)
        token = _current_vertex.set((vertex_id, span_id))
        owner_token = _owner.set(_Owner(self.run_id, state.job_id, state.flow_id, span_id, self.limit))
        ctx_token = otel_context.attach(trace.set_span_in_context(span, parent_ctx))
        try:
            yield
        except BaseException as exc:
            mark_interrupted(span, exc, self.limit)
            span.end()
            _ending.set(None)
            raise
        finally:
            otel_context.detach(ctx_token)
            _owner.reset(owner_token)
            _current_vertex.reset(token)
        _ending.set(span)

    def on_vertex_built(self, result: VertexResult) -> None:
        span = _ending.get()
        if span is None:
            return
        _ending.set(None)
        span.set_attribute(A_OUTPUTS, json_attr(shown(result.outputs), self.limit))
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
        self.set(A_OUTPUTS, json_attr(values, self.limit))

    def model_result(self, result: Any) -> None:
        """What a model answered (an ``engine.llm.ChatResult``): text, tool calls, token usage
        when the endpoint returned it (``gen_ai.usage.*``), finish reason, attempts."""
        if self.span is None:
            return
        calls = [{"name": c.name, "args": cut(c.raw_arguments or "", max(self.limit // 4, 1))}
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
    attrs = base_attributes(owner.run_id, owner.job_id, owner.flow_id, kind, owner.span_id)
    attrs.update({k: v for k, v in attributes.items() if v is not None})
    attrs[A_INPUTS] = json_attr(shown(inputs), owner.limit)
    parent_ctx = otel_context.get_current()
    with requesting(None, span_id):
        span = tracer().start_span(name, context=parent_ctx, attributes=attrs)
    handle = ChildSpan(span, owner.limit)
    ctx_token = otel_context.attach(trace.set_span_in_context(span, parent_ctx))
    owner_token = _owner.set(_Owner(owner.run_id, owner.job_id, owner.flow_id, span_id, owner.limit))
    # a tool that is itself a flow (RunFlow) hangs its vertices under the tool span
    vertex_token = _current_vertex.set((name, span_id)) if owns_builds else None
    try:
        yield handle
    except BaseException as exc:
        mark_interrupted(span, exc, owner.limit)
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
        "signoff.tool.args": json_attr({"args": args or {}}, limit),
        "signoff.tool.call_id": call_id,
        "signoff.tool.outcome": outcome,
        A_COMPONENT: component_type,
    }, dict(args or {}), owns_builds=True)
