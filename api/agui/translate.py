"""What an AG-UI run says, built from what signoff records (api/agui/run.py follows the run): a
pending request as an interrupt and the schema of its answer, a resume payload as a decision,
a log event as a ``CUSTOM`` event, and a component's span as a step with its text and its tool
calls. Pure: no store, no service. Every event is an ``ag-ui-protocol`` model (built, so
validated)."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import Field, ValidationError

from signoff.engine.components import get_component
from signoff.engine.components.agent import REJECTED_DEFAULT
from signoff.engine.components.base import as_text
from signoff.engine.components.human_input import HumanInput
from signoff.engine.components.io import message_id
from signoff.engine.decisions import TOOL_APPROVAL_VALUES, deadline
from signoff.engine.models import Decision, Event, Job, PendingRequest, SpanRecord
from signoff.engine.tracing import A_VERTEX

from signoff.api.errors import InvalidRequest
from signoff.api.limits import ID_MAX_CHARS
from signoff.api.models import human_request

# RUN_ERROR codes of a run that ended by itself (a signoff error carries its own code)
RUN_FAILED = "RUN_FAILED"
RUN_TIMED_OUT = "RUN_TIMED_OUT"
INTERNAL_ERROR = "INTERNAL_ERROR"
# an answer (a resolved resume entry) to an interrupt past its expiresAt: AG-UI's stale resume
INTERRUPT_EXPIRED = "INTERRUPT_EXPIRED"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class AguiRunInput(RunAgentInput):
    """AG-UI's ``RunAgentInput`` (the package's model), with signoff's bounds on the two ids:
    ``threadId`` is a session id."""

    thread_id: str = Field(min_length=1, max_length=ID_MAX_CHARS, description="the session")
    run_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)


TEXT_FIELDS = ("messages", "state", "tools", "context", "forwardedProps", "resume")  # strings bounded like input_value


def _ms(at: datetime | None = None) -> int:
    return int((at.timestamp() if at is not None else time.time()) * 1000)


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "signoff:agui/" + "/".join(parts)))


def last_user_text(inp: RunAgentInput) -> str:
    """The run's input: the text of the last user message ("" when there is none)."""
    for message in reversed(inp.messages):
        if getattr(message, "role", None) != "user":
            continue
        content = message.content
        if isinstance(content, str):
            return content
        return "\n".join(part.text for part in content if getattr(part, "type", None) == "text")
    return ""


def decision_of(payload: Any) -> Decision:
    """A resume entry's payload as a decision: ``{"action_id", "values"?}``, or the action id."""
    if isinstance(payload, str):
        payload = {"action_id": payload}
    if not isinstance(payload, dict):
        raise InvalidRequest("resume[0].payload must be the decision: {\"action_id\": ..., \"values\": {...}} "
                             "(or the action id alone)")
    try:
        return Decision.model_validate(payload)
    except ValidationError as err:
        problems = [{"loc": ".".join(["resume", "0", "payload", *(str(p) for p in e["loc"])]), "message": e["msg"],
                     "type": e["type"]} for e in err.errors()]
        raise InvalidRequest("resume[0].payload is not a decision: "
                             + "; ".join(f"{p['loc']}: {p['message']}" for p in problems), problems=problems) from None


def response_schema(p: PendingRequest) -> dict[str, Any]:
    """A JSON Schema of the resume payload this request takes: an allowed action, and the
    ``values`` its ``fields`` schema (or, for a tool approval, the action) asks for."""
    branches = []
    for action in p.allowed_decisions:
        values = (p.fields or {}).get(action)
        if values is None and p.kind == "tool_approval":
            values = TOOL_APPROVAL_VALUES.get(action)
        branch: dict[str, Any] = {"type": "object", "properties": {"action_id": {"const": action}},
                                  "required": ["action_id"]}
        if values is not None:
            branch["properties"]["values"] = values
            if values.get("required"):
                branch["required"].append("values")
        branches.append(branch)
    return {
        "type": "object",
        "description": "the decision: one of the allowed actions, with the values it takes",
        "properties": {"action_id": {"type": "string", "enum": list(p.allowed_decisions)},
                       "values": {"type": "object"}},
        "required": ["action_id"],
        "oneOf": branches,
    }


def iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def interrupt_of(job: Job, p: PendingRequest, **extra: Any) -> Interrupt:
    """A pending request as an AG-UI interrupt: id = request id, the prompt as its message, the
    tool call it is about, the schema of its answer, ``expiresAt`` its deadline; ``metadata`` is the HTTP API's pending
    request (options, allowed decisions, fields, tool, timeout...) and the job id."""
    public = human_request(p)
    assert public is not None
    return Interrupt(
        id=p.request_id,
        reason="tool_approval" if p.kind == "tool_approval" else "human_input",
        message=p.prompt or None,
        tool_call_id=str(p.tool["call_id"]) if p.tool and p.tool.get("call_id") else None,
        response_schema=response_schema(p),
        expires_at=iso(expires) if (expires := deadline(p)) is not None else None,
        metadata={"job_id": job.job_id, **public.model_dump(mode="json"), **extra},
    )


def gate_vertex(request_id: str, run_id: str) -> str:
    """The vertex that asked: request ids are ``{vertex}:{run_id}[:{n}]``."""
    head, sep, _ = request_id.partition(f":{run_id}")
    return head if sep else request_id


