"""The AG-UI translation's pure parts (api/agui/translate.py): the resume payload as a decision, a pending
request as an AG-UI interrupt (validated by ``ag-ui-protocol``'s models), the run's input."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from ag_ui.core import Interrupt, RunAgentInput
from pydantic import ValidationError

from signoff.api.agui import AguiRunInput, decision_of, gate_vertex, interrupt_of, last_user_text, response_schema
from signoff.api.errors import InvalidRequest
from signoff.engine.models import Decision, Job, JobStatus, Option, PendingRequest

RUN = "0b7c1a2e-5d0f-4c1e-9a7b-3f2d1c0e9a8b"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def pending(**kw) -> PendingRequest:
    base = dict(request_id=f"gate:{RUN}", prompt="Approve?", paused_at=AT,
                options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")],
                allowed_decisions=["approve", "reject"])
    return PendingRequest(**{**base, **kw})


def job(p: PendingRequest) -> Job:
    return Job(job_id=RUN, flow_id="f", flow_version=1, user_id="u", session_id="t", status=JobStatus.suspended,
               request={}, pending=p, run_id=RUN, created_at=AT, updated_at=AT)


def test_the_payload_is_a_decision_or_its_action_id():
    assert decision_of("approve") == Decision(action_id="approve")
    assert decision_of({"action_id": "edit", "values": {"args": {"x": 1}}}) == Decision(action_id="edit",
                                                                                       values={"args": {"x": 1}})
    for bad in (None, 3, ["approve"], {"values": {}}, {"action_id": "approve", "extra": 1}, {"action_id": ""}):
        with pytest.raises(InvalidRequest) as err:
            decision_of(bad)
        assert "resume[0].payload" in err.value.message


def test_a_gate_is_an_interrupt_with_the_pending_request():
    p = pending(fields={"reject": {"type": "object", "required": ["why"], "properties": {"why": {"type": "string"}}}})
    interrupt = Interrupt.model_validate(interrupt_of(job(p), p).model_dump(by_alias=True))
    assert interrupt.id == f"gate:{RUN}" and interrupt.reason == "human_input" and interrupt.message == "Approve?"
    assert interrupt.tool_call_id is None
    meta = interrupt.metadata
    assert meta["job_id"] == RUN and meta["allowed_decisions"] == ["approve", "reject"]
    assert meta["options"][1] == {"action_id": "reject", "label": "Reject"} and meta["fields"] == p.fields
    schema = interrupt.response_schema
    assert schema["properties"]["action_id"]["enum"] == ["approve", "reject"]
    approve, reject = schema["oneOf"]
    assert approve["required"] == ["action_id"] and "values" not in approve["properties"]
    assert reject["required"] == ["action_id", "values"] and reject["properties"]["values"] == p.fields["reject"]


def test_a_tool_approval_names_its_tool_call():
    p = pending(request_id=f"agent:{RUN}:2", kind="tool_approval", allowed_decisions=["approve", "edit", "reject"],
                options=[], tool={"name": "refund", "args": {"body": "5"}, "call_id": "call_9"})
    interrupt = interrupt_of(job(p), p)
    assert interrupt.reason == "tool_approval" and interrupt.tool_call_id == "call_9"
    assert interrupt.metadata["tool"]["args"] == {"body": "5"}
    edit = [b for b in response_schema(p)["oneOf"] if b["properties"]["action_id"] == {"const": "edit"}][0]
    assert edit["properties"]["values"]["required"] == ["args"] and "values" in edit["required"]
    assert gate_vertex(p.request_id, RUN) == "agent" and gate_vertex(f"a:b:{RUN}", RUN) == "a:b"


def test_the_input_is_the_last_user_message_and_the_ids_are_bounded():
    inp = RunAgentInput.model_validate({"threadId": "t", "runId": "r", "messages": [
        {"id": "1", "role": "user", "content": "first"},
        {"id": "2", "role": "assistant", "content": "ok"},
        {"id": "3", "role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"id": "4", "role": "assistant", "content": "later"}]})
    assert last_user_text(inp) == "a\nb"
    assert last_user_text(RunAgentInput(thread_id="t", run_id="r", messages=[])) == ""
    AguiRunInput.model_validate({"threadId": "t" * 200, "runId": "r", "messages": []})
    for bad in ({"threadId": "", "runId": "r", "messages": []}, {"threadId": "t" * 201, "runId": "r", "messages": []},
                {"threadId": "t", "runId": "r" * 201, "messages": []}):
        with pytest.raises(ValidationError):
            AguiRunInput.model_validate(bad)
