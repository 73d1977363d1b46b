"""The pure parts of the agent protocols (DESIGN §15): what an MCP elicitation asks of a gate and
what its answer decides, the request state shared by replicas, and what an A2A message decides."""

from __future__ import annotations

import uuid

import pytest
from a2a.types.a2a_pb2 import Message, Part
from google.protobuf import json_format, struct_pb2
from mcp.server.request_state import InvalidRequestState

from signoff.api.a2a.translate import decision_of as a2a_decision
from signoff.api.errors import InvalidRequest
from signoff.api.mcp import elicit
from signoff.api.mcp.server import _DeploymentKeyCodec
from signoff.engine.models import Option, PendingRequest, utcnow
from signoff.engine.settings import Settings


def gate(**more) -> PendingRequest:
    return PendingRequest(
        request_id="gate:run", prompt="Approve this refund?", paused_at=utcnow(),
        options=[Option(action_id="approve", label="Approve"), Option(action_id="deny", label="Reject")],
        allowed_decisions=["approve", "deny"], **more)


def test_the_form_is_the_actions_and_the_flat_fields_of_every_action():
    p = gate(fields={
        "approve": {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 1, "x-ui": "slider"},
                                                     "address": {"type": "object"},  # not flat: not asked
                                                     "tags": {"type": "array", "items": {"type": "string"}}}},
        "deny": {"type": "object", "properties": {"amount": {"type": "string"}, "reason": {"type": "string",
                                                                                         "enum": ["late", "fraud"]}}}})
    schema = elicit.requested_schema(p)
    assert schema["required"] == ["action"]
    assert schema["properties"]["action"]["enum"] == ["approve", "deny"]
    assert "deny: Reject" in schema["properties"]["action"]["description"]
    assert schema["properties"]["amount"] == {"type": "integer", "minimum": 1}  # asked once, as approve says
    assert schema["properties"]["reason"] == {"type": "string", "enum": ["late", "fraud"]}
    assert "address" not in schema["properties"] and "tags" not in schema["properties"]


def test_an_answer_decides_its_action_with_only_that_actions_values():
    p = gate(fields={"approve": {"type": "object", "properties": {"amount": {"type": "integer"}}},
                     "deny": {"type": "object", "properties": {"reason": {"type": "string"}}}})
    decision = elicit.decision_of(p, {"action": "deny", "amount": 3, "reason": "late"})
    assert decision.action_id == "deny" and decision.values == {"reason": "late"}
    assert elicit.decision_of(p, {"action": "approve"}).values is None
    with pytest.raises(InvalidRequest):
        elicit.decision_of(p, {"amount": 3})


def test_decline_takes_the_action_named_reject_by_id_or_label_and_none_else():
    assert elicit.reject_action(gate()) == "deny"  # its label is "Reject"
    no_reject = gate().model_copy(update={"options": [Option(action_id="a", label="A")], "allowed_decisions": ["a"]})
    assert elicit.reject_action(no_reject) is None


def test_a_tool_approval_asks_its_message_and_an_edits_arguments_as_text():
    p = PendingRequest(request_id="agent:run:1", kind="tool_approval", prompt="Run refund?", paused_at=utcnow(),
                       allowed_decisions=["approve", "edit", "reject", "respond"],
                       tool={"name": "refund", "args": {"body": "45 EUR"}})
    props = elicit.requested_schema(p)["properties"]
    assert props["args"]["type"] == "string" and props["message"]["type"] == "string"
    assert "refund" in elicit.message(p) and "45 EUR" in elicit.message(p)
    assert elicit.decision_of(p, {"action": "edit", "args": '{"body": "40 EUR"}', "message": "x"}).values == {
        "args": '{"body": "40 EUR"}'}


def test_replicas_with_the_deployments_key_open_each_others_state_and_no_other_key_does(tmp_path):
    key = "k" * 43 + "="
    one, two = (_DeploymentKeyCodec(Settings(home=tmp_path / n, secret_key=key)) for n in ("a", "b"))
    token = one.seal(b"state")
    assert two.unseal(token) == b"state"
    other = _DeploymentKeyCodec(Settings(home=tmp_path / "c", secret_key="x" * 43 + "="))
    with pytest.raises(InvalidRequestState):
        other.unseal(token)
    assert not (tmp_path / "a").exists()  # the secret key setting: no key file made


def message(*parts: Part) -> Message:
    return Message(message_id=str(uuid.uuid4()), parts=list(parts))


def test_an_a2a_message_decides_by_data_part_or_by_the_text_of_an_action():
    p = gate()
    data = json_format.ParseDict({"action_id": "approve", "values": {"n": 1}, "extra": True}, struct_pb2.Value())
    decision = a2a_decision(message(Part(data=data)), p)
    assert decision.action_id == "approve" and decision.values == {"n": 1}
    assert isinstance(decision.values["n"], int)  # a whole number as the client sent it, not 1.0
    assert a2a_decision(message(Part(text="  reject ")), p).action_id == "deny"  # a label
    assert a2a_decision(message(Part(text="DENY")), p).action_id == "deny"  # an id
    with pytest.raises(InvalidRequest):
        a2a_decision(message(Part(text="yes please")), p)