def announce(call_id: str, name: str, args: Any, at: int) -> list[BaseEvent]:
    return [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, timestamp=at),
            ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(args if args is not None else {},
                                                                     ensure_ascii=False), timestamp=at),
            ToolCallEndEvent(tool_call_id=call_id, timestamp=at)]


def shows(component: str) -> str | None:
    """What a person is shown of a component's output ("message", "text" or None), as its
    class in the registry says."""
    cls = get_component(component) if component else None
    return cls.shows if cls is not None else None


class Steps:
    """The steps of one AG-UI run. ``announced``: the tool calls whose ``TOOL_CALL_START`` went
    out (in this AG-UI run or the one before it, which asked for the approval), told once."""

    def __init__(self) -> None:
        self.announced: set[str] = set()

    def log_event(self, job: Job, ev: Event, resumed: PendingRequest | None) -> list[BaseEvent]:
        """A log event as a ``CUSTOM`` event ``signoff.<event>``, and a rejected or answered tool
        call's result (the person's message: the tool did not run)."""
        out: list[BaseEvent] = [CustomEvent(name=f"signoff.{ev.event}", value=ev.data, timestamp=_ms(ev.created_at),
                                            metadata={"seq": ev.seq})]
        if (ev.event == "human_input_decision" and resumed is not None and resumed.kind == "tool_approval"
                and resumed.tool and ev.data.get("request_id") == resumed.request_id
                and ev.data.get("action_id") in ("reject", "respond")):
            # the tool did not run: the model gets the person's message as its result
            message = (ev.data.get("values") or {}).get("message")
            if ev.data["action_id"] == "reject" and not (isinstance(message, str) and message.strip()):
                message = REJECTED_DEFAULT
            call_id = str(resumed.tool.get("call_id"))
            outcome = {"reject": "rejected", "respond": "responded"}[ev.data["action_id"]]
            out.append(ToolCallResultEvent(message_id=_uid(job.run_id, "tool", call_id), tool_call_id=call_id,
                                           content=as_text(message), role="tool", timestamp=_ms(ev.created_at),
                                           metadata={"outcome": outcome}))
        return out

    def step(self, job: Job, span: SpanRecord, component: str, tools: list[SpanRecord],
              texts: dict[str, str]) -> list[BaseEvent]:
        vertex = str(span.attributes.get(A_VERTEX) or span.name)
        attrs = span.attributes
        start_meta: dict[str, Any] = {"component_type": component or None, "display_name": span.name}
        end_meta: dict[str, Any] = {"status": span.status}
        if span.type == "gate":
            start_meta["component_type"] = component or HumanInput.type_name
            end_meta.update({k: attrs.get(f"signoff.{k}") for k in ("request_id", "action_id", "requested_action",
                                                                    "decided_by")})
        if attrs.get("signoff.paused"):
            end_meta.update(paused=True, request_id=attrs.get("signoff.request_id"))
        if span.status == "error":
            end_meta["error"] = attrs.get("signoff.error")
        out: list[BaseEvent] = [StepStartedEvent(step_name=vertex, timestamp=_ms(span.start_time), metadata=start_meta)]
        for tool in tools:
            out += self.tool_call(job, tool)
        if span.type == "component" and shows(component):
            out += self.text(job, vertex, component, span, texts)
        out.append(StepFinishedEvent(step_name=vertex, timestamp=_ms(span.end_time), metadata=end_meta))
        return out

    def tool_call(self, job: Job, tool: SpanRecord) -> list[BaseEvent]:
        attrs = tool.attributes
        call_id = str(attrs.get("signoff.tool.call_id") or tool.span_id)
        name = str(attrs.get("signoff.tool.name") or tool.name)
        at = _ms(tool.end_time or tool.start_time)
        out: list[BaseEvent] = []
        if call_id not in self.announced:
            self.announced.add(call_id)
            out += announce(call_id, name, tool.inputs, _ms(tool.start_time))
        result = next(iter(tool.outputs.values()), None) if tool.outputs else None
        if tool.status == "error" and result is None:
            result = f"Error: {attrs.get('signoff.error') or 'the tool failed'}"
        out.append(ToolCallResultEvent(message_id=_uid(job.run_id, "tool", call_id), tool_call_id=call_id,
                                       content=as_text(result), role="tool", timestamp=at,
                                       metadata={"outcome": attrs.get("signoff.tool.outcome"), "args": tool.inputs,
                                                 "status": tool.status}))
        return out

    def text(self, job: Job, vertex: str, component: str, span: SpanRecord, texts: dict[str, str]) -> list[BaseEvent]:
        if shows(component) == "message":
            mid = message_id(job.run_id, vertex, "machine")
            text = texts.get(mid)
            if text is None:
                text = as_text(span.outputs.get("message"))
            name = (span.outputs.get("message") or {}).get("sender_name") if isinstance(
                span.outputs.get("message"), dict) else None
        else:
            mid = _uid(job.run_id, vertex, "text")
            text = as_text(span.outputs.get("text"))
            name = None
        at = _ms(span.end_time)
        out: list[BaseEvent] = [TextMessageStartEvent(message_id=mid, role="assistant", name=name or None, timestamp=at,
                                                      metadata={"vertex_id": vertex})]
        if text:
            out.append(TextMessageContentEvent(message_id=mid, delta=text, timestamp=at))
        out.append(TextMessageEndEvent(message_id=mid, timestamp=at))
        return out
