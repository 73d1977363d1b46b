"""The in-process runner: runs a flow until it completes, pauses or fails, writing a
checkpoint at each pause before it returns. Used by `signoff run`, by unit tests, and as the
reference the Temporal workflow must match."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from datetime import datetime
from typing import Any, AsyncIterator, Callable, Literal

from pydantic import BaseModel, ValidationError

from signoff.engine.context import BuildWrapper, FlowLoader, RunContext, SecretResolver, VertexHook
from signoff.engine.errors import ComponentError, InvalidDecision, NotResumable, SignoffError
from signoff.engine.graph import Graph
from signoff.engine.models import AppliedDecision, Decision, PendingRequest, utcnow
from signoff.engine.decisions import apply_decision
from signoff.engine.liveness import plan_next
from signoff.engine.run import apply_layer, build_vertices, check_checkpointable, context_for, final_result
from signoff.engine.settings import Settings
from signoff.engine.spec import FlowSpec
from signoff.engine.state import RunState, new_run_state
from signoff.engine.store.base import CheckpointStore, HistoryStore
from signoff.engine.tracing.runs import RunTracing
from signoff.engine.validate import parse_and_validate


class RunOutcome(BaseModel):
    status: Literal["completed", "paused", "failed"]
    state: RunState
    pending: PendingRequest | None = None
    result: dict[str, Any] | None = None
    applied: AppliedDecision | None = None  # the decision applied by resume (rerouted=True: record human_input_expired)
    error: dict[str, Any] | None = None  # {error, type, code, vertex_id}
    checkpoint_id: str | None = None


def error_info(err: BaseException) -> dict[str, Any]:
    return {
        "error": str(err),
        "type": err.__class__.__name__,
        "code": getattr(err, "code", "INTERNAL_ERROR"),
        "vertex_id": getattr(err, "vertex_id", None),
    }


class InProcessRunner:
    def __init__(
        self,
        checkpoints: CheckpointStore,
        history: HistoryStore | None = None,
        flow_loader: FlowLoader | None = None,
        *,
        secrets: SecretResolver | None = None,
        clock: Callable[[], datetime] | None = None,
        on_vertex_built: VertexHook | None = None,
        wrap_build: BuildWrapper | None = None,
        settings: Settings | None = None,
        tracing: RunTracing | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.history = history
        self.flow_loader = flow_loader
        self.secrets = secrets
        self.clock = clock or utcnow
        self.on_vertex_built = on_vertex_built
        self.wrap_build = wrap_build
        self.settings = settings  # the Agent's model defaults (openai_*); None: params only
        # the one-trace story (root, vertex, gate, model and tool spans; docs/tracing.md); None: no spans
        self.tracing = tracing
        self._locks: dict[str, asyncio.Lock] = {}

    def context(self, state: RunState, graph: Graph | None = None) -> RunContext:
        """The context for building a layer from ``state`` (with tracing: that layer's spans)."""
        wrap_build, on_vertex_built = self.wrap_build, self.on_vertex_built
        spans: dict[str, Any] = {}
        if self.tracing is not None and graph is not None:
            hooks = self.tracing.hooks(graph, state)
            wrap_build = _outer_wrap(hooks.pop("wrap_build"), wrap_build)
            on_vertex_built = _both_hooks(hooks.pop("on_vertex_built"), on_vertex_built)
            spans = hooks  # the components' model and tool call spans
        return context_for(
            state,
            history=self.history,
            flow_loader=self.flow_loader,
            secrets=self.secrets,
            clock=self.clock,
            on_vertex_built=on_vertex_built,
            wrap_build=wrap_build,
            settings=self.settings,
            **spans,
        )

    async def start(
        self,
        spec: FlowSpec | dict[str, Any] | str,
        *,
        run_id: str,
        input_value: Any = None,
        session_id: str | None = None,
        user_id: str | None = None,
        owner_id: str | None = None,
        flow_id: str | None = None,
        job_id: str | None = None,
    ) -> RunOutcome:
        """Run a flow from the start. Raises FlowInvalid for an invalid flow. ``owner_id``: the
        flow's owner, whose secrets its nodes may reference."""
        spec = parse_and_validate(spec)
        graph = Graph(spec)
        state = new_run_state(
            spec,
            run_id=run_id,
            job_id=job_id or run_id,
            flow_id=flow_id,
            user_id=user_id,
            owner_id=owner_id,
            session_id=session_id,
            input_value=input_value,
        )
        if self.tracing is not None:
            await self.tracing.started(state, start=self.clock())
        return await self._drive(graph, state, None)

    async def resume(
        self, run_id: str, request_id: str, decision: Decision | dict[str, Any], decided_by: str | None = None
    ) -> RunOutcome:
        """Load the latest checkpoint, apply the decision, continue. Raises NotResumable (no
        checkpoint, stale request id) and InvalidDecision (action not allowed)."""
        if not isinstance(decision, Decision):
            try:
                decision = Decision.model_validate(decision)
            except ValidationError as e:
                raise InvalidDecision(f"The decision is malformed: {e.errors(include_url=False)[0]['msg']}") from None
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            record = await self.checkpoints.load_latest_checkpoint(run_id)
            if record is None:
                raise NotResumable(f"Run '{run_id}' has no checkpoint to resume from")
            state = RunState.model_validate(record.data)
            graph = Graph.from_spec(state.flow)
            before = state
            state, applied = apply_decision(state, request_id, decision, self.clock(), decided_by)
            if self.tracing is not None:
                self.tracing.decided(before, applied)  # "Human In The Loop — {label}"
            if self.history is not None:
                await self.history.stamp_card(request_id, applied.action_id)
            return await self._drive(graph, state, applied)

    async def _drive(self, graph: Graph, state: RunState, applied: AppliedDecision | None) -> RunOutcome:
        try:
            outcome = await self._layers(graph, state, applied)
        except (asyncio.CancelledError, Exception) as e:  # the trace still says how the run ended
            if self.tracing is not None:
                cancelled = isinstance(e, asyncio.CancelledError)
                await self.tracing.ended(state, status="cancelled" if cancelled else "failed", end=self.clock(),
                                         error=None if cancelled else error_info(e))
            raise
        if self.tracing is not None:
            if outcome.status == "paused":
                await self.tracing.paused(outcome.state)
            else:
                await self.tracing.ended(outcome.state, status=outcome.status, end=self.clock(), error=outcome.error)
        return outcome

    async def _layers(self, graph: Graph, state: RunState, applied: AppliedDecision | None) -> RunOutcome:
        ctx = self.context(state) if self.tracing is None else None
        while True:
            ids = plan_next(graph, state)
            if not ids:
                break
            try:
                layer = await build_vertices(graph, state, ids, ctx or self.context(state, graph))
            except SignoffError as e:
                return RunOutcome(status="failed", state=state, applied=applied, error=error_info(e))
            state = apply_layer(graph, state, layer)
            if state.pending is not None:
                data = check_checkpointable(state)  # CheckpointError names the vertex
                cid = await self.checkpoints.save_checkpoint(state.run_id, data, job_id=state.job_id)
                return RunOutcome(status="paused", state=state, pending=state.pending, applied=applied, checkpoint_id=cid)
        if state.decisions:  # it paused before: its checkpoints are spent
            await self.checkpoints.delete_checkpoints(state.run_id)
        return RunOutcome(status="completed", state=state, result=final_result(graph, state), applied=applied)


def _outer_wrap(outer: BuildWrapper, inner: BuildWrapper | None) -> BuildWrapper:
    """``outer`` around ``inner`` (the tracing span around a caller's own wrapper)."""
    if inner is None:
        return outer

    @contextlib.asynccontextmanager
    async def both(vertex_id: str, component_type: str) -> AsyncIterator[None]:
        async with outer(vertex_id, component_type), inner(vertex_id, component_type):
            yield

    return both


def _both_hooks(first: VertexHook, second: VertexHook | None) -> VertexHook:
    if second is None:
        return first

    async def both(result: Any) -> None:
        for hook in (first, second):
            maybe = hook(result)
            if inspect.isawaitable(maybe):
                await maybe

    return both


__all__ = ["InProcessRunner", "RunOutcome", "ComponentError", "error_info"]
