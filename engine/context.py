"""What a run gives its components: identity, input, the session history, the flow loader for
nested flows, an HTTP client factory, the clock, and hooks for observability."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, AsyncContextManager, Awaitable, Callable, ContextManager

import httpx

from signoff.engine.models import utcnow
from signoff.engine.settings import Settings
from signoff.engine.state import VertexResult
from signoff.engine.store.base import HistoryStore

FlowLoader = Callable[[str], Awaitable["dict[str, Any] | None"]]
# Called around each vertex build: (vertex_id, component_type) -> async context manager.
BuildWrapper = Callable[[str, str], AsyncContextManager[Any]]
# Called after each vertex build (also when it paused).
VertexHook = Callable[[VertexResult], "Awaitable[None] | None"]
# Runs a nested flow to its end (Run Flow): (ctx, flow_id, spec, input_value, vertex_id=) -> result.
ChildRunner = Callable[..., Awaitable[dict[str, Any]]]
# Opens the span of one of a component's own calls (a model request, a tool run): keyword
# attributes -> context manager yielding the span (``outputs``, ``model_result``, ``fail``).
SpanFactory = Callable[..., ContextManager[Any]]


class NoSpan:
    """The span of a call when the run is not traced: every method does nothing."""

    recording = False

    def set(self, key: str, value: Any) -> None: ...

    def outputs(self, values: dict[str, Any]) -> None: ...

    def model_result(self, result: Any) -> None: ...

    def fail(self, message: str) -> None: ...


@dataclass
class RunContext:
    run_id: str
    job_id: str | None = None
    flow_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    input_value: Any = None
    history: HistoryStore | None = None
    flow_loader: FlowLoader | None = None
    http_client_factory: Callable[[], httpx.AsyncClient] | None = None
    clock: Callable[[], datetime] | None = None
    on_vertex_built: VertexHook | None = None
    wrap_build: BuildWrapper | None = None
    depth: int = 0  # nesting level (RunFlow)
    # The process settings, passed in by the caller (never read here): an Agent takes its
    # model, base URL and API key defaults from them (openai_model/openai_base_url/openai_api_key).
    settings: Settings | None = None
    # Set by engine.run.context_for: components run nested flows through it, so they need not
    # import the engine's steps (which import the components).
    run_child: ChildRunner | None = None
    # Set by the run's tracer (engine.tracing): the spans of a component's model and tool calls.
    model_span: SpanFactory | None = None
    tool_span: SpanFactory | None = None

    def now(self) -> datetime:
        return self.clock() if self.clock is not None else utcnow()

    def model_call(self, **attributes: Any) -> ContextManager[Any]:
        """``with ctx.run.model_call(model=..., number=n) as span: ...; span.model_result(r)``:
        the span of one model request of the component being built (docs/tracing.md)."""
        return self.model_span(**attributes) if self.model_span else contextlib.nullcontext(NoSpan())

    def tool_call(self, **attributes: Any) -> ContextManager[Any]:
        """The span of one tool run of the component being built (an Agent's tool call)."""
        return self.tool_span(**attributes) if self.tool_span else contextlib.nullcontext(NoSpan())

    def http_client(self) -> httpx.AsyncClient:
        """A client to use as ``async with ctx.http_client() as client``."""
        if self.http_client_factory is not None:
            return self.http_client_factory()
        return httpx.AsyncClient()

    @property
    def effective_session(self) -> str:
        """The history session: the session id, else the flow id, else the run id."""
        return self.session_id or self.flow_id or self.run_id

    def child(self, **changes: Any) -> "RunContext":
        """A context for a nested run: same services and session, one level deeper."""
        changes.setdefault("depth", self.depth + 1)
        return dataclasses.replace(self, **changes)
