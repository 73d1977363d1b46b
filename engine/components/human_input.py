"""Human Input: pauses the run until a person picks one of the decisions (DESIGN §4, §9).

Beyond the decisions, its params say who may decide (``approvers``, ``allow_self_approval``,
``required_approvals``), what the decision carries (``fields``: a JSON Schema for its values,
or one per decision) and what its deadline does by itself (``on_timeout``, ``default_action``,
``default_values``), with reminders and an escalation. All are checked when the flow is saved;
the rules that apply them to a decision are in :mod:`signoff.engine.decisions`, the timers in
the FlowRun workflow. Without them a gate behaves as it always did.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema.exceptions import SchemaError

from signoff.engine.components import register
from signoff.engine.durations import duration_seconds
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.models import EXPIRED_ACTION, FALLBACK_ACTION, Option, PendingRequest
from signoff.engine.valueschema import ValuesValidator, pattern_problem

DEFAULT_DECISIONS = ["Approve", "Reject"]
ON_TIMEOUT = ("fallback", "default", "fail")
CHANNELS = ("email", "slack")  # what ``notify`` may name (DESIGN §14)
GROUP_PREFIX = "group:"
# What a values schema may use: the shapes a form can render (DESIGN §9).
VALUE_TYPES = {"string", "number", "integer", "boolean"}
SCHEMA_KEYWORDS = {"type", "properties", "required", "items", "enum", "const", "minimum", "maximum",
                   "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
                   "uniqueItems", "default", "title", "description", "format", "additionalProperties", "multipleOf",
                   "examples"}


@functools.cache
def _process_max_fields_bytes() -> int:
    """SIGNOFF_MAX_FIELDS_BYTES of this process (read once)."""
    from signoff.engine.settings import Settings

    return Settings().max_fields_bytes


def fields_too_large(fields: Any, max_bytes: int | None = None) -> str | None:
    """The problem when ``fields`` is larger than ``max_bytes`` (default: this process's
    SIGNOFF_MAX_FIELDS_BYTES) as compact JSON, else None. Checked before anything else looks at
    the schema: every card, inbox entry and pending request carries it."""
    limit = _process_max_fields_bytes() if max_bytes is None else max_bytes
    try:
        size = len(json.dumps(fields, separators=(",", ":"), ensure_ascii=False, default=str).encode())
    except (TypeError, ValueError, RecursionError):
        return "fields: not a JSON value"
    if size > limit:
        return f"fields: is {size} bytes as JSON; the limit is {limit} (SIGNOFF_MAX_FIELDS_BYTES)"
    return None


def action_id(label: str) -> str:
    return label.strip().lower().replace(" ", "_")


def remind_floor_problems(params: dict[str, Any], floor: float) -> list[str]:
    """A ``remind_every`` shorter than ``floor`` seconds (SIGNOFF_MIN_REMIND_EVERY_SECONDS): a
    request must not be turned into a flood of reminders to its approvers' webhooks. A
    ``remind_every`` that is not a duration is check_params' to tell."""
    try:
        every = duration_seconds(params.get("remind_every"), "remind_every")
    except ValueError:
        return []
    if 0 < every < floor:
        return [f"param 'remind_every': {every:g} seconds is shorter than the floor of {floor:g} seconds "
                "(SIGNOFF_MIN_REMIND_EVERY_SECONDS)"]
    return []


def timeout_seconds(value: Any) -> float:
    """The gate's ``timeout`` in seconds; 0 waits forever."""
    return duration_seconds(value, "timeout")


