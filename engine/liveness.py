"""Which vertices of a run are live, resolved, ready or dead (the merge rule, docs/engine.md), and
the values on the live edges into a vertex. Pure functions of a graph and a run state."""

from __future__ import annotations

from typing import Any

from signoff.engine.graph import Edge, Graph
from signoff.engine.state import RunState


def edge_live(state: RunState, edge: Edge) -> bool:
    return (
        edge.source in state.built
        and edge.source not in state.skipped
        and edge.source_output not in state.stopped.get(edge.source, ())
    )


def resolved(state: RunState, vertex_id: str) -> bool:
    return vertex_id in state.built or vertex_id in state.dead


def propagate_dead(graph: Graph, state: RunState) -> None:
    """Mark dead every unbuilt vertex whose predecessors are all resolved and none of whose
    gating edges is live (the merge rule, docs/engine.md). Walks in topological order, so a
    dead vertex kills the vertices that depend on it alone in the same pass."""
    for vid in graph.order:
        if vid in state.built or vid in state.dead or vid == state.pending_vertex:
            continue
        preds = graph.predecessors[vid]
        if not preds or not all(resolved(state, p) for p in preds):
            continue
        gating = graph.vertices[vid].gating_edges()
        if not any(edge_live(state, e) for e in gating):
            state.dead.append(vid)


def plan_next(graph: Graph, state: RunState) -> list[str]:
    """The vertices to build now: not built, not dead, all predecessors resolved. Empty while
    a decision is pending and when the run is finished."""
    if state.pending is not None:
        return []
    ready = []
    for vid in graph.order:
        if vid in state.built or vid in state.dead:
            continue
        if all(resolved(state, p) for p in graph.predecessors[vid]):
            gating = graph.vertices[vid].gating_edges()
            if gating and not any(edge_live(state, e) for e in gating):
                continue  # dead by the merge rule; apply_layer records it
            ready.append(vid)
    return ready


def is_finished(graph: Graph, state: RunState) -> bool:
    return state.pending is None and all(resolved(state, v) for v in graph.vertices)


def resolve_inputs(graph: Graph, state: RunState, vertex_id: str) -> dict[str, Any]:
    """The values on the live edges into the vertex. A ``many`` input gets a list; a single
    input fed by several live edges takes the first live one in flow order."""
    vertex = graph.vertices[vertex_id]
    values: dict[str, Any] = {}
    for edge in vertex.in_edges:
        if not edge_live(state, edge):
            continue
        value = state.outputs.get(edge.source, {}).get(edge.source_output)
        idef = vertex.inputs.get(edge.target_input)
        if idef is not None and idef.many:
            values.setdefault(edge.target_input, []).append(value)
        elif edge.target_input not in values:
            values[edge.target_input] = value
    return values
