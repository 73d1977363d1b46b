"""engine.tracing + signoff.telemetry without services: the engine's steps driven as the
activities drive them, spans collected into a real SQLite store."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from engine import tracing as T
from engine.errors import ComponentError
from engine.graph import Graph
from engine.models import Decision, Option, PendingRequest, utcnow
from engine.run import apply_decision, apply_layer, build_vertices, context_for, new_run_state, plan_next
from engine.spec import parse_and_validate
from engine.store import open_store
from signoff import telemetry

GATE = {
    "name": "gate",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "p", "type": "Prompt", "params": {"template": "Refund {q}?"}},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Request Changes"]}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "sent"}},
        {"id": "ch", "type": "ChatOutput", "params": {"text": "changes"}},
    ],
    "edges": [
        {"from": "ask.message", "to": "p.q"},
        {"from": "p.prompt", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "ok.input_value"},
        {"from": "gate.branch_request_changes", "to": "ch.input_value"},
    ],
}


@pytest.fixture
async def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'spans.db'}")
    await s.setup()
    yield s
    await s.close()


@pytest.fixture(autouse=True, scope="module")
def sdk():
    return telemetry.install()


async def drive(store, graph, state):
    """Layers until a pause or the end, each layer in its own span sink (like an activity)."""
    while ids := plan_next(graph, state):
        async with telemetry.collect_spans(store):
            tracer = T.RunTracer(graph, state)
            layer = await build_vertices(graph, state, ids, context_for(state, **tracer.hooks()))
        state = apply_layer(graph, state, layer)
        if state.pending is not None:
            break
    return state


def test_ids_are_derived_from_the_run_id():
    run_id = str(uuid.uuid4())
    assert T.trace_id_for(run_id) == uuid.UUID(run_id).int
    assert T.hex_trace(T.trace_id_for(run_id)) == run_id.replace("-", "")
    assert T.root_span_id(run_id) == T.root_span_id(run_id) != T.root_span_id(str(uuid.uuid4()))
    assert T.trace_id_for("not-a-uuid") == T.trace_id_for("not-a-uuid") > 0


def test_values_are_bounded_and_gate_labels_are_the_options_own():
    out = T.bounded({"a": "x" * 5000, "b": {"k": 1}, "c": object()}, limit=100)
    assert len(out["a"]) == 100 and out["a"].endswith("…") and out["b"] == {"k": 1} and isinstance(out["c"], str)
    pending = PendingRequest(request_id="g:r", options=[Option(action_id="request_changes", label="Request Changes")],
                             allowed_decisions=["request_changes"], paused_at=utcnow())
    assert T.gate_span_name(pending, "request_changes") == "Human In The Loop — Request Changes"
    assert T.gate_span_name(pending, "__expired__") == "Human In The Loop — Expired"
    assert T.gate_span_name(pending, "fallback") == "Human In The Loop — Fallback"


async def test_one_trace_through_a_pause(store):
    run_id = str(uuid.uuid4())
    spec = parse_and_validate(GATE)
    graph = Graph(spec)
    state = new_run_state(spec, run_id=run_id, job_id=run_id, flow_id="f1", input_value="my order")
    t0 = utcnow()
    await T.open_run(store, run_id=run_id, flow_id="f1", name="gate", start=t0, job_id=run_id)
    state = await drive(store, graph, state)
    assert state.pending is not None
    pending = state.pending
    state, applied = apply_decision(graph, state, pending.request_id, Decision(action_id="request_changes"),
                                    utcnow() + timedelta(milliseconds=5), decided_by="bob")
    async with telemetry.collect_spans(store):
        T.record_gate(run_id=run_id, pending=pending, applied=applied, vertex_id="gate", job_id=run_id, flow_id="f1")
    state = await drive(store, graph, state)
    listed = await store.list_traces(flow_id="f1")
    assert listed[0]["trace_id"] == run_id and listed[0]["end_time"] is None  # the run is still open
    async with telemetry.collect_spans(store):
        T.close_run(run_id=run_id, flow_id="f1", name="gate", start=t0, end=utcnow(), status="completed", job_id=run_id)

    spans = await store.get_trace(run_id)
    root = next(s for s in spans if s.parent_id is None)
    assert root.type == "flow" and root.status == "ok" and root.end_time is not None
    children = sorted((s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_time)
    assert len(children) == len(spans) - 1
    assert [s.name for s in children] == ["Chat Input", "Prompt", "Human In The Loop — Request Changes", "Chat Output"]
    gate = children[2]
    assert gate.type == "gate" and gate.attributes["signoff.action_id"] == "request_changes"
    assert gate.attributes["signoff.decided_by"] == "bob" and gate.attributes["signoff.rerouted"] is False
    prompt = children[1]
    assert prompt.attributes["signoff.component_type"] == "Prompt"
    assert prompt.outputs == {"prompt": "Refund my order?"} and "q" in prompt.inputs
    assert {s.attributes["otel.trace_id"] for s in spans} == {run_id.replace("-", "")}
    listed = await store.list_traces(flow_id="f1")
    assert listed[0]["status"] == "ok" and listed[0]["end_time"] is not None


async def test_a_failing_component_span_has_error_status(store):
    run_id = str(uuid.uuid4())
    spec = parse_and_validate({
        "name": "fails",
        "nodes": [{"id": "calc", "type": "Calculator", "params": {"expression": "1/0"}},
                  {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "calc.result", "to": "out.input_value"}],
    })
    graph = Graph(spec)
    state = new_run_state(spec, run_id=run_id, job_id=run_id, flow_id="f2")
    with pytest.raises(ComponentError):
        await drive(store, graph, state)
    (span,) = await store.get_trace(run_id)
    assert span.status == "error" and span.attributes["signoff.vertex_id"] == "calc"
    assert span.end_time is not None and span.attributes.get("signoff.error")


async def test_a_retried_layer_rewrites_the_same_spans(store):
    run_id = str(uuid.uuid4())
    spec = parse_and_validate(GATE)
    graph = Graph(spec)
    state = new_run_state(spec, run_id=run_id, job_id=run_id, input_value="x")
    for _ in range(2):  # the same layer built twice from the same state, as after a lost worker
        async with telemetry.collect_spans(store):
            tracer = T.RunTracer(graph, state)
            await build_vertices(graph, state, plan_next(graph, state), context_for(state, **tracer.hooks()))
    assert [s.name for s in await store.get_trace(run_id)] == ["Chat Input"]
