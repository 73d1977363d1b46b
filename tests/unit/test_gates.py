"""Pause, checkpoint and resume, proven by counting real builds."""

from __future__ import annotations

import json

import pytest

from signoff.engine.errors import CheckpointError, InvalidDecision, NotResumable
from signoff.engine.graph import Graph
from tests.fixtures.memory import InMemoryCheckpointStore, InMemoryHistory
from signoff.engine.models import Decision
from signoff.engine.run import RunState
from signoff.engine.runner import InProcessRunner

from .conftest import flow


def gate_flow(decisions=("Approve", "Reject"), **gate_params):
    nodes = [
        ("ask", "ChatInput"),
        ("pre", "TestCounter"),
        ("gate", "HumanInput", {"decisions": list(decisions), **gate_params}),
    ]
    edges = [("ask.message", "pre.input_value"), ("pre.out", "gate.prompt")]
    branches = [d.strip().lower().replace(" ", "_") for d in decisions]
    if gate_params.get("enable_fallback"):
        branches.append("fallback")
    for b in branches:
        nodes.append((f"on_{b}", "TestCounter"))
        nodes.append((f"out_{b}", "ChatOutput"))
        edges.append((f"gate.branch_{b}", f"on_{b}.input_value"))
        edges.append((f"on_{b}.out", f"out_{b}.input_value"))
    return flow(nodes, edges)


async def test_approve_runs_only_the_approve_branch(runner, builds):
    out = await runner.start(gate_flow(), run_id="r-approve", input_value="refund 5 EUR")
    assert out.status == "paused"
    assert out.pending.request_id == "gate:r-approve"
    assert out.pending.allowed_decisions == ["approve", "reject"]
    assert builds == {"pre": 1}
    done = await runner.resume("r-approve", "gate:r-approve", Decision(action_id="approve"))
    assert done.status == "completed"
    assert builds == {"pre": 1, "on_approve": 1}
    assert done.result["output"]["text"] == "on_approve(pre(refund 5 EUR))"
    assert list(done.result["outputs"]) == ["out_approve"]
    assert set(done.state.dead) == {"on_reject", "out_reject"}


async def test_reject_runs_only_the_reject_branch(runner, builds):
    out = await runner.start(gate_flow(), run_id="r-reject", input_value="x")
    done = await runner.resume("r-reject", out.pending.request_id, Decision(action_id="reject"))
    assert done.status == "completed"
    assert builds == {"pre": 1, "on_reject": 1}
    assert done.result["output"]["source"] == "out_reject"


async def test_custom_label_routes_to_its_branch(runner, builds):
    spec = gate_flow(decisions=("Approve", "Request Changes", "Reject"))
    out = await runner.start(spec, run_id="r-custom", input_value="x")
    assert [o.model_dump() for o in out.pending.options][1] == {"action_id": "request_changes", "label": "Request Changes"}
    done = await runner.resume("r-custom", out.pending.request_id, Decision(action_id="request_changes"))
    assert builds == {"pre": 1, "on_request_changes": 1}
    assert done.result["output"]["source"] == "out_request_changes"


async def test_resume_rebuilds_nothing_built_before_the_pause(runner, builds, history):
    out = await runner.start(gate_flow(), run_id="r-once", input_value="hello", session_id="s1")
    await runner.resume("r-once", out.pending.request_id, Decision(action_id="approve"))
    assert builds["pre"] == 1
    msgs = await history.list_messages("s1")
    assert [(m.sender, m.kind) for m in msgs] == [("User", "message"), ("Machine", "card"), ("Machine", "message")]
    assert msgs[0].text == "hello"
    assert msgs[1].card["request_id"] == "gate:r-once"
    assert msgs[1].card["submitted_action"] == "approve"
    assert msgs[1].card["options"] == [
        {"action_id": "approve", "label": "Approve"},
        {"action_id": "reject", "label": "Reject"},
    ]


