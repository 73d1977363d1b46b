"""The in-process runner: runs a flow until it completes, pauses or fails, writing a
checkpoint at each pause before it returns. Used by `signoff run`, by unit tests, and as the
reference the Temporal workflow must match."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Callable, Literal

import httpx
from pydantic import BaseModel, ValidationError

from engine.context import BuildWrapper, FlowLoader, RunContext, VertexHook
from engine.errors import ComponentError, InvalidDecision, NotResumable, SignoffError
from engine.graph import Graph
from engine.models import AppliedDecision, Decision, PendingRequest, utcnow
from engine.run import (
    RunState,
    apply_decision,
    apply_layer,
    build_vertices,
    check_checkpointable,
    context_for,
    final_result,
    new_run_state,
    plan_next,
)
from engine.settings import Settings
from engine.spec import FlowSpec, parse_and_validate
from engine.store.base import CheckpointStore, HistoryStore


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
        http_client_factory: Callable[[], httpx.AsyncClient] | None = None,
        clock: Callable[[], datetime] | None = None,
        on_vertex_built: VertexHook | None = None,
        wrap_build: BuildWrapper | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.history = history
        self.flow_loader = flow_loader
        self.http_client_factory = http_client_factory
        self.clock = clock or utcnow
        self.on_vertex_built = on_vertex_built
        self.wrap_build = wrap_build
        self.settings = settings  # the Agent's model defaults (openai_*); None: params only
        self._locks: dict[str, asyncio.Lock] = {}

    def context(self, state: RunState) -> RunContext:
        return context_for(
            state,
            history=self.history,
            flow_loader=self.flow_loader,
            http_client_factory=self.http_client_factory,
            clock=self.clock,
            on_vertex_built=self.on_vertex_built,
            wrap_build=self.wrap_build,
            settings=self.settings,
        )

    async def start(
        self,
        spec: FlowSpec | dict[str, Any] | str,
        *,
        run_id: str,
        input_value: Any = None,
        session_id: str | None = None,
        user_id: str | None = None,
        flow_id: str | None = None,
        job_id: str | None = None,
    ) -> RunOutcome:
        """Run a flow from the start. Raises FlowInvalid for an invalid flow."""
        spec = parse_and_validate(spec)
        graph = Graph(spec)
        state = new_run_state(
            spec,
            run_id=run_id,
            job_id=job_id or run_id,
            flow_id=flow_id,
            user_id=user_id,
            session_id=session_id,
            input_value=input_value,
        )
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
            state, applied = apply_decision(graph, state, request_id, decision, self.clock(), decided_by)
            if self.history is not None:
                await self.history.stamp_card(request_id, applied.action_id)
            return await self._drive(graph, state, applied)

    async def _drive(self, graph: Graph, state: RunState, applied: AppliedDecision | None) -> RunOutcome:
        ctx = self.context(state)
        while True:
            ids = plan_next(graph, state)
            if not ids:
                break
            try:
                layer = await build_vertices(graph, state, ids, ctx)
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


__all__ = ["InProcessRunner", "RunOutcome", "ComponentError", "error_info"]
