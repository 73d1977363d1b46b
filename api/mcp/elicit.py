"""What an MCP elicitation of a gate asks and what its answer decides (DESIGN §15). Pure: no
store, no service, no SDK session.

An elicitation form is flat (MCP allows only top-level primitive properties), so the request
becomes one ``action`` property (an enum of the allowed action ids, their labels in its
description) plus the primitive properties of every action's ``fields`` schema (a tool approval's:
``message``, and an edit's ``args`` as JSON text, which the engine reads as the object). The answer is
checked as any decision is, by :meth:`RunService.resume` against the chosen action's schema:
the form only says what to ask."""

from __future__ import annotations

import json
from typing import Any

from signoff.engine.decisions import TOOL_APPROVAL_VALUES
from signoff.engine.models import Decision, PendingRequest

from signoff.api.errors import InvalidRequest

# what a flat form property may say about itself (MCP's PrimitiveSchemaDefinition)
_PRIMITIVE_TYPES = ("string", "number", "integer", "boolean")
_KEPT = ("type", "title", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "format", "default")
_FORMATS = ("email", "uri", "date", "date-time")
ACTION = "action"


def labels(p: PendingRequest) -> dict[str, str]:
    """Each allowed action id with its label (the id itself when the gate gave none)."""
    named = {o.action_id: o.label for o in p.options}
    return {a: named.get(a, a) for a in p.allowed_decisions}


def schemas(p: PendingRequest) -> dict[str, dict[str, Any]]:
    """The values' schema of each action: the gate's ``fields``, or a tool approval's own."""
    if p.kind == "tool_approval":
        return {a: TOOL_APPROVAL_VALUES[a] for a in p.allowed_decisions if a in TOOL_APPROVAL_VALUES}
    return p.fields or {}


def _primitive(schema: Any) -> dict[str, Any] | None:
    """``schema`` cut to what a flat form may carry, or None when it is not a primitive."""
    if not isinstance(schema, dict) or schema.get("type") not in _PRIMITIVE_TYPES:
        return None
    out = {k: schema[k] for k in _KEPT if k in schema}
    if "enum" in out and (out["type"] != "string" or not all(isinstance(v, str) for v in out["enum"])):
        return None
    if "format" in out and out["format"] not in _FORMATS:
        del out["format"]
    return out


def requested_schema(p: PendingRequest) -> dict[str, Any]:
    """The form of the request: ``action`` and the flat ``fields`` (their union over the actions;
    a name two actions share is asked once, as the first one says)."""
    names = labels(p)
    action: dict[str, Any] = {"type": "string", "title": "Decision", "enum": list(names),
                              "description": "; ".join(f"{a}: {label}" for a, label in names.items())}
    properties: dict[str, Any] = {ACTION: action}
    for action_id in p.allowed_decisions:
        schema = schemas(p).get(action_id) or {}
        for name, prop in (schema.get("properties") or {}).items():
            if p.kind == "tool_approval" and name == "args":  # an edit's arguments, as JSON text
                prop = {"type": "string", "title": "Arguments (edit)",
                        "description": "edit: the arguments to run the tool with, as a JSON object"}
            flat = _primitive(prop)
            if flat is not None and name != ACTION and name not in properties:
                properties[name] = flat
    return {"type": "object", "properties": properties, "required": [ACTION]}


def message(p: PendingRequest) -> str:
    """What the person is shown: the gate's prompt and, for a tool approval, the call."""
    text = p.prompt or "A decision is needed"
    if p.kind == "tool_approval" and p.tool:
        args = json.dumps(p.tool.get("args"), ensure_ascii=False)[:2000]
        text += f"\n\nTool: {p.tool.get('name')}\nArguments: {args}"
    return text


def decision_of(p: PendingRequest, content: dict[str, Any] | None) -> Decision:
    """An accepted form as the decision: its ``action``, and as ``values`` the properties the
    chosen action's schema names (none when it has no schema)."""
    content = content or {}
    action_id = content.get(ACTION)
    if not isinstance(action_id, str) or not action_id:
        raise InvalidRequest(f"The elicitation's answer has no {ACTION!r}: choose one of "
                             f"{', '.join(p.allowed_decisions)}")
    schema = schemas(p).get(action_id)
    names = set((schema or {}).get("properties") or {})
    values = {k: v for k, v in content.items() if k in names}
    return Decision(action_id=action_id[:200], values=values or None)


def reject_action(p: PendingRequest) -> str | None:
    """The gate's reject action (an elicitation declined takes it), when it has one: the action
    whose id or label is "reject"."""
    for action_id, label in labels(p).items():
        if action_id.lower() == "reject" or label.strip().lower() == "reject":
            return action_id
    return None
