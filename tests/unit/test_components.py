"""Components, with real side effects counted: HTTPRequest against a local HTTP server."""

from __future__ import annotations

import json

import pytest

from signoff.engine.components import COMPONENTS, get_component
from signoff.engine.components.calculator import CalcError, evaluate
from signoff.engine.components.http_request import idempotency_key
from signoff.engine.models import Decision

from .conftest import flow


def test_registry_holds_every_component():
    for t in ["ChatInput", "TextInput", "Prompt", "ChatOutput", "TextOutput", "HumanInput",
              "ConditionalRouter", "Calculator", "HTTPRequest", "RunFlow"]:
        assert get_component(t) is COMPONENTS[t]
    assert get_component("Nope") is None


@pytest.mark.parametrize(
    "expr,value",
    [("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 / 2", 3.5), ("7 // 2", 3), ("-2 ** 2", -4), ("10 % 4", 2), ("2 ** 10", 1024), (" 0.5+0.25 ", 0.75)],
)
def test_calculator_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    "expr",
    ["__import__('os').system('true')", "x + 1", "open('f')", "(1).real", "[1, 2]", "1 / 0", "9 ** 99999", "2 ** 400 ** 2", "", "1 +", "True + 1", "'a' * 3"],
)
def test_calculator_refuses_anything_but_arithmetic(expr):
    with pytest.raises(CalcError):
        evaluate(expr)


async def test_calculator_in_a_flow(runner):
    spec = flow([("ask", "ChatInput"), ("calc", "Calculator"), ("out", "TextOutput")],
                [("ask.message", "calc.expression"), ("calc.result", "out.input_value")])
    done = await runner.start(spec, run_id="calc", input_value="6 * 7")
    assert done.result["output"]["text"] == "42"
    bad = await runner.start(spec, run_id="calc-bad", input_value="import os")
    assert bad.status == "failed" and bad.error["vertex_id"] == "calc"
    assert "not an arithmetic expression" in bad.error["error"]


@pytest.mark.parametrize(
    "operator,match,case,text,branch",
    [
        ("equals", "Yes", False, "yes", "t"),
        ("equals", "Yes", True, "yes", "f"),
        ("contains", "refund", False, "A REFUND please", "t"),
        ("contains", "refund", True, "A REFUND please", "f"),
        ("regex", r"^\d+$", False, "12345", "t"),
        ("regex", r"^\d+$", False, "12a", "f"),
    ],
)
async def test_conditional_router(runner, builds, operator, match, case, text, branch):
    spec = flow(
        [("ask", "ChatInput"), ("r", "ConditionalRouter", {"operator": operator, "match_text": match, "case_sensitive": case}),
         ("t", "TestCounter"), ("f", "TestCounter")],
        [("ask.message", "r.input_text"), ("r.true_result", "t.input_value"), ("r.false_result", "f.input_value")],
    )
    await runner.start(spec, run_id=f"router-{operator}-{case}-{text}", input_value=text)
    assert builds == {branch: 1}


async def test_prompt_fills_variables(runner):
    spec = flow(
        [("ask", "ChatInput"), ("name", "TextInput", {"value": "Ann"}),
         ("p", "Prompt", {"template": "Dear {name}, about '{request}' {{ok}}"}), ("out", "TextOutput")],
        [("name.text", "p.name"), ("ask.message", "p.request"), ("p.prompt", "out.input_value")],
    )
    done = await runner.start(spec, run_id="prompt", input_value="refund")
    assert done.result["output"]["text"] == "Dear Ann, about 'refund' {ok}"


async def test_http_request_hits_the_server_once_with_an_idempotency_key(runner, http_server, builds):
    spec = flow(
        [("ask", "ChatInput"),
         ("http", "HTTPRequest", {"url": f"{http_server.url}/refunds", "method": "POST", "headers": {"X-T": "1"}}),
         ("gate", "HumanInput"), ("ok", "TestCounter"), ("out", "TextOutput")],
        [("ask.message", "http.body"), ("http.response", "gate.prompt"),
         ("gate.branch_approve", "ok.input_value"), ("ok.out", "out.input_value")],
    )
    paused = await runner.start(spec, run_id="http-run", input_value="5 EUR")
    assert len(http_server.hits) == 1
    hit = http_server.hits[0]
    assert hit["method"] == "POST" and hit["path"] == "/refunds" and hit["body"] == "5 EUR"
    assert hit["headers"]["Idempotency-Key"] == idempotency_key("http-run", "http")
    assert hit["headers"]["X-T"] == "1"
    assert json.loads(paused.pending.prompt)["echo"] == "5 EUR"
    done = await runner.resume("http-run", paused.pending.request_id, Decision(action_id="approve"))
    assert done.status == "completed"
    assert len(http_server.hits) == 1  # resume is not a re-run
    assert builds == {"ok": 1}