def two_gates():
    return flow(
        [
            ("ask", "ChatInput"),
            ("g1", "HumanInput", {"prompt": "first?"}),
            ("mid", "TestCounter"),
            ("r1", "TestCounter"),
            ("g2", "HumanInput", {"prompt": "second?"}),
            ("done", "TestCounter"),
            ("r2", "TestCounter"),
            ("out", "ChatOutput"),
        ],
        [
            ("ask.message", "g1.prompt"),
            ("g1.branch_approve", "mid.input_value"),
            ("g1.branch_reject", "r1.input_value"),
            ("mid.out", "g2.prompt"),
            ("g2.branch_approve", "done.input_value"),
            ("g2.branch_reject", "r2.input_value"),
            ("done.out", "out.input_value"),
        ],
    )


async def test_two_gates_in_sequence(runner, builds, checkpoints):
    first = await runner.start(two_gates(), run_id="r-two", input_value="go")
    assert first.pending.request_id == "g1:r-two"
    second = await runner.resume("r-two", "g1:r-two", Decision(action_id="approve"))
    assert second.status == "paused"
    assert second.pending.request_id == "g2:r-two"
    assert second.pending.prompt == "second?"
    assert "r1" in second.state.dead
    # the first request is spent
    with pytest.raises(NotResumable):
        await runner.resume("r-two", "g1:r-two", Decision(action_id="approve"))
    end = await runner.resume("r-two", "g2:r-two", Decision(action_id="approve"))
    assert end.status == "completed"
    assert end.result["output"]["text"] == "done(mid(go))"
    assert builds == {"mid": 1, "done": 1}  # r1 and r2 never built
    assert end.state.build_counts["g1"] == 2  # paused once, decided once: never looped back
    assert end.state.build_counts["g2"] == 2
    assert {"r1", "r2"} <= set(end.state.dead)
    assert [d.request_id for d in end.state.decisions] == ["g1:r-two", "g2:r-two"]
    # finished once: nothing left to resume, checkpoints removed
    assert checkpoints.count("r-two") == 0
    with pytest.raises(NotResumable):
        await runner.resume("r-two", "g2:r-two", Decision(action_id="approve"))


async def test_resume_after_restart_from_json_checkpoint(runner, builds, checkpoints, clock, history):
    paused = await runner.start(two_gates(), run_id="r-restart", input_value="go")
    paused = await runner.resume("r-restart", "g1:r-restart", Decision(action_id="approve"))
    record = await checkpoints.load_latest_checkpoint("r-restart")
    text = json.dumps(record.data)
    # the state round-trips losslessly
    assert RunState.model_validate_json(text) == paused.state
    assert RunState.model_validate_json(text).model_dump(mode="json") == record.data

    # a "new process": fresh stores holding only the JSON text, a fresh runner and graph
    fresh_store = InMemoryCheckpointStore()
    await fresh_store.save_checkpoint("r-restart", json.loads(text))
    fresh = InProcessRunner(fresh_store, InMemoryHistory(), clock=clock, settings=runner.settings)
    builds.clear()
    end = await fresh.resume("r-restart", "g2:r-restart", Decision(action_id="reject"))
    assert end.status == "completed"
    assert builds == {"r2": 1}  # nothing before the pause ran again
    assert "r1" in end.state.dead and "done" in end.state.dead and "out" in end.state.dead
    assert end.result["output"]["reason"] == "no_output"
    # the graph was rebuilt from the snapshot
    assert Graph.from_spec(end.state.flow).hash == end.state.flow_hash


async def test_late_decision_goes_to_fallback_when_enabled(runner, builds, clock):
    spec = gate_flow(timeout={"value": 3, "unit": "Days"}, enable_fallback=True)
    out = await runner.start(spec, run_id="r-fb", input_value="x")
    assert out.pending.timeout_seconds == 3 * 86400
    assert out.pending.fallback_action == "fallback"
    clock.advance(days=3, seconds=1)
    done = await runner.resume("r-fb", out.pending.request_id, Decision(action_id="approve"), decided_by="u1")
    assert done.applied.rerouted is True
    assert done.applied.requested_action == "approve"
    assert done.applied.action_id == "fallback"
    assert done.applied.decided_by == "u1"
    assert builds == {"pre": 1, "on_fallback": 1}
    assert done.result["output"]["source"] == "out_fallback"


