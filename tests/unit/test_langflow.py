"""Langflow exports as signoff flows (engine/langflow): the conversion, the refusal that lists
every problem, the way back, and the new components, without services. The exports are built at
test time in Langflow's format (tests/fixtures/langflow.py); the runs against Temporal are in
tests/integration/api/test_langflow.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from signoff.engine.errors import FlowInvalid
from signoff.engine.langflow import LangflowUnsupported, from_langflow, is_langflow, to_langflow
from signoff.engine.sharing import untweakable
from signoff.engine.spec import apply_tweaks, load_flow
from signoff.engine.validate import parse_and_validate
from tests.fixtures.fake_openai import call, say
from tests.fixtures.langflow import (
    agent,
    api_request,
    calculator,
    chat_input,
    chat_output,
    field,
    human_input,
    if_else,
    lf_edge,
    lf_flow,
    lf_node,
    memory,
    openai_model,
    prompt,
    run_flow,
    text_input,
    text_output,
)

from .conftest import flow


def basic_prompting(base_url: str = "http://127.0.0.1:9/v1", *, strings_only: bool = False) -> dict[str, Any]:
    """The shape of Langflow's starter project Basic Prompting: Chat Input and a Prompt into an
    OpenAI model, its answer to Chat Output."""
    ci, pr = chat_input("ChatInput-jFwU1"), prompt("Prompt-3SM21", "Answer the user as a pirate would.")
    model, co = openai_model("OpenAIModel-OcX11", base_url), chat_output("ChatOutput-gDY11")
    return lf_flow("Basic Prompting", [ci, pr, model, co], [
        lf_edge(ci, "message", model, "input_value", strings_only=strings_only),
        lf_edge(pr, "prompt", model, "system_message", strings_only=strings_only),
        lf_edge(model, "text_output", co, "input_value", strings_only=strings_only),
    ])


def every_component() -> dict[str, Any]:
    """One node of every supported Langflow component, wired as Langflow wires them."""
    ci = chat_input("ChatInput-aa001", sender_name="Ann")
    ti = text_input("TextInput-aa002", "fixed words")
    pt = prompt("Prompt Template-aa003", "Q: {question} ({extra})", lf_type="Prompt Template", extra="be short")
    comb = lf_node("CombineText-aa004", "CombineText", {"text1": "", "text2": "", "delimiter": " | "})
    hist = memory("Memory-aa005", n_messages=5, order="Descending")
    lm = lf_node("LanguageModelComponent-aa006", "LanguageModelComponent", {
        "model": field("model", [{"name": "gpt-4o-mini", "provider": "OpenAI", "metadata": {}}], type="model"),
        "api_key": field("api_key", "OPENAI_API_KEY", load_from_db=True, password=True),
        "input_value": "", "system_message": "You answer briefly.", "stream": False, "temperature": 0.3})
    gate = human_input("HumanInput-x8Kq2", "Send it?", ["Approve", "Ask again"], enable_fallback=True,
                       timeout={"value": 2, "unit": "Hours"})
    router = if_else("ConditionalRouter-aa007", "not equals", "no", true_case_message="went on")
    calc = calculator("CalculatorComponent-aa008",
                      tool={"name": "calculate", "description": "Adds numbers", "tags": ["calculate"], "status": True,
                            "approval_actions": ["approve", "reject"]})
    http = api_request("APIRequest-aa009", "http://127.0.0.1:9/items", "POST",
                       headers=[{"key": "X-Team", "value": "blue"}], body=[{"key": "n", "value": 1}])
    ag = agent("Agent-aa010", "http://127.0.0.1:9/v1", n_messages=10, add_current_date_tool=True)
    date = lf_node("CurrentDate-aa011", "CurrentDate", {"timezone": "Europe/Paris"})
    sub = run_flow("RunFlow-aa012", "Child flow")
    out1, out2 = chat_output("ChatOutput-aa013"), text_output("TextOutput-aa014")
    nodes = [ci, ti, pt, comb, hist, lm, gate, router, calc, http, ag, date, sub, out1, out2]
    edges = [
        lf_edge(ci, "message", pt, "question"), lf_edge(pt, "prompt", comb, "text1"), lf_edge(ti, "text", comb, "text2"),
        lf_edge(hist, "messages_text", lm, "system_message"), lf_edge(comb, "combined_text", lm, "input_value"),
        lf_edge(lm, "text_output", gate, "prompt"), lf_edge(gate, "branch_approve", router, "input_text"),
        lf_edge(router, "true_result", ag, "input_value"), lf_edge(calc, "component_as_tool", ag, "tools"),
        lf_edge(ag, "response", sub, "ChatInput-c0001~input_value"),
        lf_edge(sub, "ChatOutput-c0002~message", out1, "input_value"),
        lf_edge(date, "current_date", http, "body", input_types=["Data", "JSON"]), lf_edge(http, "data", out2, "input_value"),
    ]
    return lf_flow("Everything", nodes, edges, description="All of it")


# ---- the import ------------------------------------------------------------------------------


def test_basic_prompting_becomes_a_valid_spec_with_langflows_node_ids():
    spec = from_langflow(basic_prompting())
    parse_and_validate(spec)
    assert spec["name"] == "Basic Prompting"
    assert {n["id"]: n["type"] for n in spec["nodes"]} == {
        "ChatInput-jFwU1": "ChatInput", "Prompt-3SM21": "Prompt", "OpenAIModel-OcX11": "LanguageModel",
        "ChatOutput-gDY11": "ChatOutput"}  # the sticky note is gone
    assert spec["edges"] == [
        {"from": "ChatInput-jFwU1.message", "to": "OpenAIModel-OcX11.input_value"},
        {"from": "Prompt-3SM21.prompt", "to": "OpenAIModel-OcX11.system_message"},
        {"from": "OpenAIModel-OcX11.text_output", "to": "ChatOutput-gDY11.input_value"}]
    model = next(n for n in spec["nodes"] if n["id"] == "OpenAIModel-OcX11")
    assert model["params"] == {"model": "gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1", "temperature": 0.1,
                               "seed": 1, "max_retries": 1, "timeout": 30}  # no api_key: the operator's key rule
    assert spec["langflow"]["nodes"]["OpenAIModel-OcX11"]["type"] == "OpenAIModel"


def test_handles_only_as_strings_are_read_too():
    assert from_langflow(basic_prompting(strings_only=True))["edges"] == from_langflow(basic_prompting())["edges"]


def test_every_supported_component_converts_and_validates():
    spec = from_langflow(every_component())
    parse_and_validate(spec)
    by_id = {n["id"]: n for n in spec["nodes"]}
    assert by_id["HumanInput-x8Kq2"]["params"] == {  # its prompt is wired: the typed text is not used
        "decisions": ["Approve", "Ask again"], "timeout": {"value": 2, "unit": "Hours"}, "enable_fallback": True}
    assert by_id["ConditionalRouter-aa007"]["params"] == {
        "operator": "not_equals", "match_text": "no", "case_sensitive": True, "true_case_message": "went on"}
    assert by_id["LanguageModelComponent-aa006"]["params"] == {  # its system message is wired
        "api_key": {"$secret": "OPENAI_API_KEY"}, "temperature": 0.3, "model": "gpt-4o-mini"}
    assert by_id["CalculatorComponent-aa008"]["params"] == {
        "tool_name": "calculate", "tool_description": "Adds numbers", "approval_actions": ["approve", "reject"]}
    assert by_id["APIRequest-aa009"]["params"] == {
        "url": "http://127.0.0.1:9/items", "method": "POST", "headers": {"X-Team": "blue"}, "timeout": 5}
    assert by_id["Agent-aa010"]["params"]["n_messages"] == 10
    assert by_id["Agent-aa010"]["params"]["add_current_date_tool"] is True
    assert by_id["RunFlow-aa012"]["params"] == {"flow_name": "Child flow"}
    assert by_id["Prompt Template-aa003"]["params"] == {"template": "Q: {question} ({extra})", "extra": "be short"}
    assert by_id["Memory-aa005"]["type"] == "MessageHistory"
    assert by_id["ChatInput-aa001"]["params"] == {"sender_name": "Ann"}
    edges = {(e["from"], e["to"]) for e in spec["edges"]}
    assert ("CalculatorComponent-aa008.tool", "Agent-aa010.tools") in edges
    assert ("Agent-aa010.response", "RunFlow-aa012.input_value") in edges
    assert ("RunFlow-aa012.output", "ChatOutput-aa013.input_value") in edges
    assert ("HumanInput-x8Kq2.branch_approve", "ConditionalRouter-aa007.input_text") in edges
    assert spec["langflow"]["nodes"]["RunFlow-aa012"]["handles"] == {
        "input_value": "ChatInput-c0001~input_value", "output": "ChatOutput-c0002~message"}


def test_import_export_import_gives_the_same_spec():
    for doc in (basic_prompting(), every_component()):
        spec = from_langflow(doc)
        exported = to_langflow(spec, flow_id="f1")
        again = from_langflow(json.loads(json.dumps(exported)))
        assert again == spec


def test_the_export_is_in_langflows_shape():
    spec = from_langflow(every_component())
    doc = to_langflow(spec, flow_id="f1")
    assert is_langflow(doc) and doc["name"] == "Everything" and "signoff" not in doc
    assert "code" not in json.dumps(doc["data"]["nodes"])
    nodes = {n["id"]: n for n in doc["data"]["nodes"]}
    assert nodes["LanguageModelComponent-aa006"]["data"]["type"] == "LanguageModelComponent"
    assert nodes["Memory-aa005"]["data"]["type"] == "Memory"
    assert nodes["CalculatorComponent-aa008"]["data"]["node"]["tool_mode"] is True
    assert nodes["HumanInput-x8Kq2"]["position"] == spec["langflow"]["nodes"]["HumanInput-x8Kq2"]["position"]
    key = nodes["LanguageModelComponent-aa006"]["data"]["node"]["template"]["api_key"]
    assert key["value"] == "OPENAI_API_KEY" and key["load_from_db"] is True and key["password"] is True
    gate_outputs = [o["name"] for o in nodes["HumanInput-x8Kq2"]["data"]["node"]["outputs"]]
    assert gate_outputs == ["branch_approve", "branch_ask_again", "branch_fallback"]
    for edge in doc["data"]["edges"]:  # the handle strings say what the data objects say
        assert json.loads(edge["sourceHandle"].replace("œ", '"')) == edge["data"]["sourceHandle"]
        assert json.loads(edge["targetHandle"].replace("œ", '"')) == edge["data"]["targetHandle"]
    tool_edge = next(e for e in doc["data"]["edges"] if e["source"] == "CalculatorComponent-aa008")
    assert tool_edge["data"]["sourceHandle"]["name"] == "component_as_tool"
    assert tool_edge["data"]["targetHandle"] == {"fieldName": "tools", "id": "Agent-aa010", "inputTypes": ["Tool"],
                                                 "type": "other"}


def test_a_signoff_flow_exports_and_comes_back_the_same_even_what_langflow_cannot_hold():
    spec = flow([
        ("ask", "ChatInput"),
        ("gate", "HumanInput", {"decisions": ["Ship", "Hold"], "approvers": ["ann", "group:ops"],
                                "required_approvals": 2, "timeout": 60}),
        ("hook", "HTTPRequest", {"url": "https://example.com/x", "method": "POST",
                                 "headers": {"Authorization": {"$secret": "TOKEN"}}}),
        ("out", "ChatOutput", {"text": "shipped"}),
    ], [("ask.message", "gate.prompt"), ("gate.branch_ship", "hook.body"), ("hook.response", "out.input_value")])
    spec["nodes"][0]["tweakable"] = ["input_value"]
    parse_and_validate(spec)
    doc = to_langflow(spec)
    assert doc["signoff"]["params"]["gate"] == {"approvers": ["ann", "group:ops"], "required_approvals": 2}
    assert doc["signoff"]["params"]["hook"] == {"headers": {"Authorization": {"$secret": "TOKEN"}}}
    assert doc["signoff"]["tweakable"] == {"ask": ["input_value"]}
    again = from_langflow(json.loads(json.dumps(doc)))
    assert {k: v for k, v in again.items() if k != "langflow"} == spec


def test_load_flow_and_parse_and_validate_take_a_langflow_export_as_text():
    text = json.dumps(basic_prompting())
    assert [n.id for n in load_flow(text).nodes] == [n.id for n in parse_and_validate(text.encode()).nodes]
    assert load_flow(text).node("OpenAIModel-OcX11").type == "LanguageModel"


# ---- refusals -------------------------------------------------------------------------------


def test_every_unsupported_component_and_setting_is_listed_and_nothing_is_imported():
    ci = chat_input("ChatInput-zz001", sender="Machine", should_store_message=False)
    vec = lf_node("AstraDB-zz002", "AstraDB", {"token": "x"}, display="Astra DB", outputs=[("search_results", "Results", ["Data"])])
    custom = lf_node("CustomComponent-zz003", "ChatOutput", {"input_value": ""}, display="My Output", edited=True)
    jinja = prompt("Prompt-zz004", "Hi {name}", fields={"template_format": "jinja2"})
    model = openai_model("OpenAIModel-zz005", "http://x/v1", json_mode=True)
    out = chat_output("ChatOutput-zz006")
    agent_node = agent("Agent-zz007", "http://x/v1")
    doc = lf_flow("Bad", [ci, vec, custom, jinja, model, out, agent_node], [
        lf_edge(ci, "message", vec, "search_query"),
        lf_edge(model, "model_output", agent_node, "agent_llm"),
        lf_edge(model, "text_output", out, "input_value"),
    ])
    with pytest.raises(LangflowUnsupported) as caught:
        from_langflow(doc)
    err = caught.value
    assert err.code == "FLOW_INVALID"
    listed = {(p.get("node"), p.get("langflow_type"), p.get("display_name")) for p in err.problems}
    assert ("AstraDB-zz002", "AstraDB", "Astra DB") in listed
    assert ("CustomComponent-zz003", "ChatOutput", "My Output") in listed
    messages = " | ".join(p["message"] for p in err.problems)
    assert "the component type 'AstraDB' is not supported" in messages
    assert "code was edited" in messages
    assert "(sender) = \"Machine\"" in messages
    assert "should_store_message" in messages
    assert "jinja2" in messages
    assert "json_mode" in messages
    assert "model_output" in messages  # the model object output, wired into the agent
    assert {"type": "ChatInput", "display_name": "Chat Input"} in err.details["supported"]
    assert "Human Input (HumanInput)" in err.message and "Nothing was imported" in err.message


def test_a_tool_mode_component_signoff_cannot_hand_to_an_agent_is_refused():
    pr = lf_node("Prompt-tt001", "Prompt", {"template": field("template", "x", type="prompt")},
                 tool={"name": "p", "description": "", "tags": ["p"], "status": True})
    ag = agent("Agent-tt002", "http://x/v1")
    with pytest.raises(LangflowUnsupported) as caught:
        from_langflow(lf_flow("t", [pr, ag], [lf_edge(pr, "component_as_tool", ag, "tools")]))
    assert any("cannot be an Agent's tool" in p["message"] for p in caught.value.problems)


def test_a_broken_file_is_a_clear_flow_invalid_never_a_crash():
    for doc in ({"data": {"nodes": "x", "edges": []}}, {"data": {"nodes": [{"data": {"type": 1}}], "edges": [3]}},
                {"data": {"nodes": [], "edges": [{"source": "a"}]}}):
        with pytest.raises(FlowInvalid):
            from_langflow(doc)


# ---- tweaks by node id, with Langflow's field names ------------------------------------------


def test_tweaks_by_node_id_take_langflows_field_names():
    spec = from_langflow(every_component())
    tweaked = apply_tweaks(spec, {"TextInput-aa002": {"input_value": "other words"},
                                  "Agent-aa010": {"model_name": "gpt-4.1", "openai_api_base": "http://127.0.0.1:8/v1"},
                                  "ChatInput-aa001": {"input_value": "hello"}})
    by_id = {n["id"]: n["params"] for n in tweaked["nodes"]}
    assert by_id["TextInput-aa002"]["value"] == "other words" and "input_value" not in by_id["TextInput-aa002"]
    assert by_id["Agent-aa010"]["model"] == "gpt-4.1" and by_id["Agent-aa010"]["base_url"] == "http://127.0.0.1:8/v1"
    assert by_id["ChatInput-aa001"]["input_value"] == "hello"
    parse_and_validate(tweaked)
    # a share holder: TextInput's own tweakable param, by Langflow's name too
    assert untweakable(spec, {"TextInput-aa002": {"input_value": "x"}}) == []
    assert untweakable(spec, {"Agent-aa010": {"model_name": "x"}}) == ["Agent-aa010.model"]


# ---- the new components, in process ---------------------------------------------------------


async def test_combine_text_and_the_router_operators_and_case_messages(runner):
    spec = flow([
        ("a", "TextInput", {"value": "7"}), ("b", "TextInput", {"value": "11"}),
        ("join", "CombineText", {"delimiter": "+"}),
        ("r", "ConditionalRouter", {"operator": "less_than", "match_text": "10", "true_case_message": "small"}),
        ("t", "TextOutput"), ("f", "TextOutput"), ("all", "TextOutput"),
    ], [("a.text", "join.text1"), ("b.text", "join.text2"), ("join.combined_text", "all.input_value"),
        ("a.text", "r.input_text"), ("r.true_result", "t.input_value"), ("r.false_result", "f.input_value")])
    done = await runner.start(spec, run_id="combine", input_value="x")
    assert done.status == "completed", done.error
    assert done.result["outputs"]["all"]["content"] == "7+11"
    assert done.result["outputs"]["t"]["content"] == "small" and "f" not in done.result["outputs"]


@pytest.mark.parametrize("op,match,text,case,expected", [
    ("regex_match", "ab", "xab", True, False), ("regex", "ab", "xab", True, True),
    ("not_equals", "a", "A", False, False), ("greater_than_or_equal", "2", "2.0", True, True),
    ("greater_than", "x", "3", True, False), ("ends_with", "LO", "hello", False, True),
])
def test_router_operator_semantics(op, match, text, case, expected):
    from signoff.engine.components.router import matches

    assert matches(op, text, match, case) is expected


async def test_current_date_in_a_time_zone(runner, clock):
    spec = flow([("d", "CurrentDate", {"timezone": "Asia/Tokyo"}), ("out", "TextOutput")],
                [("d.current_date", "out.input_value")])
    done = await runner.start(spec, run_id="date", input_value="")
    assert done.result["output"]["text"] == "Current date and time in Asia/Tokyo: 2026-01-01 21:00:00 JST"
    with pytest.raises(FlowInvalid):
        parse_and_validate(flow([("d", "CurrentDate", {"timezone": "Mars/Base"})], []))


async def test_language_model_one_completion_with_the_system_message(runner, fake_openai):
    fake_openai.add(say("Arr, hello."))
    spec = from_langflow(basic_prompting(fake_openai.base_url))
    done = await runner.start(spec, run_id="lm", input_value="hi", session_id="s")
    assert done.status == "completed", done.error
    assert done.result["output"]["text"] == "Arr, hello."
    sent = fake_openai.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Answer the user as a pirate would."},
                                {"role": "user", "content": "hi"}]
    assert sent["model"] == "gpt-4o-mini" and sent["temperature"] == 0.1 and sent["seed"] == 1


async def test_an_agent_brings_its_current_date_and_calculator_tools(runner, fake_openai, clock):
    fake_openai.add(call("get_current_date", {"timezone": "UTC"}), call("evaluate_expression", {"expression": "6*7"}),
                    say("done"))
    spec = flow([("ask", "ChatInput"), ("agent", "Agent", {
        "model": "m", "base_url": fake_openai.base_url, "retry_backoff": 0.01, "add_current_date_tool": True,
        "add_calculator_tool": True, "system_prompt": "Today is {current_date}; you are {model_name}."}),
        ("out", "ChatOutput")], [("ask.message", "agent.input_value"), ("agent.response", "out.input_value")])
    done = await runner.start(spec, run_id="builtin", input_value="what day, and 6*7?")
    assert done.status == "completed", done.error
    first = fake_openai.requests[0]
    assert first["messages"][0]["content"] == "Today is 2026-01-01 12:00:00 UTC; you are m."
    assert {t["function"]["name"] for t in first["tools"]} == {"get_current_date", "evaluate_expression"}
    tool_results = [m["content"] for m in fake_openai.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_results == ["Current date and time in UTC: 2026-01-01 12:00:00 UTC", "42"]


@pytest.fixture
def fake_openai(egress):
    from tests.fixtures.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        egress.add(server)
        yield server


def test_url_ollama_older_memory_and_unknown_fields():
    url = lf_node("URLComponent-uu001", "URLComponent", {"urls": ["https://example.com/page"], "format": "HTML",
                                                         "max_depth": 1, "timeout": 10, "use_async": True,
                                                         "brand_new_field": ""})
    lm = lf_node("LanguageModelComponent-uu002", "LanguageModelComponent", {
        "model": field("model", [{"name": "llama3.1", "provider": "Ollama"}], type="model"),
        "ollama_base_url": "http://127.0.0.1:11434", "input_value": "", "system_message": ""})
    hist = lf_node("Memory-uu003", "Memory", {"sender": "User", "n_messages": 3, "template": "{text}"},
                   outputs=[("messages", "Messages", ["Data"])])
    pr, out = prompt("Prompt-uu004", "{page} {history}"), text_output("TextOutput-uu005")
    spec = from_langflow(lf_flow("mix", [url, lm, hist, pr, out], [
        lf_edge(url, "raw_results", pr, "page"), lf_edge(hist, "messages", pr, "history"),
        lf_edge(pr, "prompt", lm, "input_value"), lf_edge(lm, "text_output", out, "input_value")]))
    parse_and_validate(spec)
    by_id = {n["id"]: n for n in spec["nodes"]}
    assert by_id["URLComponent-uu001"] == {"id": "URLComponent-uu001", "type": "HTTPRequest",
                                           "params": {"url": "https://example.com/page", "timeout": 10}}
    assert by_id["LanguageModelComponent-uu002"]["params"] == {"model": "llama3.1",
                                                               "base_url": "http://127.0.0.1:11434/v1"}
    assert by_id["Memory-uu003"]["params"] == {"n_messages": 3, "template": "{text}", "sender_type": "User"}
    assert from_langflow(json.loads(json.dumps(to_langflow(spec)))) == spec
    # a setting signoff does not know, set: refused by name; the URL component's text format too
    url2 = lf_node("URLComponent-uu006", "URLComponent", {"urls": ["https://example.com"], "format": "Text",
                                                          "brand_new_field": "on"})
    with pytest.raises(LangflowUnsupported) as caught:
        from_langflow(lf_flow("x", [url2], []))
    messages = [p["message"] for p in caught.value.problems]
    assert any("brand_new_field" in m and "not one signoff knows" in m for m in messages)
    assert any("(format) = \"Text\"" in m for m in messages)
