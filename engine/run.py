"""Run state and the engine's steps.

The in-process runner and the Temporal workflow drive the same steps:

- :func:`plan_next` (pure): the vertices ready to build now.
- :func:`build_vertices` (I/O): build them concurrently; a pause comes back in the result.
- :func:`apply_layer` (pure): merge outputs, stop branches, propagate dead vertices, record a
  pause.
- :func:`apply_decision` (pure): check the request id and action, reroute a late answer,
  make the gated vertex buildable again with the decision injected.

:class:`RunState` is the checkpoint body; it round-trips through JSON losslessly.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, Field

from signoff.engine.components.base import BuildContext, PauseRequested, as_text
from signoff.engine.context import RunContext
from signoff.engine.errors import CheckpointError, ComponentError, InvalidDecision, NotResumable, SignoffError
from signoff.engine.graph import Edge, Graph
from signoff.engine.models import EXPIRED_ACTION, AppliedDecision, Decision, Message, PendingRequest
from signoff.engine.spec import FlowSpec, spec_hash

STATE_VERSION = 1


class RunState(BaseModel):
    version: int = STATE_VERSION
    run_id: str
    job_id: str | None = None
    flow_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    input_value: Any = None
    flow: dict[str, Any]
    flow_hash: str
    outputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    built: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    stopped: dict[str, list[str]] = Field(default_factory=dict)
    dead: list[str] = Field(default_factory=list)
    decisions: list[AppliedDecision] = Field(default_factory=list)
    decision_vertex: dict[str, str] = Field(default_factory=dict)  # request_id -> vertex id
    injected: dict[str, str] = Field(default_factory=dict)  # vertex -> request_id awaiting its rebuild
    pending: PendingRequest | None = None
    pending_vertex: str | None = None
    component_state: dict[str, dict[str, Any]] = Field(default_factory=dict)
    build_counts: dict[str, int] = Field(default_factory=dict)  # builds that completed or paused
    layers: int = 0

    @property
    def paused(self) -> bool:
        return self.pending is not None


class VertexResult(BaseModel):
    vertex_id: str
    component_type: str
    outputs: dict[str, Any] = Field(default_factory=dict)
    stopped: list[str] = Field(default_factory=list)
    state: dict[str, Any] | None = None
    pause: PendingRequest | None = None
    skipped: bool = False


class LayerResult(BaseModel):
    vertex_ids: list[str]
    results: dict[str, VertexResult] = Field(default_factory=dict)
    pause_vertex: str | None = None  # the vertex whose pause the run takes (at most one)

    @property
    def pause(self) -> PendingRequest | None:
        if self.pause_vertex is None:
            return None
        return self.results[self.pause_vertex].pause


def flow_hash(spec: FlowSpec | dict[str, Any]) -> str:
    return spec_hash(spec)


def new_run_state(
    spec: FlowSpec,
    *,
    run_id: str | None = None,
    job_id: str | None = None,
    flow_id: str | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    input_value: Any = None,
) -> RunState:
    data = spec.to_dict()
    return RunState(
        run_id=run_id or str(uuid.uuid4()),
        job_id=job_id,
        flow_id=flow_id,
        user_id=user_id,
        session_id=session_id,
        input_value=input_value,
        flow=data,
        flow_hash=spec_hash(data),
    )


def context_for(state: RunState, **services: Any) -> RunContext:
    """A RunContext with the run's identity taken from the state."""
    return RunContext(
        run_id=state.run_id,
        job_id=state.job_id,
        flow_id=state.flow_id,
        user_id=state.user_id,
        session_id=state.session_id,
        input_value=state.input_value,
        **services,
    )


# ---- liveness ---------------------------------------------------------------------------


def _edge_live(state: RunState, edge: Edge) -> bool:
    return (
        edge.source in state.built
        and edge.source not in state.skipped
        and edge.source_output not in state.stopped.get(edge.source, ())
    )


def _resolved(state: RunState, vertex_id: str) -> bool:
    return vertex_id in state.built or vertex_id in state.dead


