"""The engine's steps. The in-process runner and the Temporal workflow drive the same ones:

- :func:`~signoff.engine.liveness.plan_next` (pure): the vertices ready to build now.
- :func:`build_vertices` (I/O): build them concurrently; a pause comes back in the result.
- :func:`apply_layer` (pure): merge outputs, stop branches, propagate dead vertices, record a
  pause.
- :func:`~signoff.engine.decisions.apply_decision` (pure): check the decision, reroute a late
  answer, make the gated vertex buildable again with the decision injected.

The run's state (:class:`~signoff.engine.state.RunState`) is the checkpoint body.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from signoff.engine.components.base import BuildContext, PauseRequested, as_text
from signoff.engine.context import NestedBudget, RunBudget, RunContext, json_size
from signoff.engine.decisions import apply_decision
from signoff.engine.errors import CheckpointError, ComponentError, FlowInvalid, NestedGateError, SignoffError
from signoff.engine.graph import Graph
from signoff.engine.liveness import is_finished, plan_next, propagate_dead, resolve_inputs
from signoff.engine.models import EXPIRED_ACTION, AppliedDecision, FlowRecord, Message, PendingRequest
from signoff.engine.state import LayerResult, RunState, VertexResult, new_run_state
from signoff.engine.validate import flow_has_gate, parse_and_validate

__all__ = [
    "LayerResult", "RunState", "VertexResult", "apply_decision", "apply_layer", "build_vertex", "build_vertices",
    "check_checkpointable", "context_for", "final_result", "gate_card", "is_finished", "new_run_state", "plan_next",
    "resolve_inputs", "run_child", "run_to_end",
]


def context_for(state: RunState, **services: Any) -> RunContext:
    """A RunContext with the run's identity taken from the state; nested runs (Run Flow) run
    through :func:`run_child`."""
    services.setdefault("run_child", run_child)
    settings = services.get("settings")
    services.setdefault("nested", NestedBudget(used=state.nested_runs,
                                               limit=settings.max_nested_runs if settings is not None else None))
    services.setdefault("budget", RunBudget.of(state.spent, settings))
    return RunContext(
        run_id=state.run_id,
        job_id=state.job_id,
        flow_id=state.flow_id,
        user_id=state.user_id,
        owner_id=state.owner_id,
        session_id=state.session_id,
        input_value=state.input_value,
        **services,
    )


# ---- the steps -------------------------------------------------------------------------


def _decisions_for(state: RunState, vertex_id: str) -> list[AppliedDecision]:
    return [d for d in state.decisions if state.decision_vertex.get(d.request_id) == vertex_id]


def _over(value: Any, limit: int) -> bool:
    """Whether ``value`` is over ``limit`` bytes, about its JSON size (text counted as UTF-8 at
    most, numbers as 8), without building the JSON; stops as soon as it is over."""
    return json_size(value, limit) > limit


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
            # what the run stores of a pause: the outputs and state it keeps, the request
            ctx.budget.spend_output([outputs.outputs, outputs.state, outputs.request.model_dump(mode="json")],
                                    vertex_id=vertex_id)
            return VertexResult(
                vertex_id=vertex_id,
                component_type=vertex.type,
                outputs=outputs.outputs,
                state=outputs.state if outputs.state is not None else bctx.state,
                pause=outputs.request,
            )
        over = _over(outputs, ctx.max_output_bytes)
        if over:
            raise ComponentError(
                f"{vertex.type} '{vertex_id}': its output is over {ctx.max_output_bytes} bytes "
                "(SIGNOFF_MAX_OUTPUT_BYTES)", vertex_id=vertex_id)
        ctx.budget.spend_output([outputs, bctx.state], vertex_id=vertex_id)  # the run's total (SIGNOFF_RUN_MAX_OUTPUT_BYTES)
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
    # over a budget, the run fails with that, whatever a component made of the error (an Agent
    # may have caught it around a tool, an HTTP node reported another)
    _check_budget(ctx, errors)
    if errors:
        raise errors[0]
    if layer.pause is not None and ctx.history is not None:
        card = gate_card(graph, ctx, layer.pause_vertex, layer.pause)
        ctx.budget.spend_output(card.card, vertex_id=layer.pause_vertex)
        await ctx.history.add_message(card)
    layer.nested_runs, layer.spent = ctx.nested.used, ctx.budget.spent()
    return layer


def _check_budget(ctx: RunContext, errors: list[BaseException]) -> None:
    """Raise the run's budget error if one of the layer's builds went over a budget. A build it
    passed through named itself on it (build_vertex); when a component swallowed it, the vertex
    is that of the layer's first error, if any."""
    exceeded = ctx.budget.exceeded
    if exceeded is None:
        return
    if exceeded.vertex_id is None:
        exceeded.vertex_id = next((v for v in (getattr(e, "vertex_id", None) for e in errors) if v), None)
        exceeded.details["vertex_id"] = exceeded.vertex_id
    raise exceeded


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
    if result.nested_runs is not None:
        new.nested_runs = result.nested_runs
    if result.spent is not None:
        new.spent = result.spent.model_copy()
    propagate_dead(graph, new)
    return new


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
            "type": vertex.component_class.output_kind,
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


async def run_child(ctx: RunContext, flow: FlowRecord, input_value: Any, *, vertex_id: str) -> dict[str, Any]:
    """Run another flow to its end as a nested run of ``ctx``'s run (Run Flow): one more against
    the run's budget of nested runs, a child context one level deeper with its own run id under
    the parent's and the child flow's owner (its nodes' secrets are that owner's), no chat
    history of its own. Returns the child's final result. A child that can pause cannot run
    nested (NestedGateError)."""
    ctx.nested.spend(vertex_id)
    try:
        child_spec = parse_and_validate(flow.spec)
    except FlowInvalid as e:
        raise ComponentError(f"RunFlow: flow '{flow.id}' is not valid: {e.problems}", vertex_id=vertex_id) from None
    if flow_has_gate(child_spec):
        raise NestedGateError(
            f"RunFlow '{vertex_id}': flow '{flow.id}' contains an approval gate and cannot run as a nested "
            "flow; move the approval to the parent flow.",
            vertex_id=vertex_id,
            flow_id=flow.id,
        )
    child_ctx = ctx.child(run_id=f"{ctx.run_id}.{vertex_id}", flow_id=flow.id, owner_id=flow.owner_id,
                          input_value=as_text(input_value), history=None)
    state = new_run_state(child_spec, run_id=child_ctx.run_id, job_id=ctx.job_id, flow_id=flow.id,
                          user_id=ctx.user_id, owner_id=flow.owner_id, session_id=ctx.session_id,
                          input_value=child_ctx.input_value)
    state, result = await run_to_end(Graph(child_spec), state, child_ctx)
    if state.pending is not None or result is None:  # an Agent tool approval inside: the gate check missed it
        raise NestedGateError(vertex_id=vertex_id, flow_id=flow.id)
    return result
