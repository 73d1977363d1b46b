"""What a person needs beside a decision card's question (DESIGN §10, issue 29): the run's input,
the recent conversation of its session, for a tool call the model's turn that proposed it and the
earlier tool results of the run, and the flow step the run stops at with where each answer leads.

Read from what the store already holds (the job, the session's messages, the run's spans, the
flow's spec); nothing here decides anything. Every part is bounded: a handful of messages and tool
results, each cut to a few hundred characters, so a run that talked for hours or a tool that
returned megabytes costs the card the same. Text is plain (Markdown read as
:mod:`signoff.engine.plaintext` reads it) except the model's turn, which the template renders as
sanitised Markdown; never raw."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from signoff.engine.models import FlowRecord, Job, PendingRequest, SpanRecord, User
from signoff.engine.plaintext import plain
from signoff.engine.store.base import Store
from signoff.service.access import run_messages

MAX_INPUT = 2000  # characters of the run's input
MAX_MESSAGES = 6  # the session's most recent messages before this run
MAX_MESSAGE = 600  # characters of each
MAX_TURN = 2000  # characters of the model's turn
MAX_TOOLS = 5  # the run's most recent tool results before the call
MAX_TOOL_ARGS = 300
MAX_TOOL_RESULT = 600
MAX_BRANCH_TARGETS = 4


def cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _json_text(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return cut(value, limit)
    try:
        return cut(json.dumps(value, ensure_ascii=False, default=str), limit)
    except (TypeError, ValueError, RecursionError):
        return cut(str(value), limit)


@dataclass
class Line:
    who: str
    text: str
    at: datetime | None = None
    mine: bool = False  # said by the person (User), not the machine


@dataclass
class ToolResult:
    name: str
    args: str
    result: str
    how: str  # ran, approved, edited
    failed: bool = False


@dataclass
class Step:
    label: str  # the node's display name or id
    kind: str  # its component type
    leads: list[tuple[str, str]] = field(default_factory=list)  # (option label, what it leads to)


@dataclass
class CardFacts:
    input_text: str = ""
    conversation: list[Line] = field(default_factory=list)
    turn: str = ""  # the model's words in the turn that proposed the call (Markdown)
    tools: list[ToolResult] = field(default_factory=list)
    step: Step | None = None

    @property
    def empty(self) -> bool:
        return not (self.input_text or self.conversation or self.turn or self.tools or self.step)


def _vertex_of(request: PendingRequest, job: Job) -> str:
    """The vertex that asked: request ids are ``{vertex}:{run_id}[:n]`` (BuildContext.request_id)."""
    marker = f":{job.run_id}"
    at = request.request_id.find(marker)
    return request.request_id[:at] if at > 0 else ""


def _node_label(node: dict[str, Any]) -> str:
    params = node.get("params") if isinstance(node.get("params"), dict) else {}
    return str(params.get("display_name") or node.get("id") or "")


def step_of(request: PendingRequest, job: Job, flow: FlowRecord | None) -> Step | None:
    """The node the run stops at and, for a gate, which node each option leads to."""
    vertex = _vertex_of(request, job)
    spec = flow.spec if flow is not None and isinstance(flow.spec, dict) else {}
    nodes = {str(n.get("id")): n for n in spec.get("nodes") or [] if isinstance(n, dict)}
    node = nodes.get(vertex)
    if node is None:
        return None
    step = Step(label=_node_label(node), kind=str(node.get("type") or ""))
    if request.kind == "tool_approval":
        return step
    for option in request.options:
        source = f"{vertex}.branch_{option.action_id}"
        targets = [_node_label(nodes[str(e.get("to", "")).split(".", 1)[0]])
                   for e in spec.get("edges") or [] if isinstance(e, dict) and e.get("from") == source
                   and str(e.get("to", "")).split(".", 1)[0] in nodes]
        if targets:
            shown = ", ".join(targets[:MAX_BRANCH_TARGETS]) + (" …" if len(targets) > MAX_BRANCH_TARGETS else "")
            step.leads.append((option.label, shown))
    return step


def _agent_facts(request: PendingRequest, job: Job, spans: list[SpanRecord],
                 until: datetime | None) -> tuple[str, list[ToolResult]]:
    """The model's turn that proposed the call and the tool results before it, from the spans
    of the agent that asked (its model-call and tool-call children). ``until``: when the
    request was answered (what the agent did after is not what was decided on); None while it
    waits, when everything the agent did so far led to it. (``paused_at`` cannot bound it: it is
    the build's clock, read before the model calls.)"""
    vertex = _vertex_of(request, job)
    agents = {s.span_id for s in spans if s.attributes.get("signoff.vertex_id") == vertex}
    before = [s for s in spans if s.parent_id in agents and (until is None or s.start_time <= until)]
    before.sort(key=lambda s: s.start_time)
    turns = [s for s in before if s.type == "llm"]
    turn = ""
    if turns:
        content = turns[-1].outputs.get("content")
        turn = cut(content, MAX_TURN) if isinstance(content, str) else ""
    tools = []
    for s in [s for s in before if s.type == "tool"][-MAX_TOOLS:]:
        outputs = s.outputs or {}
        result = next(iter(outputs.values()), None) if outputs else s.attributes.get("signoff.error")
        tools.append(ToolResult(name=str(s.attributes.get("signoff.tool.name") or s.name),
                                args=_json_text(s.inputs, MAX_TOOL_ARGS),
                                result=_json_text(result if result is not None else "", MAX_TOOL_RESULT),
                                how=str(s.attributes.get("signoff.tool.outcome") or "ran"),
                                failed=s.status == "error"))
    return turn, tools


async def facts(store: Store, user: User, job: Job, request: PendingRequest, flow: FlowRecord | None,
                until: datetime | None = None) -> CardFacts:
    """What the card shows beside the question, for ``user`` (who may see ``job``); ``until``:
    when the request was answered (None while it waits)."""
    found = CardFacts(input_text=cut(plain(str(job.request.get("input_value") or ""), max_chars=MAX_INPUT * 4),
                                     MAX_INPUT),
                      step=step_of(request, job, flow))
    earlier = [m for m in await run_messages(store, user, job)
               if m.job_id != job.job_id and m.created_at <= request.paused_at]
    for m in earlier[-MAX_MESSAGES:]:
        text = (m.card or {}).get("prompt") if m.kind == "card" else m.text
        found.conversation.append(Line(who=m.sender_name or m.sender, text=cut(plain(str(text or ""), max_chars=MAX_MESSAGE * 4),
                                                                               MAX_MESSAGE),
                                       at=m.created_at, mine=m.sender == "User"))
    if request.kind == "tool_approval":
        spans = await store.get_trace(job.run_id)
        found.turn, found.tools = _agent_facts(request, job, spans, until)
    return found