def _propagate_dead(graph: Graph, state: RunState) -> None:
    """Mark dead every unbuilt vertex whose predecessors are all resolved and none of whose
    gating edges is live (the merge rule, docs/engine.md). Walks in topological order, so a
    dead vertex kills the vertices that depend on it alone in the same pass."""
    for vid in graph.order:
        if vid in state.built or vid in state.dead or vid == state.pending_vertex:
            continue
        preds = graph.predecessors[vid]
        if not preds or not all(_resolved(state, p) for p in preds):
            continue
        gating = graph.vertices[vid].gating_edges()
        if not any(_edge_live(state, e) for e in gating):
            state.dead.append(vid)


# ---- the steps -------------------------------------------------------------------------


def plan_next(graph: Graph, state: RunState) -> list[str]:
    """The vertices to build now: not built, not dead, all predecessors resolved. Empty while
    a decision is pending and when the run is finished."""
    if state.pending is not None:
        return []
    ready = []
    for vid in graph.order:
        if vid in state.built or vid in state.dead:
            continue
        if all(_resolved(state, p) for p in graph.predecessors[vid]):
            gating = graph.vertices[vid].gating_edges()
            if gating and not any(_edge_live(state, e) for e in gating):
                continue  # dead by the merge rule; apply_layer records it
            ready.append(vid)
    return ready


def is_finished(graph: Graph, state: RunState) -> bool:
    return state.pending is None and all(_resolved(state, v) for v in graph.vertices)


def resolve_inputs(graph: Graph, state: RunState, vertex_id: str) -> dict[str, Any]:
    """The values on the live edges into the vertex. A ``many`` input gets a list; a single
    input fed by several live edges takes the first live one in flow order."""
    vertex = graph.vertices[vertex_id]
    values: dict[str, Any] = {}
    for edge in vertex.in_edges:
        if not _edge_live(state, edge):
            continue
        value = state.outputs.get(edge.source, {}).get(edge.source_output)
        idef = vertex.inputs.get(edge.target_input)
        if idef is not None and idef.many:
            values.setdefault(edge.target_input, []).append(value)
        elif edge.target_input not in values:
            values[edge.target_input] = value
    return values


def _decisions_for(state: RunState, vertex_id: str) -> list[AppliedDecision]:
    return [d for d in state.decisions if state.decision_vertex.get(d.request_id) == vertex_id]


async def build_vertex(graph: Graph, state: RunState, vertex_id: str, ctx: RunContext) -> VertexResult:
    """Build one vertex. This is the one place where a component runs: observability wraps it
    through ``ctx.wrap_build`` and ``ctx.on_vertex_built``."""
    vertex = graph.vertices[vertex_id]
    injected = state.injected.get(vertex_id)
    decisions = _decisions_for(state, vertex_id)
    decision = next((d for d in decisions if d.request_id == injected), None) if injected else None
    bctx = BuildContext(
        vertex_id=vertex_id,
        component_type=vertex.type,
        inputs=resolve_inputs(graph, state, vertex_id),
        run=ctx,
        state=json.loads(json.dumps(state.component_state.get(vertex_id, {}))),
        decision=decision,
        decisions=decisions,
        has_consumers=bool(vertex.out_edges),
        wanted_outputs={e.source_output for e in vertex.out_edges},
    )
    component = vertex.component()

    async def run() -> VertexResult:
        try:
            outputs = await component.build_outputs(bctx, bctx.wanted_outputs)
        except PauseRequested as p:  # raised or returned: the same pause
            outputs = p
        if isinstance(outputs, PauseRequested):
            return VertexResult(
                vertex_id=vertex_id,
                component_type=vertex.type,
                outputs=outputs.outputs,
                state=outputs.state if outputs.state is not None else bctx.state,
                pause=outputs.request,
            )
        return VertexResult(
            vertex_id=vertex_id,
            component_type=vertex.type,
            outputs=dict(outputs or {}),
            stopped=sorted(bctx.stopped),
            state=bctx.state or None,
            skipped=bctx.skipped,
        )

    try:
        if ctx.wrap_build is not None:
            async with ctx.wrap_build(vertex_id, vertex.type):
                result = await run()
        else:
            result = await run()
    except ComponentError as e:
        if e.vertex_id is None:
            e.vertex_id = vertex_id
            e.details["vertex_id"] = vertex_id
        raise
    except SignoffError as e:
        e.vertex_id = vertex_id  # type: ignore[attr-defined]
        e.details.setdefault("vertex_id", vertex_id)
        raise
    except Exception as e:
        raise ComponentError(
            f"{vertex_id} ({vertex.type}) failed: {e.__class__.__name__}: {e}", vertex_id=vertex_id
        ) from e
    if ctx.on_vertex_built is not None:
        maybe = ctx.on_vertex_built(result)
        if asyncio.iscoroutine(maybe):
            await maybe
    return result


