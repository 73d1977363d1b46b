"""The one decision check (engine/decisions.py): every surface (the service, the workflow's Update
validator and Signal, the in-process runner) refuses a decision with the same code and message."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from signoff.engine.decisions import (
    apply_decision,
    check_decision,
    deadline_decision,
    decision_event,
    expired_event,
    quick_to_check,
    recorded_decision,
    with_decision,
)
from signoff.engine.errors import InvalidDecision, NotResumable
from signoff.engine.models import Decision, Option, PendingRequest, Vote, utcnow
from signoff.engine.state import RunState


def gate(request_id: str = "gate:run") -> PendingRequest:
    return PendingRequest(request_id=request_id, options=[Option(action_id="approve", label="Approve"),
                                                          Option(action_id="reject", label="Reject")],
                          allowed_decisions=["approve", "reject"], paused_at=utcnow())


def tool(request_id: str = "agent:run:1") -> PendingRequest:
    return PendingRequest(request_id=request_id, kind="tool_approval", allowed_decisions=["approve", "edit", "respond",
                                                                                          "reject"],
                          paused_at=utcnow(), tool={"name": "refund", "args": {"amount": "5"}})


def test_a_decision_for_the_pending_request_passes():
    check_decision(gate(), "gate:run", Decision(action_id="approve"))


def test_an_action_outside_the_allowed_ones_is_invalid_before_anything_else():
    with pytest.raises(InvalidDecision) as e:
        check_decision(gate(), "gate:stale", Decision(action_id="maybe"))  # even for a stale id (422 before 409)
    assert e.value.message == "action_id 'maybe' is not one of the allowed decisions: approve, reject"
    assert e.value.details["allowed_decisions"] == ["approve", "reject"]


@pytest.mark.parametrize(("pending", "waiting", "request_id", "message"), [
    (None, True, "gate:run", "The run is not waiting for request 'gate:run'"),
    (gate(), True, "gate:old", "The run is not waiting for request 'gate:old' (it waits for 'gate:run')"),
    (gate(), False, "gate:run", "The run is not waiting for request 'gate:run'"),  # a claim is in flight
])
def test_not_resumable_when_the_run_does_not_wait_for_this_request(pending, waiting, request_id, message):
    with pytest.raises(NotResumable) as e:
        check_decision(pending, request_id, Decision(action_id="approve"), waiting=waiting)
    assert e.value.message == message


@pytest.mark.parametrize(("decision", "fault"), [
    (Decision(action_id="edit"), "An edit needs values.args"),
    (Decision(action_id="edit", values={"args": "[1]"}), "An edit needs values.args"),
    (Decision(action_id="respond", values={"message": "  "}), "A respond needs values.message"),
    (Decision(action_id="reject", values={"message": 3}), "values.message of a reject must be text"),
])
def test_a_tool_approval_refuses_values_it_cannot_apply(decision, fault):
    with pytest.raises(InvalidDecision) as e:
        check_decision(tool(), "agent:run:1", decision)
    assert e.value.message.startswith(fault)


@pytest.mark.parametrize("decision", [
    Decision(action_id="edit", values={"args": {"amount": "3"}}),
    Decision(action_id="edit", values={"args": '{"amount": "3"}'}),
    Decision(action_id="respond", values={"message": "not now"}),
    Decision(action_id="reject"),
    Decision(action_id="approve"),
])
def test_a_tool_approval_takes_what_it_can_apply(decision):
    check_decision(tool(), "agent:run:1", decision)


# ---- values patterns run on RE2: a flow's pattern cannot hold a worker -----------------------------


def test_a_catastrophic_pattern_checks_a_long_value_at_once():
    """``^(a+)+$`` on 20 000 a's and a b: Python's backtracking re would not finish this year (so a
    regression hangs the suite rather than passing); RE2 answers INVALID_VALUES at once."""
    from signoff.engine.components.human_input import schema_problems
    from signoff.engine.errors import InvalidValues

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    assert schema_problems(schema, "fields") == []
    pending = gate().model_copy(update={"fields": {"approve": schema}})
    with pytest.raises(InvalidValues) as e:
        check_decision(pending, "gate:run", Decision(action_id="approve", values={"code": "a" * 20_000 + "b"}))
    assert [p["loc"] for p in e.value.details["problems"]] == ["values.code"]
    check_decision(pending, "gate:run", Decision(action_id="approve", values={"code": "a" * 20_000}))


@pytest.mark.parametrize("pattern", [r"^(a)\1$", r"^(?=a)a$", r"^(?<!b)a$"])
@pytest.mark.parametrize("default", [{}, {"default": ["x"]}], ids=["no-default", "default"])
def test_a_pattern_re2_cannot_run_is_refused_when_the_flow_is_saved(pattern, default):
    """Refused, not raised: also when the array around it has a default to check."""
    from signoff.engine.components.human_input import schema_problems

    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string",
                                                                                  "pattern": pattern}, **default}}}
    (problem,) = schema_problems(schema, "fields")
    assert problem.startswith("fields.tags[]: pattern") and "RE2" in problem


@pytest.mark.parametrize("prop", [
    {"type": "integer", "maximum": 5, "default": 1000},
    {"type": "string", "enum": ["a", "b"], "default": "c"},
    {"type": "array", "items": {"type": "string", "minLength": 2}, "default": ["x"]},
])
def test_a_default_that_breaks_its_own_schema_is_refused_when_the_flow_is_saved(prop):
    """A default fills values a person left out, after the values were checked: one the schema
    refuses would slip into the decision."""
    from signoff.engine.components.human_input import schema_problems

    (problem,) = schema_problems({"type": "object", "properties": {"n": prop}}, "fields")
    assert problem.startswith("fields.n: its default does not fit its own schema")
    assert schema_problems({"type": "object", "properties": {"n": {**prop, "default": None} | {
        "default": {"integer": 3, "string": "a"}.get(prop["type"], ["xy"])}}}, "fields") == []


# ---- a decision as its events recorded it (a retried or re-run decision takes it from there) ----

def _waiting(pending: PendingRequest) -> RunState:
    return RunState(run_id="run", flow={"nodes": [], "edges": []}, flow_hash="h", built=["ask", "gate"],
                    outputs={"gate": {"x": 1}}, pending=pending, pending_vertex="gate")


@pytest.mark.parametrize("case", ["answered", "late", "deadline", "quorum"])
def test_a_recorded_decision_is_the_decision_as_it_was_applied(case):
    """What resume_run recorded (human_input_expired, human_input_decision) gives back the very
    decision apply_decision made, so a decision applied again from its record leaves the run in
    the same state as the first time."""
    paused = utcnow() - timedelta(hours=2)
    pending = gate().model_copy(update={"paused_at": paused, "fallback_action": "reject",
                                        "allowed_decisions": ["approve", "reject", "fallback"]})
    votes: list[Vote] = []
    timed_out = False
    if case in ("late", "deadline"):
        pending = pending.model_copy(update={"timeout_seconds": 60})
    if case == "deadline":
        pending = pending.model_copy(update={"on_timeout": "default", "default_action": "approve",
                                             "default_values": {"note": "auto"}})
        timed_out = True
    if case == "quorum":
        votes = [Vote(user="u1", action_id="approve", at=paused), Vote(user="u2", action_id="approve", at=utcnow())]
    state = _waiting(pending)
    decision = deadline_decision(pending) if timed_out else Decision(action_id="approve", values={"note": "ok"})
    new, applied = apply_decision(state, "gate:run", decision, utcnow(), None if timed_out else "u2", votes=votes,
                                  timed_out=timed_out)
    assert applied.rerouted == (case in ("late", "deadline"))
    event = json.loads(json.dumps({**decision_event(applied), "via": "api", "update_id": "u-1"}))  # as stored
    expired = json.loads(json.dumps(expired_event(applied))) if applied.rerouted else None
    again = recorded_decision(pending, event, expired)
    assert again == applied
    assert with_decision(state, again) == new


# ---- one statement of a tool approval's values: the check, AG-UI's schema and the card agree ------


@pytest.mark.parametrize(("action", "values", "valid"), [
    ("edit", {"args": {"amount": "3"}}, True),
    ("edit", {}, False),
    ("edit", {"args": 3}, False),
    ("respond", {"message": "not now"}, True),
    ("respond", {}, False),
    ("respond", {"message": ""}, False),
    ("respond", {"message": "  \n"}, False),
    ("reject", {}, True),
    ("reject", {"message": "no"}, True),
    ("reject", {"message": 3}, False),
])
def test_the_check_and_the_published_schema_of_a_tool_approvals_values_agree(action, values, valid):
    """What AG-UI publishes as an action's values schema (and the card's form marks required) is
    what the decision check takes: a payload is valid by the one and the other alike."""
    import jsonschema

    from signoff.api.agui.translate import response_schema
    from signoff.engine.decisions import TOOL_APPROVAL_VALUES

    by_schema = jsonschema.Draft202012Validator(TOOL_APPROVAL_VALUES[action]).is_valid(values)
    try:
        check_decision(tool(), "agent:run:1", Decision(action_id=action, values=values or None))
        by_check = True
    except InvalidDecision:
        by_check = False
    assert by_schema == by_check == valid
    branch = next(b for b in response_schema(tool())["oneOf"] if b["properties"]["action_id"] == {"const": action})
    assert branch["properties"]["values"] == TOOL_APPROVAL_VALUES[action]
    assert ("values" in branch["required"]) == bool(TOOL_APPROVAL_VALUES[action].get("required"))


def test_every_datetime_a_model_holds_is_utc_whatever_it_was_given():
    """One rule instead of a naive-to-UTC guard beside each use (issue 27): a naive datetime is
    read as UTC, an aware one is converted to UTC, and arithmetic across models never meets a
    naive value (``deadline`` subtracted naive from aware before)."""
    from datetime import datetime, timedelta, timezone

    from signoff.engine.decisions import deadline
    from signoff.engine.models import PendingRequest

    naive = PendingRequest(request_id="r", prompt="p", paused_at=datetime(2026, 1, 1, 12, 0), timeout_seconds=60)
    assert naive.paused_at == datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert naive.paused_at.tzinfo is timezone.utc
    paris = PendingRequest(request_id="r", prompt="p", paused_at=datetime(2026, 1, 1, 13, 0,
                                                                          tzinfo=timezone(timedelta(hours=1))))
    assert paris.paused_at.tzinfo is timezone.utc and paris.paused_at.hour == 12
    assert deadline(naive) == datetime(2026, 1, 1, 12, 1, tzinfo=timezone.utc)
    assert PendingRequest.model_validate_json(naive.model_dump_json()).paused_at == naive.paused_at


def test_only_a_check_with_nothing_to_validate_is_quick():
    """What the API and the worker check on their event loop (issue 33): a decision with no schema
    for its values and no standing approval; anything with a schema, a tool approval's edit, a
    ``remember``, goes off the loop, bounded in time, as before."""
    fields = {"approve": {"type": "object", "properties": {"note": {"type": "string", "pattern": "^[a-z]+$"}}}}
    with_fields = gate().model_copy(update={"fields": fields})
    assert quick_to_check(gate(), Decision(action_id="approve"))
    assert quick_to_check(None, Decision(action_id="approve"))
    assert quick_to_check(with_fields, Decision(action_id="reject"))  # no schema for this action
    assert not quick_to_check(with_fields, Decision(action_id="approve"))
    assert not quick_to_check(with_fields, Decision(action_id="approve", values={"note": "x"}))
    assert not quick_to_check(tool(), Decision(action_id="approve"))
    assert not quick_to_check(gate(), Decision(action_id="approve", remember={"scope": "flow", "for": "1h"}))