async def test_an_explicit_fallback_before_the_deadline_is_a_decision_like_any(runner, builds, clock):
    """Langflow's Human Input: with enable_fallback, "fallback" is one of the allowed decisions
    (a person may take it on time); the buttons stay the labels."""
    spec = gate_flow(timeout={"value": 3, "unit": "Days"}, enable_fallback=True)
    out = await runner.start(spec, run_id="r-fb-now", input_value="x")
    assert out.pending.allowed_decisions == ["approve", "reject", "fallback"]
    assert [o.label for o in out.pending.options] == ["Approve", "Reject"]
    clock.advance(hours=1)
    done = await runner.resume("r-fb-now", out.pending.request_id, Decision(action_id="fallback"), decided_by="u1")
    assert done.status == "completed" and done.applied.rerouted is False and done.applied.action_id == "fallback"
    assert builds == {"pre": 1, "on_fallback": 1}
    without = await runner.start(gate_flow(), run_id="r-no-fb", input_value="x")
    with pytest.raises(InvalidDecision):
        await runner.resume("r-no-fb", without.pending.request_id, Decision(action_id="fallback"))


async def test_late_decision_without_fallback_expires(runner, builds, clock, history):
    spec = gate_flow(timeout={"value": 10, "unit": "Minutes"})
    out = await runner.start(spec, run_id="r-exp", input_value="x")
    clock.advance(minutes=11)
    done = await runner.resume("r-exp", out.pending.request_id, Decision(action_id="approve"))
    assert done.status == "completed"
    assert done.applied.action_id == "__expired__"
    assert done.applied.rerouted is True
    assert builds == {"pre": 1}  # no branch runs
    assert done.result["output"]["reason"] == "expired"
    assert done.result["outputs"] == {}
    card = [m for m in await history.list_messages("r-exp") if m.kind == "card"][0]
    assert card.card["submitted_action"] == "__expired__"


async def test_on_time_decision_keeps_its_action(runner, builds, clock):
    spec = gate_flow(timeout={"value": 10, "unit": "Minutes"}, enable_fallback=True)
    out = await runner.start(spec, run_id="r-ontime", input_value="x")
    clock.advance(minutes=9)
    done = await runner.resume("r-ontime", out.pending.request_id, Decision(action_id="reject"))
    assert done.applied.rerouted is False
    assert done.applied.action_id == "reject"
    assert builds == {"pre": 1, "on_reject": 1}


async def test_timeout_zero_waits_forever(runner, builds, clock):
    out = await runner.start(gate_flow(timeout=0), run_id="r-forever", input_value="x")
    assert out.pending.timeout_seconds == 0
    clock.advance(days=3650)
    done = await runner.resume("r-forever", out.pending.request_id, Decision(action_id="approve"))
    assert done.applied.rerouted is False
    assert builds == {"pre": 1, "on_approve": 1}


async def test_stale_and_invalid_decisions_leave_the_run_resumable(runner, builds):
    out = await runner.start(gate_flow(), run_id="r-bad", input_value="x")
    with pytest.raises(NotResumable):
        await runner.resume("r-bad", "gate:other-run", Decision(action_id="approve"))
    with pytest.raises(InvalidDecision) as info:
        await runner.resume("r-bad", out.pending.request_id, Decision(action_id="maybe"))
    assert "approve" in info.value.message
    with pytest.raises(NotResumable):
        await runner.resume("no-such-run", "gate:no-such-run", Decision(action_id="approve"))
    done = await runner.resume("r-bad", out.pending.request_id, Decision(action_id="approve"))
    assert done.status == "completed"
    assert builds == {"pre": 1, "on_approve": 1}


async def test_flow_without_gate_writes_no_checkpoint(runner, builds, checkpoints):
    spec = flow([("ask", "ChatInput"), ("c", "TestCounter"), ("out", "ChatOutput")],
                [("ask.message", "c.input_value"), ("c.out", "out.input_value")])
    done = await runner.start(spec, run_id="r-nogate", input_value="hi")
    assert done.status == "completed"
    assert done.result["output"] == {"reason": "completed", "text": "c(hi)", "source": "out"}
    assert checkpoints.saves == 0