async def build_vertices(graph: Graph, state: RunState, vertex_ids: list[str], ctx: RunContext) -> LayerResult:
    """Build the vertices concurrently. A failure raises ComponentError (with vertex_id) after
    all of them finished; pauses come back in the result (the first in flow order is taken;
    the others are built again after the decision). The taken pause's gate card is stored in
    the session history here."""
    again = [v for v in vertex_ids if v in state.built or v in state.dead]
    if again:
        # a vertex restored as built (or killed) is never built again: resume is not a re-run
        raise ValueError(f"vertices already built or dead cannot be built again: {', '.join(again)}")
    outcomes = await asyncio.gather(
        *(build_vertex(graph, state, vid, ctx) for vid in vertex_ids), return_exceptions=True
    )
    layer = LayerResult(vertex_ids=list(vertex_ids))
    errors: list[BaseException] = []
    for vid, outcome in zip(vertex_ids, outcomes):
        if isinstance(outcome, BaseException):
            errors.append(outcome)
            continue
        layer.results[vid] = outcome
        if outcome.pause is not None and layer.pause_vertex is None:
            layer.pause_vertex = vid
    for err in errors:
        if not isinstance(err, Exception):
            raise err  # cancellation and friends
    if errors:
        raise errors[0]
    if layer.pause is not None and ctx.history is not None:
        await ctx.history.add_message(gate_card(graph, ctx, layer.pause_vertex, layer.pause))
    return layer


def gate_card(graph: Graph, ctx: RunContext, vertex_id: str, request: PendingRequest) -> Message:
    card = {
        "prompt": request.prompt,
        "options": [o.model_dump(mode="json") for o in request.options],
        "request_id": request.request_id,
    }
    return Message(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff:card/{request.request_id}")),
        session_id=ctx.effective_session,
        flow_id=ctx.flow_id,
        job_id=ctx.job_id,
        sender="Machine",
        sender_name=graph.vertices[vertex_id].display_name,
        text=request.prompt,
        kind="card",
        card=card,
        created_at=ctx.now(),
    )


def apply_layer(graph: Graph, state: RunState, result: LayerResult) -> RunState:
    """Merge a layer's results into a new state (the input is not changed)."""
    new = state.model_copy(deep=True)
    for vid in result.vertex_ids:
        vr = result.results.get(vid)
        if vr is None:
            continue
        new.build_counts[vid] = new.build_counts.get(vid, 0) + 1
        if vr.pause is not None:
            if vid != result.pause_vertex:
                continue  # built again after the decision
            new.pending = vr.pause
            new.pending_vertex = vid
            new.decision_vertex[vr.pause.request_id] = vid
            new.injected.pop(vid, None)
            if vr.state is not None:
                new.component_state[vid] = vr.state
            continue
        new.outputs[vid] = vr.outputs
        if vid not in new.built:
            new.built.append(vid)
        if vr.stopped:
            new.stopped[vid] = list(vr.stopped)
        else:
            new.stopped.pop(vid, None)
        if vr.skipped and vid not in new.skipped:
            new.skipped.append(vid)
        if vr.state is not None:
            new.component_state[vid] = vr.state
        new.injected.pop(vid, None)
    new.layers += 1
    _propagate_dead(graph, new)
    return new


