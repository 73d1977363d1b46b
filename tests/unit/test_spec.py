"""Flow spec loading and validation: every problem is listed, with the node or edge named."""

from __future__ import annotations

import pytest

from signoff.engine.errors import FlowInvalid
from signoff.engine.spec import FlowSpec, load_flow
from signoff.engine.validate import flow_has_gate, parse_and_validate, validate_flow

from .conftest import flow

REFUND_JSON = """{"name": "Refund approval",
 "nodes": [
   {"id": "ask",  "type": "ChatInput"},
   {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
   {"id": "ok",   "type": "ChatOutput", "params": {"text": "Refund sent"}},
   {"id": "no",   "type": "ChatOutput", "params": {"text": "Refund refused"}}],
 "edges": [
   {"from": "ask.message",        "to": "gate.prompt"},
   {"from": "gate.branch_approve", "to": "ok.input_value"},
   {"from": "gate.branch_reject",  "to": "no.input_value"}]}"""

REFUND_YAML = """
name: Refund approval
nodes:
  - {id: ask, type: ChatInput}
  - id: gate
    type: HumanInput
    params: {decisions: [Approve, Reject]}
  - {id: ok, type: ChatOutput, params: {text: Refund sent}}
  - {id: no, type: ChatOutput, params: {text: Refund refused}}
edges:
  - {from: ask.message, to: gate.prompt}
  - {from: gate.branch_approve, to: ok.input_value}
  - {from: gate.branch_reject, to: no.input_value}
"""


def problems_of(spec) -> list[dict]:
    with pytest.raises(FlowInvalid) as info:
        parse_and_validate(spec)
    return info.value.problems


def test_json_yaml_and_dict_load_the_same_flow():
    a = parse_and_validate(REFUND_JSON)
    b = parse_and_validate(REFUND_YAML)
    c = parse_and_validate(a.to_dict())
    assert a == b == c
    assert isinstance(a, FlowSpec)
    assert a.edges[0].source == "ask.message" and a.edges[0].target_input == "prompt"
    assert a.to_dict()["edges"][0] == {"from": "ask.message", "to": "gate.prompt"}
    assert flow_has_gate(a)


def test_unknown_type_is_named():
    p = problems_of(flow([("x", "NoSuchThing")], []))
    assert p == [{"node": "x", "message": "unknown component type 'NoSuchThing'"}]


def test_unknown_input_and_output_are_named():
    p = problems_of(
        flow([("a", "ChatInput"), ("b", "ChatOutput")], [("a.nope", "b.input_value"), ("a.message", "b.wrong")])
    )
    assert {(x.get("edge"), x.get("node")) for x in p} == {
        ("a.nope->b.input_value", "a"),
        ("a.message->b.wrong", "b"),
    }
    assert any("no output 'nope'" in x["message"] for x in p)
    assert any("no input 'wrong'" in x["message"] for x in p)


def test_dangling_edge_is_named():
    p = problems_of(flow([("a", "ChatInput")], [("a.message", "ghost.input_value")]))
    assert p == [{"edge": "a.message->ghost.input_value", "message": "dangling edge: no node 'ghost'"}]


def test_malformed_edge_end_is_named():
    p = problems_of(flow([("a", "ChatInput"), ("b", "ChatOutput")], [("a", "b.input_value")]))
    assert p[0]["edge"] == "a->b.input_value" and "node.port" in p[0]["message"]


def test_duplicate_id_is_named():
    p = problems_of(flow([("a", "ChatInput"), ("a", "TextInput")], []))
    assert p == [{"node": "a", "message": "duplicate node id 'a'"}]


def test_cycle_is_named():
    p = problems_of(
        flow(
            [("a", "TestCounter"), ("b", "TestCounter"), ("c", "TestCounter")],
            [("a.out", "b.input_value"), ("b.out", "c.input_value"), ("c.out", "a.input_value")],
        )
    )
    assert len(p) == 1 and p[0]["node"] == "a"
    assert p[0]["message"] == "cycle: a -> b -> c -> a"


def test_missing_required_param_is_named():
    p = problems_of(flow([("p", "Prompt")], []))
    assert p == [{"node": "p", "message": "missing required param 'template'"}]
    p = problems_of(flow([("r", "RunFlow")], []))
    assert p == [{"node": "r", "message": "missing required param 'flow_id' (or 'flow_name': the flow's name)"}]


def test_missing_required_input_is_named():
    p = problems_of(flow([("calc", "Calculator")], []))
    assert p == [{"node": "calc", "message": "required input 'expression' is neither connected by an edge nor set as a param"}]
    # a param of the same name satisfies it
    parse_and_validate(flow([("calc", "Calculator", {"expression": "1+1"})], []))


def test_wrong_param_type_is_named():
    p = problems_of(
        flow(
            [
                ("g", "HumanInput", {"decisions": "Approve", "enable_fallback": "yes", "timeout": {"value": 1, "unit": "Weeks"}}),
                ("h", "HTTPRequest", {"url": "ftp://x", "headers": [], "method": "BREW", "timeout": "3"}),
            ],
            [],
        )
    )
    by_node = {}
    for x in p:
        by_node.setdefault(x["node"], []).append(x["message"])
    assert "param 'decisions' must be a list of strings, got str" in by_node["g"]
    assert "param 'enable_fallback' must be true or false, got str" in by_node["g"]
    assert any("Weeks" in m for m in by_node["g"])
    assert "param 'headers' must be an object, got list" in by_node["h"]
    assert "param 'timeout' must be a number, got str" in by_node["h"]
    assert any("BREW" in m for m in by_node["h"])
    assert any("http://" in m for m in by_node["h"])


