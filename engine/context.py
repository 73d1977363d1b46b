"""What a run gives its components: identity, input, the session history, nested runs, the one
way to dial out (an HTTP client under the egress policy), the run owner's secrets, the clock,
and hooks for observability. A component reaches the world only through its context."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncContextManager, Awaitable, Callable, ContextManager, Iterable

import httpx

from signoff.engine.egress import EgressPolicy, egress_client
from signoff.engine.errors import ComponentError, RunBudgetExceeded
from signoff.engine.models import FlowRecord, PendingRequest, utcnow
from signoff.engine.secrets import SECRET_REF, is_secret_ref, secret_names
from signoff.engine.settings import DEFAULT_MAX_OUTPUT_BYTES, Settings
from signoff.engine.state import Spent, VertexResult
from signoff.engine.store.base import HistoryStore

# Loads a flow for a nested run by id (or by name: ``loader(name, by_name=True)``), or None when it
# does not exist or the run's user may not execute it (the caller does not learn which).
FlowLoader = Callable[..., Awaitable["FlowRecord | None"]]
# Called around each vertex build: (vertex_id, component_type) -> async context manager.
BuildWrapper = Callable[[str, str], AsyncContextManager[Any]]
# Called after each vertex build (also when it paused).
VertexHook = Callable[[VertexResult], "Awaitable[None] | None"]
# Runs a nested flow to its end (Run Flow): (ctx, flow, input_value, vertex_id=) -> result.
ChildRunner = Callable[..., Awaitable[dict[str, Any]]]
# Opens the span of one of a component's own calls (a model request, a tool run): keyword
# attributes -> context manager yielding the span (``outputs``, ``model_result``, ``fail``).
SpanFactory = Callable[..., ContextManager[Any]]
# A standing approval's answer to a gated tool call (engine/standing.py: StandingLookup): the
# request the Agent would pause with -> the recorded use (its event's data), or None: ask a person.
StandingHook = Callable[[PendingRequest], Awaitable["dict[str, Any] | None"]]
# The value of a secret of an owner: (owner_id, name) -> the plain value, or None.
SecretResolver = Callable[[str, str], Awaitable["str | None"]]


class NoSpan:
    """The span of a call when the run is not traced: every method does nothing."""

    recording = False

    def set(self, key: str, value: Any) -> None: ...

    def outputs(self, values: dict[str, Any]) -> None: ...

    def model_result(self, result: Any) -> None: ...

    def fail(self, message: str) -> None: ...


@dataclass
class NestedBudget:
    """How many nested runs (Run Flow, at any depth) a run has started, against its limit. One
    object is shared by a layer's builds and their nested runs; the run's state carries the
    count from layer to layer (``RunState.nested_runs``)."""

    used: int = 0
    limit: int | None = None

    def spend(self, vertex_id: str) -> None:
        if self.limit is not None and self.used >= self.limit:
            raise ComponentError(
                f"RunFlow: this run has already started {self.used} nested runs, the most one run may start "
                "(SIGNOFF_MAX_NESTED_RUNS)",
                vertex_id=vertex_id,
            )
        self.used += 1


def json_size(value: Any, limit: int | None = None) -> int:
    """About the JSON size of ``value`` in bytes (text counted as UTF-8 at most, numbers as 8),
    without building the JSON; with ``limit``, stops as soon as the size is over it (the answer is
    then some number over ``limit``)."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) if item.isascii() else len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, dict):
            size += 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            size += len(item)
            stack.extend(item)
        else:
            size += 8
        if limit is not None and size > limit:
            return size
    return size


