"""The merge rule (docs/engine.md): a vertex runs when at least one of its gating edges is
live. Gating edges are the edges into its required inputs, or all its incoming edges when
none feeds a required input. Dead vertices kill what depends on them alone."""

from __future__ import annotations

from signoff.engine.graph import Graph
from signoff.engine.run import apply_layer, build_vertices, context_for, is_finished, new_run_state, plan_next
from signoff.engine.validate import parse_and_validate

from .conftest import flow


def routed(match: str, nodes: list[tuple], edges: list[tuple[str, str]]):
    """A router on the input text: true_result when it equals `match`."""
    return flow(
        [("ask", "ChatInput"), ("route", "ConditionalRouter", {"operator": "equals", "match_text": match})] + nodes,
        [("ask.message", "route.input_text")] + edges,
    )


async def test_two_branches_into_one_input_run_the_merge_once(runner, builds):
    spec = routed(
        "yes",
        [("t", "TestCounter"), ("f", "TestCounter"), ("merge", "TestCounter"), ("out", "TextOutput")],
        [
            ("route.true_result", "t.input_value"),
            ("route.false_result", "f.input_value"),
            ("t.out", "merge.input_value"),
            ("f.out", "merge.input_value"),
            ("merge.out", "out.input_value"),
        ],
    )
    done = await runner.start(spec, run_id="m1", input_value="no")
    assert builds == {"f": 1, "merge": 1}
    assert done.result["output"]["text"] == "merge(f(no))"
    assert set(done.state.dead) == {"t"}


async def test_one_live_edge_into_a_required_input_runs_the_vertex(runner, builds):
    # a (required) is fed by the true branch, b (required) by the false branch: one is always live
    spec = routed(
        "yes",
        [("j", "TestJoin"), ("out", "TextOutput")],
        [("route.true_result", "j.a"), ("route.false_result", "j.b"), ("j.out", "out.input_value")],
    )
    done = await runner.start(spec, run_id="m2", input_value="yes")
    assert builds == {"j": 1}
    assert done.result["output"]["text"] == "j[a=yes]"


async def test_all_required_edges_dead_kills_the_vertex_despite_a_live_optional_edge(runner, builds):
    spec = routed(
        "yes",
        [("side", "TestCounter"), ("j", "TestJoin", {"b": "fixed"}), ("after", "TestCounter"), ("out", "TextOutput")],
        [
            ("route.true_result", "j.a"),  # the only edge into a required input
            ("ask.message", "side.input_value"),
            ("side.out", "j.c"),  # live, but optional: does not keep j alive
            ("j.out", "after.input_value"),
            ("after.out", "out.input_value"),
        ],
    )
    done = await runner.start(spec, run_id="m3", input_value="no")
    assert builds == {"side": 1}
    assert {"j", "after", "out"} <= set(done.state.dead)
    assert done.result["output"]["reason"] == "no_output"


async def test_live_required_edge_with_dead_optional_edge_runs(runner, builds):
    spec = routed(
        "yes",
        [("j", "TestJoin", {"b": "fixed"}), ("out", "TextOutput")],
        [("ask.message", "j.a"), ("route.true_result", "j.c"), ("j.out", "out.input_value")],
    )
    done = await runner.start(spec, run_id="m4", input_value="no")
    assert builds == {"j": 1}
    assert done.result["output"]["text"] == "j[a=no b=fixed]"


async def test_only_optional_inputs_all_dead_kills_the_vertex(runner, builds):
    spec = routed(
        "yes",
        [("t", "TestCounter"), ("out", "ChatOutput", {"text": "fixed text"})],
        [("route.true_result", "t.input_value"), ("t.out", "out.input_value")],
    )
    done = await runner.start(spec, run_id="m5", input_value="no")
    assert builds == {}
    assert set(done.state.dead) == {"t", "out"}


async def test_many_input_collects_only_live_edges(runner, builds):
    spec = routed(
        "yes",
        [("x", "TestCounter"), ("y", "TestCounter"), ("j", "TestJoin", {"a": "1", "b": "2"}), ("out", "TextOutput")],
        [
            ("route.true_result", "x.input_value"),
            ("route.false_result", "y.input_value"),
            ("x.out", "j.items"),
            ("y.out", "j.items"),
            ("ask.message", "j.items"),
            ("j.out", "out.input_value"),
        ],
    )
    done = await runner.start(spec, run_id="m6", input_value="yes")
    assert builds == {"x": 1, "j": 1}
    assert done.result["output"]["text"] == "j[a=1 b=2 items=x(yes),yes]"


async def test_steps_drive_layers_concurrently_and_purely(builds, history):
    spec = parse_and_validate(
        flow(
            [("a", "TestCounter"), ("b", "TestCounter"), ("c", "TestJoin"), ("out", "TextOutput")],
            [("a.out", "c.a"), ("b.out", "c.b"), ("c.out", "out.input_value")],
        )
    )
    graph = Graph.from_spec(spec)
    assert graph.layers == [["a", "b"], ["c"], ["out"]]
    assert graph.successors["a"] == ["c"] and graph.predecessors["c"] == ["a", "b"]
    state = new_run_state(spec, run_id="steps")
    ctx = context_for(state, history=history)
    assert plan_next(graph, state) == ["a", "b"]
    layer = await build_vertices(graph, state, ["a", "b"], ctx)
    assert state.built == []  # build_vertices does not touch the state
    state2 = apply_layer(graph, state, layer)
    assert state.built == [] and state2.built == ["a", "b"]  # apply_layer is pure
    assert plan_next(graph, state2) == ["c"]
    while ids := plan_next(graph, state2):
        state2 = apply_layer(graph, state2, await build_vertices(graph, state2, ids, ctx))
    assert is_finished(graph, state2)
    assert state2.outputs["out"]["text"] == "c[a=a() b=b()]"


async def test_hooks_wrap_every_build(checkpoints, history):
    import contextlib
    import contextvars

    from signoff.engine.runner import InProcessRunner

    current = contextvars.ContextVar("span", default=None)
    seen: list[tuple[str, str, str | None]] = []
    built: list[tuple[str, bool]] = []

    @contextlib.asynccontextmanager
    async def span(vertex_id: str, component_type: str):
        token = current.set(vertex_id)  # what an OpenTelemetry span would do
        try:
            yield
        finally:
            seen.append((vertex_id, component_type, current.get()))
            current.reset(token)

    runner = InProcessRunner(checkpoints, history, wrap_build=span, on_vertex_built=lambda r: built.append((r.vertex_id, r.pause is not None)))
    spec = flow(
        [("ask", "ChatInput"), ("a", "TestCounter"), ("b", "TestCounter"), ("gate", "HumanInput"), ("out", "TextOutput")],
        [("ask.message", "a.input_value"), ("ask.message", "b.input_value"), ("a.out", "gate.prompt"),
         ("gate.branch_approve", "out.input_value")],
    )
    paused = await runner.start(spec, run_id="hooks", input_value="x")
    await runner.resume("hooks", paused.pending.request_id, {"action_id": "approve"})
    assert sorted(seen) == sorted([
        ("ask", "ChatInput", "ask"), ("a", "TestCounter", "a"), ("b", "TestCounter", "b"),
        ("gate", "HumanInput", "gate"), ("gate", "HumanInput", "gate"), ("out", "TextOutput", "out"),
    ])
    assert ("gate", True) in built and ("gate", False) in built and len(built) == 6