def test_component_rules_are_checked():
    p = problems_of(
        flow(
            [
                ("g", "HumanInput", {"decisions": ["Yes", " yes "]}),
                ("p", "Prompt", {"template": "Hello {name.attr} {"}),
                ("r", "ConditionalRouter", {"operator": "like", "input_text": "x"}),
                ("c", "Calculator", {"expression": "1", "approval_actions": ["approve", "nuke"]}),
            ],
            [],
        )
    )
    nodes = {x["node"] for x in p}
    assert nodes == {"g", "p", "r", "c"}


def test_every_problem_is_listed_at_once():
    spec = flow(
        [("a", "ChatInput"), ("a", "ChatInput"), ("x", "Nope"), ("p", "Prompt")],
        [("a.message", "ghost.in"), ("a.message", "p.nothing")],
    )
    p = problems_of(spec)
    assert len(p) == 5
    assert {x.get("node") or x.get("edge") for x in p} >= {"a", "x", "p", "a.message->ghost.in"}


def test_bad_shapes_are_problems_not_crashes():
    assert problems_of("") == [{"message": "the flow is empty"}]
    assert "not valid JSON" in problems_of("{nope")[0]["message"]
    assert "not valid YAML" in problems_of("a: [")[0]["message"]
    assert problems_of("[1, 2]") == [{"message": "a flow is an object with name, nodes and edges"}]
    p = problems_of({"name": "x", "nodes": [{"id": "a"}], "edges": [{"from": "a.b"}]})
    assert {x.get("node") for x in p} >= {"a"}
    assert any(x.get("edge") == "a.b->?" for x in p)
    assert any("nodes" in x["message"] for x in problems_of({"name": "x"}))
    assert problems_of({"name": "x", "nodes": []}) == [{"message": "the flow has no nodes"}]


def test_prompt_variables_and_gate_branches_are_ports():
    spec = parse_and_validate(
        flow(
            [
                ("t", "TextInput", {"value": "Ann"}),
                ("p", "Prompt", {"template": "Hi {name}, {{literal}} {mood}", "mood": "fine"}),
                ("g", "HumanInput", {"decisions": ["Ship it", "Hold"], "enable_fallback": True}),
                ("o1", "TextOutput"),
                ("o2", "TextOutput"),
            ],
            [("t.text", "p.name"), ("p.prompt", "g.prompt"), ("g.branch_ship_it", "o1.input_value"), ("g.branch_fallback", "o2.input_value")],
        )
    )
    assert flow_has_gate(spec)


def test_flow_has_gate():
    unwired = load_flow(flow([("a", "ChatInput"), ("g", "HumanInput")], [("a.message", "g.prompt")]))
    validate_flow(unwired)
    assert not flow_has_gate(unwired)
    plain = load_flow(flow([("a", "ChatInput"), ("o", "ChatOutput")], [("a.message", "o.input_value")]))
    assert not flow_has_gate(plain)
    tool = load_flow(
        flow(
            [("c", "Calculator", {"approval_actions": ["approve"]}), ("t", "TextOutput")],
            [("c.tool", "t.input_value")],
        )
    )
    assert flow_has_gate(tool)


JUNK = [
    None, 1, "null", "42", "- a\n- b", {"nodes": "x"}, {"nodes": [1, 2]}, {"nodes": [{"id": 1, "type": []}]},
    {"nodes": [{"id": "a", "type": "HumanInput", "params": {"decisions": [1, None, {}], "timeout": [1]}}]},
    {"nodes": [{"id": "a", "type": "HumanInput", "params": {"timeout": {"value": "x", "unit": 3}}}]},
    {"nodes": [{"id": "a", "type": "Prompt", "params": {"template": "{" * 5001}}]},
    {"nodes": [{"id": "a", "type": "Prompt", "params": {"template": "{0} {} {a[1]} {b!r} {c:>3}"}}]},
    {"nodes": [{"id": "a", "type": "ConditionalRouter", "params": {"operator": "regex", "match_text": "(", "input_text": 3}}]},
    {"nodes": [{"id": "a", "type": "HTTPRequest", "params": {"url": 5, "headers": {"a": {"b": 1}}, "timeout": -1}}]},
    {"nodes": [{"id": "a", "type": "ChatInput", "extra": 1}], "edges": [{"from": ".", "to": "."}]},
    {"nodes": [{"id": "a", "type": "ChatInput"}], "edges": [{"from": "a.message.x", "to": "a..b"}, "edge"]},
    {"nodes": [{"id": "", "type": ""}]},
    "nodes: !!python/object/apply:os.system ['true']",
]


@pytest.mark.parametrize("junk", JUNK)
def test_junk_is_a_flow_problem_never_a_crash(junk):
    with pytest.raises(FlowInvalid) as info:
        parse_and_validate(junk)
    assert info.value.problems and all(isinstance(p["message"], str) for p in info.value.problems)


def test_node_limit():
    nodes = [(f"n{i}", "TextInput") for i in range(11)]
    with pytest.raises(FlowInvalid) as info:
        parse_and_validate(flow(nodes, []), max_nodes=10)
    assert "limit is 10" in info.value.problems[0]["message"]