@dataclass
class RunBudget:
    """What a run has spent of its budgets (output bytes, outbound calls, model tokens) against
    the settings' limits (docs/security.md, "Budgets per run"). One object is shared by a layer's
    builds, their nested runs and every HTTP client the run opens; the run's state carries the
    totals from layer to layer and across pauses (``RunState.spent``), and a layer's activity
    heartbeats them so that a retry of the layer goes on from what the failed attempt spent.

    Going over raises :class:`RunBudgetExceeded`, and the error stays (``exceeded``): a component
    that catches it (an HTTP client's caller, an Agent's tool loop) cannot hide it, the layer
    fails with it when its builds are over."""

    output_bytes: int = 0
    calls: int = 0
    tokens: int = 0
    max_output_bytes: int | None = None  # None: no limit
    max_calls: int | None = None
    max_tokens: int | None = None
    exceeded: RunBudgetExceeded | None = None

    @classmethod
    def of(cls, spent: Spent, settings: Settings | None) -> "RunBudget":
        return cls(output_bytes=spent.output_bytes, calls=spent.calls, tokens=spent.tokens,
                   max_output_bytes=settings.run_max_output_bytes if settings is not None else None,
                   max_calls=settings.run_max_calls if settings is not None else None,
                   max_tokens=(settings.run_max_tokens or None) if settings is not None else None)

    def spent(self) -> Spent:
        return Spent(output_bytes=self.output_bytes, calls=self.calls, tokens=self.tokens)

    def _over(self, budget: str, message: str, *, limit: int, used: int, vertex_id: str | None) -> RunBudgetExceeded:
        if self.exceeded is None:
            self.exceeded = RunBudgetExceeded(message, budget=budget, limit=limit, used=used, vertex_id=vertex_id)
        return self.exceeded

    def check(self) -> None:
        """Raise the budget's error if the run went over one."""
        if self.exceeded is not None:
            raise self.exceeded

    def spend_output(self, value: Any, *, vertex_id: str | None = None) -> None:
        """Count ``value`` (an output, a node's private state, a message) against the run's
        output bytes, before it is stored; over the budget it is refused (not counted)."""
        self.check()
        if self.max_output_bytes is None:
            return
        left = self.max_output_bytes - self.output_bytes
        size = json_size(value, max(left, 0))
        if size > left:
            raise self._over(
                "output_bytes",
                f"The run went over its budget of output bytes: {self.output_bytes} stored, and "
                f"{'a node' if vertex_id is None else repr(vertex_id)} produced more than the {max(left, 0)} left "
                f"of {self.max_output_bytes} (SIGNOFF_RUN_MAX_OUTPUT_BYTES)",
                limit=self.max_output_bytes, used=self.output_bytes + size, vertex_id=vertex_id)
        self.output_bytes += size

    def spend_bytes(self, size: int, *, what: str = "the run's state, stored for its next layer") -> None:
        """Count ``size`` bytes the run stores besides its outputs (``what``)."""
        self.check()
        if self.max_output_bytes is not None and self.output_bytes + size > self.max_output_bytes:
            raise self._over(
                "output_bytes",
                f"The run went over its budget of output bytes: {self.output_bytes} stored, and {what} is {size} "
                f"more, over {self.max_output_bytes} (SIGNOFF_RUN_MAX_OUTPUT_BYTES)",
                limit=self.max_output_bytes, used=self.output_bytes + size, vertex_id=None)
        self.output_bytes += size

    def call(self, request: httpx.Request | None = None) -> None:
        """One outbound request (the egress transport calls it before each one it sends)."""
        self.check()
        if self.max_calls is not None and self.calls >= self.max_calls:
            where = f" ({request.method} {request.url.scheme}://{request.url.host})" if request is not None else ""
            raise self._over(
                "calls",
                f"The run went over its budget of outbound calls: {self.calls} made, the most one run may make "
                f"(SIGNOFF_RUN_MAX_CALLS={self.max_calls}); the next one{where} was not sent",
                limit=self.max_calls, used=self.calls + 1, vertex_id=None)
        self.calls += 1

    def spend_tokens(self, usage: dict[str, Any] | None) -> None:
        """The tokens a model's answer reports (``usage.total_tokens``, else prompt + completion)."""
        if not isinstance(usage, dict):
            return
        total = usage.get("total_tokens")
        if not isinstance(total, int) or isinstance(total, bool):
            parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
            total = sum(p for p in parts if isinstance(p, int) and not isinstance(p, bool))
        if total <= 0:
            return
        self.tokens += total
        if self.max_tokens is not None and self.tokens > self.max_tokens:
            raise self._over(
                "tokens",
                f"The run went over its budget of model tokens: {self.tokens} used, more than the "
                f"{self.max_tokens} one run may use (SIGNOFF_RUN_MAX_TOKENS)",
                limit=self.max_tokens, used=self.tokens, vertex_id=None)


@functools.lru_cache(maxsize=64)
def egress_policy(allow: str) -> EgressPolicy:
    """The policy of a ``SIGNOFF_EGRESS_ALLOW`` value (parsed once per value)."""
    return EgressPolicy.parse(allow)