def schema_problems(schema: Any, where: str) -> list[str]:
    """Why ``schema`` is not a values schema signoff takes: a JSON Schema object whose properties
    are strings, numbers, integers, booleans, enums or arrays of these; no references."""
    if not isinstance(schema, dict):
        return [f"{where} must be a JSON Schema object"]
    if schema.get("type", "object") != "object":
        return [f"{where}: the values are an object: its schema's type is 'object'"]
    try:
        ValuesValidator.check_schema(schema)
    except SchemaError as e:
        return [f"{where} is not a valid JSON Schema: {e.message}"]
    problems = []
    defaults: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[str, Any]] = [(where, schema)]
    while stack:
        at, node = stack.pop()
        if not isinstance(node, dict):
            continue
        unknown = set(node) - SCHEMA_KEYWORDS
        if "pattern" in node and (problem := pattern_problem(node["pattern"])):
            problems.append(f"{at}: {problem}")
        if "default" in node:
            defaults.append((at, node))
        if unknown:
            problems.append(f"{at}: unsupported keyword(s) {', '.join(sorted(unknown))} (no $ref; the form "
                            "keywords are type, properties, required, items, enum, bounds, lengths, pattern, "
                            "default, title, description)")
        props = node.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                if isinstance(sub, dict):
                    kind = sub.get("type")
                    if kind == "array":
                        item = sub.get("items") or {}
                        if isinstance(item, dict) and item.get("type", "string") not in VALUE_TYPES:
                            problems.append(f"{at}.{name}: an array holds strings, numbers, integers or booleans")
                    elif kind is not None and kind not in VALUE_TYPES and "enum" not in sub:
                        problems.append(f"{at}.{name}: type '{kind}' is not one a form takes "
                                        "(string, number, integer, boolean, or an array of these)")
                stack.append((f"{at}.{name}", sub))
        if isinstance(node.get("items"), dict):
            stack.append((f"{at}[]", node["items"]))
    if not problems:  # a default fills values left out: it must pass its own schema (a sound one: no
        # pattern RE2 cannot run, which would raise rather than refuse)
        for at, node in defaults:
            wrong = next(iter(ValuesValidator({k: v for k, v in node.items() if k != "default"}).iter_errors(
                node["default"])), None)
            if wrong is not None:
                problems.append(f"{at}: its default does not fit its own schema: {wrong.message}")
    return problems


