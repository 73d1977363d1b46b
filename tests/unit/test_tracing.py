"""engine.tracing (and its SDK side) without services: the engine's steps driven as the
activities drive them, spans collected into a real SQLite store."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest

from signoff.engine import tracing as T
from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, OutputDef
from signoff.engine.errors import ComponentError
from signoff.engine.graph import Graph
from signoff.engine.models import Decision, Option, PendingRequest, utcnow
from tests.fixtures.memory import InMemoryCheckpointStore, InMemoryHistory
from signoff.engine.decisions import apply_decision
from signoff.engine.run import apply_layer, build_vertices, context_for, new_run_state, plan_next
from signoff.engine.runner import InProcessRunner
from signoff.engine.validate import parse_and_validate
from signoff.engine.store import open_store
from signoff.engine.settings import Settings
from signoff.engine.tracing import RunTracing
from signoff.engine.tracing import sdk as telemetry
from tests.fixtures.fake_openai import call, fail, say

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
    state, applied = apply_decision(state, pending.request_id, Decision(action_id="request_changes"),
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


# ---- in-process runs (InProcessRunner(tracing=RunTracing(...))) ------------------------------


@register
class TestBlock(Component):
    """Waits until cancelled (a long build: a run cancelled in the middle of a layer)."""

    __test__ = False
    type_name = "TestBlock"
    outputs = [OutputDef("out")]
    started: asyncio.Event | None = None

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        if TestBlock.started is not None:
            TestBlock.started.set()
        await asyncio.Event().wait()
        return {"out": "never"}


def runner_for(store, **kw) -> InProcessRunner:
    return InProcessRunner(InMemoryCheckpointStore(), InMemoryHistory(), tracing=RunTracing(store), **kw)


def tree(spans):
    """(root, {parent span id: [children in start order]})"""
    (root,) = [s for s in spans if s.parent_id is None]
    kids: dict[str, list] = {}
    for s in sorted(spans, key=lambda s: (s.start_time, s.span_id)):
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s)
    return root, kids


async def test_an_in_process_run_paused_and_resumed_in_a_new_runner_is_one_trace(store):
    run_id = str(uuid.uuid4())
    checkpoints = InMemoryCheckpointStore()
    async with telemetry.collect_spans(store):  # what a process does around its run (service/inline.py)
        out = await InProcessRunner(checkpoints, tracing=RunTracing(store)).start(
            GATE, run_id=run_id, input_value="my order", flow_id="f-in")
    assert out.status == "paused"
    listed = await store.list_traces(flow_id="f-in")
    assert listed[0]["trace_id"] == run_id and listed[0]["end_time"] is None  # provisional root: running
    async with telemetry.collect_spans(store):  # another runner (process): nothing in memory
        out = await InProcessRunner(checkpoints, tracing=RunTracing(store)).resume(
            run_id, out.pending.request_id, {"action_id": "request_changes"}, decided_by="carol")
    assert out.status == "completed"
    spans = await store.get_trace(run_id)
    root, kids = tree(spans)
    assert root.name == "gate" and root.status == "ok" and root.end_time is not None
    assert root.span_id == T.hex_span(T.root_span_id(run_id))
    assert [s.name for s in kids[root.span_id]] == [
        "Chat Input", "Prompt", "Human In The Loop — Request Changes", "Chat Output"]
    assert len(kids[root.span_id]) == len(spans) - 1
    gate = kids[root.span_id][2]
    assert gate.type == "gate" and gate.attributes["signoff.decided_by"] == "carol"
    assert root.start_time <= gate.start_time
    assert {s.attributes["otel.trace_id"] for s in spans} == {run_id.replace("-", "")}


async def test_an_in_process_run_without_tracing_writes_no_span(store):
    run_id = str(uuid.uuid4())
    async with telemetry.collect_spans(store) as sink:
        out = await InProcessRunner(InMemoryCheckpointStore()).start(GATE, run_id=run_id, input_value="x")
    assert out.status == "paused" and sink == [] and await store.get_trace(run_id) == []


async def test_an_in_process_failure_shows_where_the_run_died(store):
    run_id = str(uuid.uuid4())
    spec = {"name": "fails", "nodes": [{"id": "ask", "type": "ChatInput"},
                                        {"id": "calc", "type": "Calculator", "params": {"expression": "1/0"}},
                                        {"id": "out", "type": "TextOutput"}],
            "edges": [{"from": "calc.result", "to": "out.input_value"}]}
    async with telemetry.collect_spans(store):
        out = await runner_for(store).start(spec, run_id=run_id)
    assert out.status == "failed"
    root, kids = tree(await store.get_trace(run_id))
    assert root.status == "error" and root.attributes["signoff.error.vertex_id"] == "calc"
    calc = next(s for s in kids[root.span_id] if s.attributes["signoff.vertex_id"] == "calc")
    assert calc.status == "error"
    assert "out" not in {s.attributes["signoff.vertex_id"] for s in kids[root.span_id]}


async def test_an_in_process_run_cancelled_mid_layer_has_a_cancelled_root(store):
    run_id = str(uuid.uuid4())
    TestBlock.started = asyncio.Event()
    spec = {"name": "blocks", "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "b", "type": "TestBlock"},
                                         {"id": "out", "type": "TextOutput"}],
            "edges": [{"from": "b.out", "to": "out.input_value"}]}

    async def run():
        async with telemetry.collect_spans(store):
            await runner_for(store).start(spec, run_id=run_id)

    task = asyncio.create_task(run())
    await asyncio.wait_for(TestBlock.started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    root, kids = tree(await store.get_trace(run_id))
    assert root.status == "error" and root.attributes["signoff.status"] == "cancelled" and root.end_time
    block = next(s for s in kids[root.span_id] if s.attributes["signoff.vertex_id"] == "b")
    assert block.attributes["signoff.cancelled"] is True and block.end_time is not None


# ---- an Agent's model and tool calls: child spans of its vertex span ---------------------------


def agent_flow(llm, actions=("approve",)) -> dict[str, Any]:
    return {
        "name": "calc agent",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "agent", "type": "Agent", "params": {"model": "fake-model", "base_url": llm.base_url,
                                                        "retry_backoff": 0.01, "max_retries": 0}},
            {"id": "calc", "type": "Calculator", "params": {"tool_name": "calc", "approval_actions": list(actions)}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "agent.input_value"},
            {"from": "calc.tool", "to": "agent.tools"},
            {"from": "agent.response", "to": "out.input_value"},
        ],
    }


async def test_agent_model_and_tool_calls_are_child_spans_of_its_vertex(store, fake_openai, egress):
    fake_openai.add(call("calc", {"expression": "2+3" + " " * 3000}), say("It is 5."))
    run_id = str(uuid.uuid4())
    runner = runner_for(store, settings=egress.bind(Settings()))
    async with telemetry.collect_spans(store):
        out = await runner.start(agent_flow(fake_openai), run_id=run_id, input_value="2+3?")
    assert out.status == "paused" and out.pending.kind == "tool_approval"
    async with telemetry.collect_spans(store):
        out = await runner.resume(run_id, out.pending.request_id, {"action_id": "approve"}, decided_by="dan")
    assert out.status == "completed", out.error
    spans = await store.get_trace(run_id)
    root, kids = tree(spans)
    names = [s.name for s in kids[root.span_id]]
    assert sorted(names[:2]) == ["Calculator", "Chat Input"]  # the first layer: the tool's own vertex too
    assert names[2:] == ["Agent", "Human In The Loop — Approve", "Agent", "Chat Output"]
    first, gate, second = kids[root.span_id][2:5]
    assert first.attributes["signoff.paused"] is True
    (llm1,) = kids[first.span_id]
    assert llm1.type == "llm" and llm1.name == "fake-model" and llm1.status == "ok"
    assert llm1.attributes["gen_ai.request.model"] == "fake-model"
    assert llm1.attributes["gen_ai.usage.input_tokens"] == 1 and llm1.attributes["gen_ai.usage.output_tokens"] == 1
    assert llm1.outputs["tool_calls"][0]["name"] == "calc"
    assert gate.attributes["signoff.request_kind"] == "tool_approval" and gate.attributes["signoff.decided_by"] == "dan"
    tool, llm2 = kids[second.span_id]
    assert tool.type == "tool" and tool.name == "calc" and tool.status == "ok"
    assert tool.attributes["signoff.tool.name"] == "calc" and tool.attributes["signoff.tool.outcome"] == "approved"
    assert tool.attributes["signoff.component_type"] == "Calculator"
    assert len(tool.attributes["signoff.tool.args"]) <= T.MAX_VALUE_CHARS + 20  # the arguments, truncated
    assert tool.inputs["expression"].endswith("…") and tool.outputs == {"result": 5}
    assert gate.end_time <= tool.start_time
    assert llm2.type == "llm" and llm2.outputs["content"] == "It is 5." and llm2.status == "ok"
    assert len({s.span_id for s in spans}) == len(spans)
    assert fake_openai.count == 2


async def test_a_failing_model_call_and_tool_have_error_status(store, fake_openai, egress):
    fake_openai.add(call("calc", {"expression": "1/0"}), fail(400, "bad request: context too long"))
    run_id = str(uuid.uuid4())
    async with telemetry.collect_spans(store):
        out = await runner_for(store, settings=egress.bind(Settings())).start(
            agent_flow(fake_openai, actions=()), run_id=run_id, input_value="1/0?")
    assert out.status == "failed" and out.error["vertex_id"] == "agent"
    root, kids = tree(await store.get_trace(run_id))
    assert root.status == "error"
    agent = next(s for s in kids[root.span_id] if s.name == "Agent")
    assert agent.status == "error"
    llm1, tool, llm2 = kids[agent.span_id]
    assert (llm1.type, llm1.status) == ("llm", "ok")
    assert (tool.type, tool.status) == ("tool", "error") and tool.attributes["signoff.tool.outcome"] == "ran"
    assert (llm2.type, llm2.status) == ("llm", "error")
    assert "context too long" in llm2.attributes["signoff.error"]


async def test_signoff_run_tells_the_same_story(store, tmp_path):
    from signoff.commands.run import run_file

    path = tmp_path / "gate.json"
    path.write_text(json.dumps(GATE), encoding="utf-8")
    out = io.StringIO()
    async with telemetry.collect_spans(store):  # the CLI's spans, caught where they end
        code = await run_file(path, "my order", read=lambda _prompt: "request_changes", out=out)
    assert code == 0 and out.getvalue().strip() == "changes"
    (listed,) = await store.list_traces()
    root, kids = tree(await store.get_trace(listed["trace_id"]))
    assert root.status == "ok" and root.name == "gate"
    assert [s.name for s in kids[root.span_id]] == [
        "Chat Input", "Prompt", "Human In The Loop — Request Changes", "Chat Output"]
    assert kids[root.span_id][2].attributes["signoff.decided_by"] == "terminal"


async def test_a_tools_literal_credential_is_in_no_span(store, fake_openai, egress):
    """An HTTP tool whose header holds a literal token: the descriptor travels from the tool's
    vertex (its output) into the Agent's (its input); neither span shows the token."""
    token = "tok-literal-5f1e2d"
    fake_openai.add(say("no tool needed"))
    spec = {"name": "agent with a literal header", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "agent", "type": "Agent", "params": {"model": "fake-model", "base_url": fake_openai.base_url,
                                                    "max_retries": 0}},
        {"id": "http", "type": "HTTPRequest", "params": {"tool_name": "http", "url": "http://api.test/x",
                                                          "headers": {"Authorization": token}}},
        {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "agent.input_value"}, {"from": "http.tool", "to": "agent.tools"},
                  {"from": "agent.response", "to": "out.input_value"}]}
    run_id = str(uuid.uuid4())
    async with telemetry.collect_spans(store):
        out = await runner_for(store, settings=egress.bind(Settings())).start(spec, run_id=run_id, input_value="hi")
    assert out.status == "completed", out.error
    spans = await store.get_trace(run_id)
    agent = next(s for s in spans if s.name == "Agent")
    assert agent.inputs["tools"][0]["params"]["headers"]["Authorization"] == "********"  # the descriptor, masked
    assert agent.inputs["tools"][0]["params"]["url"] == "http://api.test/x"
    assert token not in json.dumps([(s.inputs, s.outputs, s.attributes) for s in spans], default=str)