@dataclass
class RunContext:
    run_id: str
    job_id: str | None = None
    flow_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    input_value: Any = None
    # The owner of the flow being run: its nodes' secret references are this owner's secrets.
    owner_id: str | None = None
    history: HistoryStore | None = None
    flow_loader: FlowLoader | None = None
    secrets: SecretResolver | None = None
    clock: Callable[[], datetime] | None = None
    on_vertex_built: VertexHook | None = None
    wrap_build: BuildWrapper | None = None
    depth: int = 0  # nesting level (RunFlow)
    nested: NestedBudget = field(default_factory=NestedBudget)
    # The run's budgets (output bytes, outbound calls, model tokens), shared with nested runs.
    budget: RunBudget = field(default_factory=RunBudget)
    # The process settings, passed in by the caller (never read here): the egress policy and
    # caps, and an Agent's model defaults (openai_model/openai_base_url/openai_api_key).
    settings: Settings | None = None
    # Set by engine.run.context_for: components run nested flows through it, so they need not
    # import the engine's steps (which import the components).
    run_child: ChildRunner | None = None
    # Set by the run's tracer (engine.tracing): the spans of a component's model and tool calls.
    model_span: SpanFactory | None = None
    tool_span: SpanFactory | None = None
    # Set by the activities (engine/standing.py): an Agent asks it before it pauses for a gated
    # tool call; a standing approval in force approves the call (recorded), else it pauses.
    standing: StandingHook | None = None

    def now(self) -> datetime:
        return self.clock() if self.clock is not None else utcnow()

    def model_call(self, **attributes: Any) -> ContextManager[Any]:
        """``with ctx.run.model_call(model=..., number=n) as span: ...; span.model_result(r)``:
        the span of one model request of the component being built (docs/tracing.md)."""
        return self.model_span(**attributes) if self.model_span else contextlib.nullcontext(NoSpan())

    def tool_call(self, **attributes: Any) -> ContextManager[Any]:
        """The span of one tool run of the component being built (an Agent's tool call)."""
        return self.tool_span(**attributes) if self.tool_span else contextlib.nullcontext(NoSpan())

    # ---- the world -------------------------------------------------------------------------

    @property
    def egress(self) -> EgressPolicy:
        """What this run may dial: public addresses, and what SIGNOFF_EGRESS_ALLOW lists."""
        return egress_policy(self.settings.egress_allow if self.settings is not None else "")

    def http_client(self, *, allow: Iterable[str] = (), timeout: float | None = None) -> httpx.AsyncClient:
        """The one way a component dials out: ``async with ctx.run.http_client() as client``.
        Every connection is checked against the egress policy (plus ``allow``: what the operator
        configured for this call, e.g. its own model URL) on the resolved address; a response body
        is read up to ``SIGNOFF_HTTP_MAX_RESPONSE_BYTES``; every request (each redirect, each
        retry) counts against the run's budget of calls (``SIGNOFF_RUN_MAX_CALLS``)."""
        policy = self.egress.allowing(*allow) if allow else self.egress
        settings = self.settings or Settings()
        return egress_client(policy, timeout=min(timeout or settings.http_max_timeout_seconds,
                                                 settings.http_max_timeout_seconds),
                             max_response_bytes=settings.http_max_response_bytes, on_request=self.budget.call)

    @property
    def max_output_bytes(self) -> int:
        """The largest output a node may produce (SIGNOFF_MAX_OUTPUT_BYTES)."""
        return self.settings.max_output_bytes if self.settings is not None else DEFAULT_MAX_OUTPUT_BYTES

    def capped_timeout(self, seconds: float) -> float:
        """A component's own timeout, bounded by SIGNOFF_HTTP_MAX_TIMEOUT_SECONDS."""
        cap = (self.settings or Settings()).http_max_timeout_seconds
        return min(seconds, cap)

    async def reveal(self, value: Any, *, vertex_id: str) -> Any:
        """``value`` with every secret reference (``{"$secret": "NAME"}``) replaced by the value
        of the flow owner's secret of that name. Call it where the value is used, never to
        store it: the value must not reach an output, a span or an error message."""
        if not secret_names(value):
            return value
        if self.secrets is None or self.owner_id is None:
            raise ComponentError(f"{vertex_id}: secrets are not available here (the flow has no owner)",
                                 vertex_id=vertex_id)

        async def one(item: Any) -> Any:
            if is_secret_ref(item):
                name = item[SECRET_REF]
                found = await self.secrets(self.owner_id, name)  # type: ignore[misc]
                if found is None:
                    raise ComponentError(
                        f"{vertex_id}: no secret named {name!r} (the flow's owner creates it with "
                        f"`signoff secrets set {name}` or POST /api/v1/secrets)",
                        vertex_id=vertex_id,
                    )
                return found
            if isinstance(item, dict):
                return {k: await one(v) for k, v in item.items()}
            if isinstance(item, list):
                return [await one(v) for v in item]
            return item

        return await one(value)

    @property
    def effective_session(self) -> str:
        """The history session: the session id, else the flow id, else the run id."""
        return self.session_id or self.flow_id or self.run_id

    def child(self, **changes: Any) -> "RunContext":
        """A context for a nested run: same services, session and budget, one level deeper."""
        changes.setdefault("depth", self.depth + 1)
        return dataclasses.replace(self, **changes)