async def test_http_request_in_a_rejected_branch_never_fires(runner, http_server):
    spec = flow(
        [("ask", "ChatInput"), ("gate", "HumanInput"), ("http", "HTTPRequest", {"method": "POST"}), ("out", "TextOutput")],
        [("ask.message", "gate.prompt"), ("gate.branch_approve", "http.url"), ("http.response", "out.input_value")],
    )
    paused = await runner.start(spec, run_id="http-reject", input_value=f"{http_server.url}/pay")
    done = await runner.resume("http-reject", paused.pending.request_id, Decision(action_id="reject"))
    assert done.status == "completed"
    assert http_server.hits == []
    paused = await runner.start(spec, run_id="http-approve", input_value=f"{http_server.url}/pay")
    done = await runner.resume("http-approve", paused.pending.request_id, Decision(action_id="approve"))
    assert [h["path"] for h in http_server.hits] == ["/pay"]
    assert json.loads(done.result["output"]["text"])["path"] == "/pay"


async def test_http_error_fails_the_vertex_as_retryable(runner, http_server):
    spec = flow([("http", "HTTPRequest", {"url": f"{http_server.url}/fail"}), ("out", "TextOutput")],
                [("http.response", "out.input_value")])
    out = await runner.start(spec, run_id="http-fail")
    assert out.status == "failed" and out.error["vertex_id"] == "http"
    assert "500" in out.error["error"]


CHILD = flow([("in", "ChatInput"), ("calc", "Calculator"), ("out", "TextOutput")],
             [("in.message", "calc.expression"), ("calc.result", "out.input_value")])
GATED_CHILD = flow(
    [("in", "ChatInput"), ("gate", "HumanInput"), ("out", "TextOutput")],
    [("in.message", "gate.prompt"), ("gate.branch_approve", "out.input_value")],
)
UNWIRED_GATE_CHILD = flow([("in", "ChatInput"), ("gate", "HumanInput"), ("out", "TextOutput")],
                          [("in.message", "gate.prompt"), ("in.message", "out.input_value")])


def parent(flow_id: str):
    return flow([("ask", "ChatInput"), ("sub", "RunFlow", {"flow_id": flow_id}), ("out", "ChatOutput")],
                [("ask.message", "sub.input_value"), ("sub.output", "out.input_value")])


async def test_run_flow_runs_the_child_in_process(runner, flows, history, checkpoints):
    flows["child"] = CHILD
    done = await runner.start(parent("child"), run_id="nest", input_value="2+3", session_id="s-nest")
    assert done.status == "completed"
    assert done.result["output"]["text"] == "5"
    assert checkpoints.saves == 0


async def test_run_flow_with_a_gate_fails_with_the_message(runner, flows, checkpoints):
    flows["gated"] = GATED_CHILD
    out = await runner.start(parent("gated"), run_id="nest-gate", input_value="x")
    assert out.status == "failed"
    assert out.error["code"] == "NESTED_GATE"
    assert out.error["vertex_id"] == "sub"
    assert "move the approval to the parent flow" in out.error["error"]
    assert checkpoints.saves == 0


async def test_run_flow_with_an_unwired_gate_runs(runner, flows):
    flows["unwired"] = UNWIRED_GATE_CHILD
    done = await runner.start(parent("unwired"), run_id="nest-unwired", input_value="hello")
    assert done.status == "completed"
    assert done.result["output"]["text"] == "hello"


async def test_run_flow_unknown_or_recursive_flow_fails(runner, flows):
    out = await runner.start(parent("missing"), run_id="nest-missing", input_value="x")
    assert out.status == "failed" and "not found" in out.error["error"]
    flows["loop"] = parent("loop")
    out = await runner.start(parent("loop"), run_id="nest-loop", input_value="x")
    assert out.status == "failed" and "nested deeper" in out.error["error"]