async def test_unwired_human_input_is_skipped(runner, builds, checkpoints):
    spec = flow(
        [("ask", "ChatInput"), ("gate", "HumanInput"), ("c", "TestCounter"), ("out", "TextOutput")],
        [("ask.message", "gate.prompt"), ("ask.message", "c.input_value"), ("c.out", "out.input_value")],
    )
    done = await runner.start(spec, run_id="r-skip", input_value="hi")
    assert done.status == "completed"
    assert "gate" in done.state.skipped
    assert checkpoints.saves == 0
    assert done.result["outputs"]["out"]["content"] == "c(hi)"


async def test_checkpoint_error_names_the_vertex(runner):
    spec = flow(
        [("t", "TestTuple"), ("gate", "HumanInput"), ("ok", "TextOutput")],
        [("t.out", "gate.prompt"), ("gate.branch_approve", "ok.input_value")],
    )
    with pytest.raises(CheckpointError) as info:
        await runner.start(spec, run_id="r-tuple")
    assert info.value.details["vertex_id"] == "t"
    assert "'t'" in info.value.message


async def test_component_failure_fails_the_run_naming_the_vertex(runner, builds):
    spec = flow([("ok", "TestCounter"), ("bad", "TestCounter", {"fail": True})], [])
    out = await runner.start(spec, run_id="r-fail")
    assert out.status == "failed"
    assert out.error["vertex_id"] == "bad"
    assert out.error["code"] == "COMPONENT_ERROR"
    assert "boom" in out.error["error"]
    assert builds == {"ok": 1, "bad": 1}  # the layer ran concurrently to the end


async def test_a_component_can_pause_several_times_with_its_own_request_ids(runner, builds, history, checkpoints):
    spec = flow(
        [("ask", "ChatInput"), ("agent", "TestMultiPause"), ("out", "ChatOutput")],
        [("ask.message", "agent.input_value"), ("agent.out", "out.input_value")],
    )
    first = await runner.start(spec, run_id="r-multi", input_value="q")
    assert first.pending.request_id == "agent:r-multi:1"
    assert first.pending.kind == "tool_approval" and first.pending.tool == {"name": "calc", "args": {"n": 1}}
    second = await runner.resume("r-multi", "agent:r-multi:1", Decision(action_id="approve"))
    assert second.pending.request_id == "agent:r-multi:2"
    assert second.state.component_state["agent"] == {"done": ["1=approve"]}
    with pytest.raises(NotResumable):
        await runner.resume("r-multi", "agent:r-multi:1", Decision(action_id="approve"))
    end = await runner.resume("r-multi", "agent:r-multi:2", Decision(action_id="reject"))
    assert end.status == "completed"
    assert end.result["output"]["text"] == "q:1=approve,2=reject"
    assert builds == {"agent": 3, "agent:expensive": 2}
    cards = [m.card for m in await history.list_messages("r-multi") if m.kind == "card"]
    assert [(c["request_id"], c["submitted_action"]) for c in cards] == [
        ("agent:r-multi:1", "approve"),
        ("agent:r-multi:2", "reject"),
    ]
    assert checkpoints.saves == 2


async def test_outputs_built_in_the_pausing_layer_are_kept(runner, builds):
    spec = flow(
        [("ask", "ChatInput"), ("gate", "HumanInput"), ("side", "TestCounter"), ("ok", "TestCounter"),
         ("join", "TestJoin"), ("out", "TextOutput")],
        [("ask.message", "gate.prompt"), ("ask.message", "side.input_value"),
         ("gate.branch_approve", "ok.input_value"), ("ok.out", "join.a"), ("side.out", "join.b"),
         ("join.out", "out.input_value")],
    )
    paused = await runner.start(spec, run_id="r-layer", input_value="x")
    assert "side" in paused.state.built and builds == {"side": 1}
    done = await runner.resume("r-layer", paused.pending.request_id, Decision(action_id="approve"))
    assert builds == {"side": 1, "ok": 1, "join": 1}
    assert done.result["output"]["text"] == "join[a=ok(x) b=side(x)]"