@register
class HumanInput(Component):
    type_name = "HumanInput"
    display_name = "Human Input"
    description = "Waits for a person to choose; the chosen branch runs, the others stop."
    can_pause = True
    gate = True
    instant = True
    inputs = [InputDef("prompt")]
    params = [
        ParamDef("prompt", "str", description="What the person is asked (default: the input's text)."),
        ParamDef("decisions", "str_list", default=DEFAULT_DECISIONS),
        ParamDef("timeout", "any", default=0),
        ParamDef("enable_fallback", "bool", default=False),
        ParamDef("fields", "dict", description="A JSON Schema for the decision's values, or {label: schema}."),
        ParamDef("approvers", "str_list", description="Who may decide: user names or ids, group:NAME (default: the "
                                                      "run's owner)."),
        ParamDef("allow_self_approval", "bool", default=True, description="False: the run's owner may not decide."),
        ParamDef("required_approvals", "int", default=1, description="Distinct approvers the first decision needs."),
        ParamDef("on_timeout", "str", description="At the deadline: fallback, default or fail."),
        ParamDef("default_action", "str", description="The decision on_timeout=default applies (an action id)."),
        ParamDef("default_values", "dict", description="The values it applies with."),
        ParamDef("remind_every", "any", description="Remind (event, webhooks) this often until decided."),
        ParamDef("escalate_after", "any", description="Add escalate_to to the approvers after this long."),
        ParamDef("escalate_to", "str_list", description="Approvers added by the escalation."),
        ParamDef("notify", "str_list", description="Channels the request is sent on: [] none, or email, slack "
                                                   "(default: every channel the operator configured)."),
    ]

    @classmethod
    def decisions(cls, params: dict[str, Any]) -> list[str]:
        d = params.get("decisions")
        if d is None:
            return list(DEFAULT_DECISIONS)
        return [x for x in d if isinstance(x, str)] if isinstance(d, list) else []

    @classmethod
    def action_ids(cls, params: dict[str, Any]) -> list[str]:
        """What a decision may answer: each label's action id, and ``fallback`` when enabled
        (chosen before the deadline as in Langflow; the options stay the labels)."""
        ids = [action_id(label) for label in cls.decisions(params)]
        return ids + [FALLBACK_ACTION] if params.get("enable_fallback") is True else ids

    @classmethod
    def fields_by_action(cls, params: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        """``fields`` as {action_id: schema}: one schema for every decision, or the decision
        labels' (or action ids') own."""
        fields = params.get("fields")
        if not isinstance(fields, dict) or not fields:
            return None
        ids = cls.action_ids(params)
        if "type" in fields or "properties" in fields:
            return {aid: fields for aid in ids}
        by_label = {action_id(label): label for label in cls.decisions(params)}
        return {action_id(str(key)): schema for key, schema in fields.items()
                if action_id(str(key)) in by_label or action_id(str(key)) == FALLBACK_ACTION}

    @classmethod
    def output_defs(cls, params: dict[str, Any]) -> list[OutputDef]:
        outs = [OutputDef(f"branch_{action_id(label)}", label) for label in cls.decisions(params) if action_id(label)]
        if params.get("enable_fallback") is True:
            outs.append(OutputDef(f"branch_{FALLBACK_ACTION}", "Taken when the answer comes too late"))
        return outs

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        d = params.get("decisions")
        if d is not None and isinstance(d, list):
            if not d:
                problems.append("decisions: give at least one decision label")
            seen: set[str] = set()
            for label in d:
                if not isinstance(label, str):
                    continue
                aid = action_id(label)
                if not aid:
                    problems.append("decisions: a label is empty")
                elif aid in seen:
                    problems.append(f"decisions: two labels give the action id '{aid}'")
                elif aid in (FALLBACK_ACTION, EXPIRED_ACTION):
                    problems.append(f"decisions: '{label}' is reserved")
                seen.add(aid)
        durations: dict[str, float] = {}
        for name in ("timeout", "remind_every", "escalate_after"):
            try:
                durations[name] = duration_seconds(params.get(name), name)
            except ValueError as e:
                problems.append(f"param '{name}': {e}")
        problems += cls._check_fields(params)
        problems += cls._check_people(params, durations)
        problems += cls._check_deadline(params, durations)
        return problems

    @classmethod
    def _check_fields(cls, params: dict[str, Any]) -> list[str]:
        fields = params.get("fields")
        if fields is None or not isinstance(fields, dict):
            return []
        if too_large := fields_too_large(fields):
            return [too_large]
        if "type" in fields or "properties" in fields:
            return schema_problems(fields, "fields")
        problems = []
        labels = {action_id(label): label for label in cls.decisions(params)}
        for key, schema in fields.items():
            if action_id(str(key)) not in labels and action_id(str(key)) != FALLBACK_ACTION:
                problems.append(f"fields: '{key}' is not one of the decisions ({', '.join(labels.values())})")
            else:
                problems += schema_problems(schema, f"fields.{key}")
        return problems

    @classmethod
    def _check_people(cls, params: dict[str, Any], durations: dict[str, float]) -> list[str]:
        problems = []
        for name in ("approvers", "escalate_to"):
            for ref in params.get(name) or []:
                if isinstance(ref, str) and (not ref.strip() or ref.strip() == GROUP_PREFIX):
                    problems.append(f"param '{name}': an empty user or group name")
        n = params.get("required_approvals")
        if isinstance(n, int) and not isinstance(n, bool) and n < 1:
            problems.append("param 'required_approvals' must be >= 1")
        if isinstance(n, int) and n > 1 and params.get("approvers") in (None, []):
            problems.append("param 'required_approvals' > 1 needs approvers (several people to approve)")
        if params.get("allow_self_approval") is False and params.get("approvers") in (None, []):
            problems.append("param 'allow_self_approval' false needs approvers (without them only the run's owner "
                            "decides)")
        for channel in params.get("notify") or []:
            if channel not in CHANNELS:
                problems.append(f"param 'notify': {str(channel)[:40]!r} is not a channel ({', '.join(CHANNELS)})")
        if bool(params.get("escalate_to")) != bool(durations.get("escalate_after")):
            problems.append("params 'escalate_after' and 'escalate_to' go together")
        return problems

    @classmethod
    def _check_deadline(cls, params: dict[str, Any], durations: dict[str, float]) -> list[str]:
        on_timeout = params.get("on_timeout")
        problems = []
        if on_timeout is None:
            for name in ("default_action", "default_values"):
                if params.get(name) is not None:
                    problems.append(f"param '{name}' is used by on_timeout: \"default\" only")
            return problems
        if on_timeout not in ON_TIMEOUT:
            return [f"param 'on_timeout': '{on_timeout}' is not one of {', '.join(ON_TIMEOUT)}"]
        if not durations.get("timeout"):
            problems.append("param 'on_timeout' needs a timeout (when the deadline is)")
        if on_timeout == "fallback" and params.get("enable_fallback") is not True:
            problems.append("on_timeout \"fallback\" takes branch_fallback: set enable_fallback true")
        if on_timeout == "default":
            default = params.get("default_action")
            if not isinstance(default, str) or default not in cls.action_ids(params):
                problems.append(f"on_timeout \"default\" needs default_action, one of {', '.join(cls.action_ids(params))}")
            else:
                schema = (cls.fields_by_action(params) or {}).get(default)
                values = params.get("default_values") or {}
                if schema is not None and not schema_problems(schema, "fields"):
                    for error in ValuesValidator(schema).iter_errors(values):
                        problems.append(f"default_values: {error.message}")
        elif params.get("default_action") is not None or params.get("default_values") is not None:
            problems.append("params 'default_action' and 'default_values' are used by on_timeout: \"default\" only")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        labels = self.decisions(self.params)
        branches = [f"branch_{action_id(label)}" for label in labels]
        if self.params.get("enable_fallback"):
            branches.append(f"branch_{FALLBACK_ACTION}")
        if not ctx.has_consumers:
            ctx.skip()  # nothing waits on the answer: do not block the run
            return {}
        incoming = ctx.inputs.get("prompt")
        if ctx.decision is None:
            raise ctx.pause(self._request(ctx, labels, incoming))
        chosen = f"branch_{ctx.decision.action_id}"
        ctx.stop(*[b for b in branches if b != chosen])
        if chosen not in branches:  # __expired__: no branch runs
            return {}
        payload = incoming if incoming is not None else (self.params.get("prompt") or "")
        if ctx.decision.values:  # the values ride the chosen branch, with what was asked
            payload = {"text": as_text(payload), "decision": {"action_id": ctx.decision.action_id,
                                                             "values": ctx.decision.values,
                                                             "decided_by": ctx.decision.decided_by}}
        return {chosen: payload}

    def _request(self, ctx: BuildContext, labels: list[str], incoming: Any) -> PendingRequest:
        p = self.params
        return PendingRequest(
            request_id=ctx.request_id(),
            kind="node_input",
            prompt=p.get("prompt") or as_text(incoming) or "Please decide.",
            options=[Option(action_id=action_id(label), label=label) for label in labels],
            allowed_decisions=self.action_ids(p),
            timeout_seconds=timeout_seconds(p.get("timeout")),
            fallback_action=FALLBACK_ACTION if p.get("enable_fallback") else None,
            paused_at=ctx.now(),
            fields=self.fields_by_action(p),
            approvers=[str(a).strip() for a in p.get("approvers") or []],
            allow_self_approval=p.get("allow_self_approval") is not False,
            required_approvals=int(p.get("required_approvals") or 1),
            on_timeout=p.get("on_timeout"),
            default_action=p.get("default_action"),
            default_values=p.get("default_values"),
            remind_every_seconds=duration_seconds(p.get("remind_every"), "remind_every"),
            escalate_after_seconds=duration_seconds(p.get("escalate_after"), "escalate_after"),
            escalate_to=[str(a).strip() for a in p.get("escalate_to") or []],
            notify=list(dict.fromkeys(p["notify"])) if isinstance(p.get("notify"), list) else None,
        )