async def test_tool_output_is_a_serialisable_descriptor(runner, builds):
    spec = flow(
        [("calc", "Calculator", {"tool_name": "calc", "tool_description": "Does maths", "approval_actions": ["approve", "reject"]}),
         ("sink", "TestJoin", {"a": "1", "b": "2"})],
        [("calc.tool", "sink.items")],
    )
    # TestJoin is not an Agent; the descriptor still flows and is JSON
    from signoff.engine.graph import Graph
    from signoff.engine.run import build_vertex, context_for, new_run_state
    from signoff.engine.validate import parse_and_validate

    s = parse_and_validate(spec)
    g = Graph.from_spec(s)
    st = new_run_state(s, run_id="tool")
    vr = await build_vertex(g, st, "calc", context_for(st))
    assert vr.outputs == {
        "tool": {
            "component_type": "Calculator",
            "vertex_id": "calc",
            "params": {"tool_name": "calc", "tool_description": "Does maths", "approval_actions": ["approve", "reject"]},
            "tool_name": "calc",
            "tool_description": "Does maths",
            "approval_actions": ["approve", "reject"],
        }
    }
    json.dumps(vr.outputs)


# ---- a node's output is bounded (SIGNOFF_MAX_OUTPUT_BYTES) ------------------------------------------


async def test_prompts_chained_to_double_stop_at_the_output_cap(runner):
    """Each Prompt doubles its input: 1 KB becomes 2 KB, 4 KB... past the cap the run fails at the
    node that crosses it, with the setting named, instead of filling the worker's memory."""
    runner.settings.max_output_bytes = 64 * 1024
    nodes = [("in", "TextInput", {"value": "x" * 1024})]
    edges = []
    for i in range(12):  # 1 KB * 2**12 = 4 MB: far past 64 KB
        nodes.append((f"p{i}", "Prompt", {"template": "{a}{a}"}))
        edges.append((f"{'in.text' if i == 0 else f'p{i - 1}.prompt'}", f"p{i}.a"))
    nodes.append(("out", "TextOutput"))
    edges.append(("p11.prompt", "out.input_value"))
    out = await runner.start(flow(nodes, edges), run_id="doubling", input_value="")
    assert out.status == "failed" and out.error["vertex_id"] == "p5"  # 64 KB of text and its key: over 64 KB
    assert "SIGNOFF_MAX_OUTPUT_BYTES" in out.error["error"]


async def test_a_template_that_repeats_a_variable_is_refused_before_it_is_made(runner):
    runner.settings.max_output_bytes = 64 * 1024
    spec = flow([("in", "TextInput", {"value": "y" * 1024}), ("p", "Prompt", {"template": "{a}" * 100}),
                 ("out", "TextOutput")], [("in.text", "p.a"), ("p.prompt", "out.input_value")])
    out = await runner.start(spec, run_id="repeat", input_value="")
    assert out.status == "failed" and out.error["vertex_id"] == "p"
    assert "would be 102700 characters" in out.error["error"]
    runner.settings.max_output_bytes = 128 * 1024
    ok = await runner.start(spec, run_id="repeat-ok", input_value="")
    assert ok.status == "completed" and len(ok.result["output"]["text"]) == 102400


RACE = """
import sys
import threading
from signoff.engine import components
names = ["HumanInput", "ChatInput", "Prompt", "HTTPRequest", "ConditionalRouter", "Agent", "RunFlow", "ChatOutput"]
missing = []
for round in range(3):
    if round:  # the registry as a fresh interpreter has it: empty, its modules not yet imported
        for name in [m for m in sys.modules if m.startswith("signoff.engine.components.") and not m.endswith(".base")]:
            del sys.modules[name]
        components.COMPONENTS.clear()
        components._loaded = False
    barrier = threading.Barrier(len(names))
    def one(name):
        barrier.wait()
        if components.get_component(name) is None:
            missing.append((round, name))
    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    [t.start() for t in threads]
    [t.join() for t in threads]
print(sorted(missing))
"""


def test_threads_asking_a_fresh_registry_at_once_all_find_every_component() -> None:
    """The API checks flows on worker threads: the first uploads after a start, at once, saw a
    registry another thread was still filling ("unknown component type 'HumanInput'")."""
    import subprocess
    import sys

    # a fresh interpreter (the registry is filled on first use), then twice more a registry and
    # component modules emptied back to that state: three races for one interpreter's start
    out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