def apply_decision(
    graph: Graph,
    state: RunState,
    request_id: str,
    decision: Decision,
    now: datetime,
    decided_by: str | None = None,
) -> tuple[RunState, AppliedDecision]:
    """Apply a person's decision to the pending request. Raises NotResumable for a request id
    that is not the pending one and InvalidDecision for an action outside allowed_decisions. A
    decision after ``paused_at + timeout_seconds`` is rerouted to the fallback action, or to
    ``__expired__`` (no branch runs). Only the gated vertex becomes buildable again."""
    pending = state.pending
    if pending is None or pending.request_id != request_id or state.pending_vertex is None:
        raise NotResumable(
            f"The run is not waiting for request '{request_id}'"
            + (f" (it waits for '{pending.request_id}')" if pending is not None else "")
        )
    if decision.action_id not in pending.allowed_decisions:
        raise InvalidDecision(
            f"'{decision.action_id}' is not one of the allowed decisions: {', '.join(pending.allowed_decisions)}",
            allowed_decisions=list(pending.allowed_decisions),
        )
    gated = graph.vertices.get(state.pending_vertex)
    if gated is not None:  # the component's own rules for the values (an Agent's edit needs args)
        gated.component_class.check_decision(gated.params, pending, decision)
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    action = decision.action_id
    rerouted = False
    if pending.timeout_seconds and pending.timeout_seconds > 0:
        if now > pending.paused_at + timedelta(seconds=pending.timeout_seconds):
            action = pending.fallback_action or EXPIRED_ACTION
            rerouted = True
    applied = AppliedDecision(
        request_id=request_id,
        requested_action=decision.action_id,
        action_id=action,
        values=decision.values,
        decided_by=decided_by,
        decided_at=now,
        rerouted=rerouted,
        timeout_seconds=pending.timeout_seconds,
    )
    new = state.model_copy(deep=True)
    vid = state.pending_vertex
    new.decisions.append(applied)
    new.decision_vertex[request_id] = vid
    new.injected[vid] = request_id
    new.pending = None
    new.pending_vertex = None
    # un-build only the gated vertex
    if vid in new.built:
        new.built.remove(vid)
    new.outputs.pop(vid, None)
    new.stopped.pop(vid, None)
    return new, applied


def final_result(graph: Graph, state: RunState) -> dict[str, Any]:
    """The terminal outputs shaped for the API: ``{"output": {reason, text, source},
    "outputs": {vertex_id: {type, status, display_name, content}}}``."""
    outputs: dict[str, Any] = {}
    last: str | None = None
    for vid in graph.terminal_vertices():
        if vid not in state.built or vid in state.skipped:
            continue
        vertex = graph.vertices[vid]
        values = state.outputs.get(vid, {})
        first = vertex.outputs[0] if vertex.outputs else None
        content = as_text(values.get(first)) if first else ""
        outputs[vid] = {
            "type": "message" if vertex.type == "ChatOutput" else "text",
            "status": "completed",
            "display_name": vertex.display_name,
            "content": content,
        }
        last = vid
    if last is not None:
        reason = "completed"
    elif any(d.action_id == EXPIRED_ACTION for d in state.decisions):
        reason = "expired"
    else:
        reason = "no_output"
    return {
        "output": {"reason": reason, "text": outputs[last]["content"] if last else "", "source": last},
        "outputs": outputs,
    }


def check_checkpointable(state: RunState) -> dict[str, Any]:
    """The state as JSON data, or CheckpointError naming the vertex whose output (or private
    state) does not survive a JSON round trip unchanged."""
    for kind, table in (("output", state.outputs), ("private state", state.component_state)):
        for vid, value in table.items():
            try:
                back = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as e:
                raise CheckpointError(
                    f"The {kind} of vertex '{vid}' cannot be stored in a checkpoint: {e}", vertex_id=vid
                ) from None
            if back != value:
                raise CheckpointError(
                    f"The {kind} of vertex '{vid}' does not survive JSON unchanged (tuples, non-string keys?)",
                    vertex_id=vid,
                )
    return state.model_dump(mode="json")


async def run_to_end(graph: Graph, state: RunState, ctx: RunContext) -> tuple[RunState, dict[str, Any] | None]:
    """Build layer after layer until the run pauses or finishes. Returns the state and, when
    finished, the final result. Raises ComponentError on a failure."""
    while True:
        ids = plan_next(graph, state)
        if not ids:
            break
        layer = await build_vertices(graph, state, ids, ctx)
        state = apply_layer(graph, state, layer)
        if state.pending is not None:
            return state, None
    return state, final_result(graph, state)
