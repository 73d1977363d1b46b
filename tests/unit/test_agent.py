"""The Agent through the in-process runner, against a real OpenAI-compatible HTTP server that
replays a script and counts requests, and a real HTTP tool target that counts hits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from signoff.engine.errors import FlowInvalid, InvalidDecision, NotResumable
from tests.fixtures.memory import InMemoryCheckpointStore, InMemoryHistory
from signoff.engine.models import Decision
from signoff.engine.runner import InProcessRunner
from signoff.engine.settings import Settings
from signoff.engine.validate import flow_has_gate, parse_and_validate
from tests.fixtures.fake_openai import call, calls, say

from .conftest import flow

ALL = ["approve", "edit", "reject", "respond"]


def agent_flow(llm, tools: list[tuple[str, str, dict[str, Any]]], **agent_params: Any) -> dict[str, Any]:
    """ask -> agent -> out, with each (id, type, params) wired as a tool."""
    params = {"model": "fake-model", "base_url": llm.base_url, "system_prompt": "You are careful.",
              "retry_backoff": 0.01, **agent_params}
    nodes = [("ask", "ChatInput"), ("agent", "Agent", params), ("out", "ChatOutput")]
    edges = [("ask.message", "agent.input_value"), ("agent.response", "out.input_value")]
    for tid, ttype, tparams in tools:
        nodes.append((tid, ttype, tparams))
        edges.append((f"{tid}.tool", "agent.tools"))
    return flow(nodes, edges)


def refund_tool(target, actions=ALL, name="refund") -> tuple[str, str, dict[str, Any]]:
    return ("pay", "HTTPRequest", {"url": f"{target.url}/refunds", "method": "POST", "tool_name": name,
                                   "tool_description": "Send a refund", "approval_actions": list(actions)})


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_approve_runs_the_tool_once_and_the_model_gets_its_result(runner, fake_openai, tool_target, history):
    fake_openai.add(call("refund", {"body": "5 EUR"}), say("Refund of 5 EUR sent."))
    spec = agent_flow(fake_openai, [refund_tool(tool_target)])
    paused = await runner.start(spec, run_id="ag-approve", input_value="refund 5 EUR please", session_id="s")
    assert paused.status == "paused"
    p = paused.pending
    assert p.kind == "tool_approval"
    assert p.request_id == "agent:ag-approve:1"
    assert p.allowed_decisions == ALL
    assert [o.model_dump() for o in p.options] == [
        {"action_id": "approve", "label": "Approve"}, {"action_id": "edit", "label": "Edit"},
        {"action_id": "reject", "label": "Reject"}, {"action_id": "respond", "label": "Respond"}]
    assert p.tool["name"] == "refund" and p.tool["args"] == {"body": "5 EUR"} and p.tool["vertex_id"] == "pay"
    assert tool_target.hits == [] and fake_openai.count == 1
    first = fake_openai.requests[0]
    assert first["model"] == "fake-model"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "refund 5 EUR please"
    assert first["tools"][0]["function"]["name"] == "refund"
    assert first["tools"][0]["function"]["parameters"]["properties"] == {"body": {"type": "string", "description": "body"}}

    done = await runner.resume("ag-approve", p.request_id, Decision(action_id="approve"))
    assert done.status == "completed", done.error
    assert done.result["output"]["text"] == "Refund of 5 EUR sent."
    assert tool_target.counts == {"/refunds": 1}
    assert tool_target.hits[0]["body"] == "5 EUR"
    assert fake_openai.count == 2  # one call before the pause, one after: nothing re-sent
    second = fake_openai.requests[1]
    assert second["messages"][:2] == first["messages"]  # the conversation continued, not restarted
    assert json.loads(tool_messages(second)[0])["echo"] == "5 EUR"
    card = [m for m in await history.list_messages("s") if m.kind == "card"][0]
    assert card.card["request_id"] == "agent:ag-approve:1" and card.card["submitted_action"] == "approve"


async def test_resume_from_a_json_checkpoint_in_a_fresh_runner_resends_nothing(runner, checkpoints, clock,
                                                                               fake_openai, tool_target):
    fake_openai.add(call("calc", {"expression": "6*7"}), call("refund", {"body": "42"}), say("done"))
    spec = agent_flow(fake_openai, [("calc", "Calculator", {"tool_name": "calc"}), refund_tool(tool_target)])
    paused = await runner.start(spec, run_id="ag-json", input_value="go")
    assert paused.pending.request_id == "agent:ag-json:1"
    assert fake_openai.count == 2  # the ungated calculator ran without a pause, then the refund asked
    record = await checkpoints.load_latest_checkpoint("ag-json")
    text = json.dumps(record.data)
    conversation = record.data["component_state"]["agent"]["messages"]
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "tool", "assistant"]
    assert conversation[3]["content"] == "42"

    fresh_store = InMemoryCheckpointStore()
    await fresh_store.save_checkpoint("ag-json", json.loads(text))
    fresh = InProcessRunner(fresh_store, InMemoryHistory(), clock=clock, settings=runner.settings)
    done = await fresh.resume("ag-json", "agent:ag-json:1", Decision(action_id="approve"))
    assert done.status == "completed", done.error
    assert fake_openai.count == 3
    assert [m["role"] for m in fake_openai.requests[2]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool"]
    assert tool_target.counts == {"/refunds": 1}
    assert done.state.build_counts["agent"] == 2
    assert [e["outcome"] for e in done.state.component_state["agent"]["log"]] == ["ran", "approved"]


async def test_reject_gives_the_model_the_message_and_never_runs_the_tool(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "500 EUR"}), say("I could not send the refund."))
    paused = await runner.start(agent_flow(fake_openai, [refund_tool(tool_target)]), run_id="ag-rej", input_value="x")
    done = await runner.resume("ag-rej", paused.pending.request_id,
                               Decision(action_id="reject", values={"message": "Too much; ask a manager."}))
    assert done.status == "completed"
    assert tool_target.hits == []
    assert tool_messages(fake_openai.requests[1]) == ["Too much; ask a manager."]
    assert done.result["output"]["text"] == "I could not send the refund."


async def test_reject_without_a_message_says_it_was_rejected(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "1"}), say("ok"))
    paused = await runner.start(agent_flow(fake_openai, [refund_tool(tool_target)]), run_id="ag-rej2", input_value="x")
    await runner.resume("ag-rej2", paused.pending.request_id, Decision(action_id="reject"))
    assert tool_target.hits == []
    assert "rejected" in tool_messages(fake_openai.requests[1])[0]


async def test_edit_runs_the_tool_with_the_edited_arguments(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "500 EUR"}), say("Sent 50 EUR."))
    paused = await runner.start(agent_flow(fake_openai, [refund_tool(tool_target)]), run_id="ag-edit", input_value="x")
    done = await runner.resume("ag-edit", paused.pending.request_id,
                               Decision(action_id="edit", values={"args": {"body": "50 EUR"}}))
    assert done.status == "completed"
    assert [h["body"] for h in tool_target.hits] == ["50 EUR"]
    assert json.loads(tool_messages(fake_openai.requests[1])[0])["echo"] == "50 EUR"
    assert done.state.component_state["agent"]["log"][0]["args"] == {"body": "50 EUR"}


async def test_respond_gives_the_model_the_message_as_the_answer(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "5"}), say("The refund is already done, says the team."))
    paused = await runner.start(agent_flow(fake_openai, [refund_tool(tool_target)]), run_id="ag-resp", input_value="x")
    done = await runner.resume("ag-resp", paused.pending.request_id,
                               Decision(action_id="respond", values={"message": "Already refunded yesterday."}))
    assert done.status == "completed"
    assert tool_target.hits == []
    assert tool_messages(fake_openai.requests[1]) == ["Already refunded yesterday."]
    assert done.state.component_state["agent"]["log"][0]["outcome"] == "responded"


async def test_a_decision_the_agent_cannot_apply_is_refused_and_the_approval_stays(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "5"}), say("ok"))
    paused = await runner.start(agent_flow(fake_openai, [refund_tool(tool_target)]), run_id="ag-bad", input_value="x")
    rid = paused.pending.request_id
    with pytest.raises(InvalidDecision, match="values.args"):
        await runner.resume("ag-bad", rid, Decision(action_id="edit", values={"body": "x"}))
    with pytest.raises(InvalidDecision, match="values.message"):
        await runner.resume("ag-bad", rid, Decision(action_id="respond"))
    with pytest.raises(InvalidDecision):
        await runner.resume("ag-bad", rid, Decision(action_id="maybe"))
    done = await runner.resume("ag-bad", rid, Decision(action_id="approve"))
    assert done.status == "completed" and tool_target.counts == {"/refunds": 1}


async def test_only_the_listed_actions_are_offered(runner, fake_openai, tool_target):
    fake_openai.add(call("refund", {"body": "5"}), say("ok"))
    spec = agent_flow(fake_openai, [refund_tool(tool_target, actions=["approve", "reject"])])
    paused = await runner.start(spec, run_id="ag-two", input_value="x")
    assert paused.pending.allowed_decisions == ["approve", "reject"]
    with pytest.raises(InvalidDecision):
        await runner.resume("ag-two", paused.pending.request_id, Decision(action_id="edit", values={"args": {}}))


async def test_two_gated_calls_two_pauses_two_ids_the_stale_one_refused(runner, fake_openai, tool_target, checkpoints):
    fake_openai.add(call("refund", {"body": "A"}), call("refund", {"body": "B"}), say("both sent"))
    spec = agent_flow(fake_openai, [refund_tool(tool_target)])
    first = await runner.start(spec, run_id="ag-2x", input_value="x")
    assert first.pending.request_id == "agent:ag-2x:1"
    second = await runner.resume("ag-2x", "agent:ag-2x:1", Decision(action_id="approve"))
    assert second.status == "paused"
    assert second.pending.request_id == "agent:ag-2x:2"
    assert second.pending.tool["args"] == {"body": "B"}
    assert [h["body"] for h in tool_target.hits] == ["A"]
    with pytest.raises(NotResumable):
        await runner.resume("ag-2x", "agent:ag-2x:1", Decision(action_id="approve"))
    assert fake_openai.count == 2
    done = await runner.resume("ag-2x", "agent:ag-2x:2", Decision(action_id="approve"))
    assert done.status == "completed" and done.result["output"]["text"] == "both sent"
    assert [h["body"] for h in tool_target.hits] == ["A", "B"]
    keys = [h["idempotency_key"] for h in tool_target.hits]
    assert len(set(keys)) == 2  # one key per call
    assert fake_openai.count == 3
    assert [d.request_id for d in done.state.decisions] == ["agent:ag-2x:1", "agent:ag-2x:2"]
    with pytest.raises(NotResumable):
        await runner.resume("ag-2x", "agent:ag-2x:2", Decision(action_id="approve"))
    assert checkpoints.count("ag-2x") == 0


async def test_two_calls_in_one_model_message_pause_twice_without_asking_the_model_again(runner, fake_openai, tool_target):
    fake_openai.add(calls([("refund", {"body": "A"}), ("refund", {"body": "B"})]), say("done"))
    spec = agent_flow(fake_openai, [refund_tool(tool_target)])
    first = await runner.start(spec, run_id="ag-par", input_value="x")
    second = await runner.resume("ag-par", first.pending.request_id, Decision(action_id="reject", values={"message": "no A"}))
    assert second.pending.request_id == "agent:ag-par:2"
    assert fake_openai.count == 1
    done = await runner.resume("ag-par", "agent:ag-par:2", Decision(action_id="approve"))
    assert done.status == "completed"
    assert [h["body"] for h in tool_target.hits] == ["B"]
    assert fake_openai.count == 2
    tool_msgs = [m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "no A" and json.loads(tool_msgs[1]["content"])["echo"] == "B"


async def test_ungated_tools_run_without_a_pause(runner, fake_openai, checkpoints):
    fake_openai.add(call("calc", {"expression": "2 * (3 + 18)"}), say("It is 42."))
    spec = agent_flow(fake_openai, [("calc", "Calculator", {"tool_name": "calc"})])
    done = await runner.start(spec, run_id="ag-free", input_value="what is 2*(3+18)?")
    assert done.status == "completed"
    assert done.result["output"]["text"] == "It is 42."
    assert tool_messages(fake_openai.requests[1]) == ["42"]
    assert checkpoints.count("ag-free") == 0  # never paused: no checkpoint (default-off)
    assert flow_has_gate(parse_and_validate(spec)) is False


async def test_malformed_tool_calls_go_back_to_the_model_as_errors(runner, fake_openai):
    fake_openai.add(
        calls([("calc", "{not json"), ("nope", {}), ("calc", {})]),
        call("calc", {"expression": "1/0"}),
        call("calc", {"expression": "1+1"}),
        say("2"),
    )
    spec = agent_flow(fake_openai, [("calc", "Calculator", {"tool_name": "calc", "approval_actions": ["approve"]})])
    paused = await runner.start(spec, run_id="ag-junk", input_value="x")
    # the three malformed calls went back to the model at once, without asking a person
    assert paused.status == "paused" and fake_openai.count == 2
    errors = tool_messages(fake_openai.requests[1])
    assert "not valid JSON" in errors[0]
    assert "no tool 'nope'" in errors[1] and "calc" in errors[1]
    assert "missing required argument(s): expression" in errors[2]
    assert paused.pending.request_id == "agent:ag-junk:1"  # the first valid call is the first approval
    assert paused.pending.tool["args"] == {"expression": "1/0"}
    second = await runner.resume("ag-junk", paused.pending.request_id, Decision(action_id="approve"))
    assert second.pending.request_id == "agent:ag-junk:2"
    assert "division by zero" in tool_messages(fake_openai.requests[2])[3]  # a failing tool: the model sees why
    done = await runner.resume("ag-junk", second.pending.request_id, Decision(action_id="approve"))
    assert done.status == "completed", done.error
    assert tool_messages(fake_openai.requests[3])[4] == "2"
    assert fake_openai.count == 4


async def test_a_model_answer_with_too_many_tool_calls_runs_only_the_first_ones(runner, fake_openai):
    from signoff.engine.components.agent import MAX_TOOL_CALLS

    fake_openai.add(calls([("calc", {"expression": f"{i}+1"}) for i in range(MAX_TOOL_CALLS + 4)]), say("done"))
    spec = agent_flow(fake_openai, [("calc", "Calculator", {"tool_name": "calc"})])
    done = await runner.start(spec, run_id="ag-many", input_value="x")
    assert done.status == "completed", done.error
    answers = tool_messages(fake_openai.requests[1])
    assert answers[:MAX_TOOL_CALLS] == [str(i + 1) for i in range(MAX_TOOL_CALLS)]
    assert len(answers) == MAX_TOOL_CALLS + 4 and all("not run: at most" in a for a in answers[MAX_TOOL_CALLS:])


@pytest.mark.parametrize("params, problem", [
    ({"max_iterations": 101}, "'max_iterations' must be between 1 and 100"),
    ({"max_iterations": 0}, "'max_iterations' must be between 1 and 100"),
    ({"max_retries": 11}, "'max_retries' must be between 0 and 10"),
    ({"retry_backoff": 3600}, "'retry_backoff' must be at most 30 seconds"),
])
def test_an_agents_loop_is_bounded_when_the_flow_is_saved(fake_openai, params, problem):
    with pytest.raises(FlowInvalid) as e:
        parse_and_validate(agent_flow(fake_openai, [], **params))
    assert problem in json.dumps(e.value.details)


async def test_model_errors_are_retried_with_backoff(runner, fake_openai):
    from tests.fixtures.fake_openai import fail, garbage, hang, no_choices

    fake_openai.add(fail(429, "slow down", retry_after=0), fail(503), garbage(), no_choices(), say("fine"))
    spec = agent_flow(fake_openai, [], max_retries=4)
    done = await runner.start(spec, run_id="ag-retry", input_value="x")
    assert done.status == "completed", done.error
    assert done.result["output"]["text"] == "fine"
    assert fake_openai.count == 5
    assert all(r == fake_openai.requests[0] for r in fake_openai.requests)  # the same request each time

    fake_openai.add(hang(), say("after a timeout"))
    spec = agent_flow(fake_openai, [], timeout=0.3, max_retries=1)
    done = await runner.start(spec, run_id="ag-timeout", input_value="x")
    assert done.status == "completed", done.error
    assert done.result["output"]["text"] == "after a timeout"


async def test_model_errors_beyond_the_retries_fail_the_run_clearly(runner, fake_openai):
    from tests.fixtures.fake_openai import fail

    fake_openai.add(*[fail(500, "upstream exploded")] * 3)
    done = await runner.start(agent_flow(fake_openai, [], max_retries=2), run_id="ag-dead", input_value="x")
    assert done.status == "failed"
    assert done.error["vertex_id"] == "agent"
    assert done.error["type"] == "ModelError"
    assert "answered 500: upstream exploded; gave up after 3 attempts" in done.error["error"]
    assert fake_openai.base_url in done.error["error"]
    assert fake_openai.count == 3


async def test_a_bad_api_key_fails_at_once_without_leaking_the_key(runner, egress):
    from tests.fixtures.fake_openai import FakeOpenAI

    with FakeOpenAI([say("never")], api_key="sk-right") as llm:
        egress.add(llm)
        spec = agent_flow(llm, [], api_key="sk-wrong-secret")
        done = await runner.start(spec, run_id="ag-401", input_value="x")
        assert done.status == "failed"
        assert "answered 401: Incorrect API key provided (check the API key)" in done.error["error"]
        assert "sk-wrong-secret" not in done.error["error"]
        assert llm.count == 1  # a 4xx other than 408/409/429 is not retried


async def test_max_iterations_bounds_the_loop(runner, fake_openai):
    fake_openai.add(*[call("calc", {"expression": "1+1"})] * 3)
    spec = agent_flow(fake_openai, [("calc", "Calculator", {"tool_name": "calc"})], max_iterations=3)
    done = await runner.start(spec, run_id="ag-loop", input_value="x")
    assert done.status == "failed"
    assert "no final answer after max_iterations=3 model calls" in done.error["error"]
    assert fake_openai.count == 3


async def test_model_key_and_url_default_to_the_settings_passed_in(checkpoints, clock, fake_openai, tmp_path):
    fake_openai.add(say("from settings"))
    settings = Settings(home=tmp_path, openai_base_url=fake_openai.base_url, openai_api_key="sk-settings",
                        openai_model="settings-model")
    runner = InProcessRunner(checkpoints, InMemoryHistory(), clock=clock, settings=settings)
    spec = flow([("agent", "Agent"), ("out", "TextOutput")], [("agent.response", "out.input_value")])
    done = await runner.start(spec, run_id="ag-settings", input_value="the run's input")
    assert done.result["output"]["text"] == "from settings"
    assert fake_openai.requests[0]["model"] == "settings-model"
    assert fake_openai.requests[0]["messages"] == [{"role": "user", "content": "the run's input"}]
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-settings"


async def test_a_flow_with_an_approval_gated_tool_cannot_run_nested(runner, flows, fake_openai, tool_target):
    child = agent_flow(fake_openai, [refund_tool(tool_target)])
    assert flow_has_gate(parse_and_validate(child)) is True
    flows["child"] = child
    parent = flow([("ask", "ChatInput"), ("sub", "RunFlow", {"flow_id": "child"}), ("out", "ChatOutput")],
                  [("ask.message", "sub.input_value"), ("sub.output", "out.input_value")])
    done = await runner.start(parent, run_id="ag-nested", input_value="x")
    assert done.status == "failed"
    assert done.error["type"] == "NestedGateError" and done.error["vertex_id"] == "sub"
    assert "move the approval to the parent flow" in done.error["error"]
    assert fake_openai.count == 0 and tool_target.hits == []


async def test_a_gated_flow_as_an_agent_tool_fails_the_run(runner, flows, fake_openai):
    flows["gated"] = flow([("ask", "ChatInput"), ("g", "HumanInput"), ("o", "ChatOutput")],
                          [("ask.message", "g.prompt"), ("g.branch_approve", "o.input_value")])
    fake_openai.add(call("sub", {"input_value": "hi"}))
    spec = agent_flow(fake_openai, [("subflow", "RunFlow", {"flow_id": "gated", "tool_name": "sub"})])
    done = await runner.start(spec, run_id="ag-flowtool", input_value="x")
    assert done.status == "failed" and done.error["type"] == "NestedGateError"


async def test_a_flow_as_a_tool_runs_in_process(runner, flows, fake_openai):
    flows["shout"] = flow([("ask", "ChatInput"), ("o", "ChatOutput")], [("ask.message", "o.input_value")])
    fake_openai.add(call("echo", {"input_value": "hello"}), say("echoed"))
    spec = agent_flow(fake_openai, [("subflow", "RunFlow", {"flow_id": "shout", "tool_name": "echo"})])
    done = await runner.start(spec, run_id="ag-flow", input_value="x")
    assert done.status == "completed", done.error
    assert tool_messages(fake_openai.requests[1]) == ["hello"]


def test_agent_params_are_validated():
    spec = flow([("agent", "Agent", {"base_url": "ftp://x", "max_iterations": 0, "timeout": 0}), ("o", "TextOutput")],
                [("agent.response", "o.input_value")])
    with pytest.raises(FlowInvalid) as e:
        parse_and_validate(spec)
    messages = " | ".join(p["message"] for p in e.value.problems)
    assert "base_url" in messages and "max_iterations" in messages and "timeout" in messages