async def test_two_gates_in_one_layer_ask_one_after_the_other(runner, builds, history):
    spec = flow(
        [("ask", "ChatInput"), ("g1", "HumanInput"), ("g2", "HumanInput"), ("a", "TestCounter"), ("b", "TestCounter")],
        [("ask.message", "g1.prompt"), ("ask.message", "g2.prompt"),
         ("g1.branch_approve", "a.input_value"), ("g2.branch_approve", "b.input_value")],
    )
    first = await runner.start(spec, run_id="r-par", input_value="x")
    assert first.pending.request_id == "g1:r-par"
    second = await runner.resume("r-par", "g1:r-par", Decision(action_id="approve"))
    assert second.pending.request_id == "g2:r-par"
    end = await runner.resume("r-par", "g2:r-par", Decision(action_id="reject"))
    assert end.status == "completed"
    assert builds == {"a": 1}
    cards = [m.card["request_id"] for m in await history.list_messages("r-par") if m.kind == "card"]
    assert cards == ["g1:r-par", "g2:r-par"]  # one card per request, never duplicated


async def test_a_built_vertex_is_never_handed_back_to_the_build_loop(runner):
    from signoff.engine.run import build_vertices, context_for

    paused = await runner.start(gate_flow(), run_id="r-guard", input_value="x")
    graph = Graph.from_spec(paused.state.flow)
    with pytest.raises(ValueError, match="pre"):
        await build_vertices(graph, paused.state, ["pre"], context_for(paused.state))
    with pytest.raises(InvalidDecision):
        await runner.resume("r-guard", paused.pending.request_id, {"action_id": ""})


@pytest.mark.parametrize("param, value", [
    ("timeout", 1e300), ("timeout", {"value": 10_000, "unit": "Days"}), ("remind_every", 4e8),
    ("escalate_after", {"value": 1e12, "unit": "Hours"}),
])
def test_a_duration_past_ten_years_is_refused_when_the_flow_is_saved(param, value):
    """A date that far out overflows; the author hears it at save, not the decider at resume."""
    from signoff.engine.errors import FlowInvalid
    from signoff.engine.validate import parse_and_validate

    params = {param: value, **({"escalate_to": ["bob"]} if param == "escalate_after" else {})}
    spec = flow([("ask", "ChatInput"), ("gate", "HumanInput", params), ("out", "ChatOutput")],
                [("ask.message", "gate.prompt"), ("gate.branch_approve", "out.input_value")])
    with pytest.raises(FlowInvalid) as e:
        parse_and_validate(spec)
    assert f"{param} must be at most 3660 days" in json.dumps(e.value.details)


@pytest.mark.parametrize("every, floor, refused", [
    (0.05, 60, True), (59.9, 60, True), ({"value": 59, "unit": "Seconds"}, 60, True), (60, 60, False),
    ({"value": 1, "unit": "Minutes"}, 60, False), (0, 60, False), (None, 60, False), (3, 1, False), (3, 5, True),
])
def test_remind_every_has_a_floor(every, floor, refused):
    """A gate may not remind more often than SIGNOFF_MIN_REMIND_EVERY_SECONDS (0: no reminders);
    the problem names the node and the floor (docs/security.md, "Fan-out and approvers")."""
    from signoff.engine.errors import FlowInvalid
    from signoff.engine.validate import parse_and_validate

    params = {"remind_every": every} if every is not None else {}
    spec = flow([("ask", "ChatInput"), ("gate", "HumanInput", params), ("out", "ChatOutput")],
                [("ask.message", "gate.prompt"), ("gate.branch_approve", "out.input_value")])
    if not refused:
        parse_and_validate(spec, min_remind_every=floor)
        return
    with pytest.raises(FlowInvalid) as e:
        parse_and_validate(spec, min_remind_every=floor)
    (problem,) = e.value.problems
    assert problem["node"] == "gate" and f"the floor of {floor:g} seconds" in problem["message"]
    assert "SIGNOFF_MIN_REMIND_EVERY_SECONDS" in problem["message"]