def test_span_values_are_cut_without_encoding_what_the_cut_throws_away():
    """A vertex's inputs and outputs on its span are cut to MAX_VALUE_CHARS of JSON; only what the
    cut keeps is encoded (a run's output may be megabytes, encoded on the event loop: issue 28).
    The result is what cutting the whole value's JSON gives."""
    import json

    from signoff.engine.tracing.attributes import bounded

    class Past:  # would be encoded (default=str) only if the encoder reached past the cut
        def __str__(self) -> str:
            raise AssertionError("encoded past the cut")

    def whole(value, limit):  # the old way: encode all, then cut
        raw = json.dumps(value, default=str, ensure_ascii=False)
        return json.loads(raw) if len(raw) <= limit else raw[: limit - 1] + "…"

    values = {"big": "ab\"c\n" * 1000, "small": {"x": [1, "é", None]}, "many": list(range(5000)),
              "keys": {f"k{i}": "v" * i for i in range(300)}, "nested": [["x" * 3000]], "exact": "y" * 98}
    for limit in (100, 2000):
        assert bounded(values, limit) == {k: whole(v, limit) for k, v in values.items()}
    assert bounded({"v": list(range(3000)) + [Past()]}, 2000)["v"].endswith("…")
    assert bounded({"v": {**{f"k{i}": i for i in range(3000)}, "past": Past()}}, 2000)["v"].endswith("…")
    loop: list = []
    loop.append(loop)
    assert bounded({"v": loop}, 50) == {"v": "[[...]]"}  # a value that holds itself: its str
