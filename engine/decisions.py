"""Every rule about a decision, in one place (DESIGN §1, §5, §9).

:func:`check_decision` is the one check a decision passes before anything is claimed or
written, whoever sends it: the service before it asks Temporal, the workflow's ``resume``
Update validator and Signal handler, and :func:`apply_decision` itself (the in-process runner
and the activities). It raises, in this order:

- :class:`Forbidden` (403) when the run's owner decides but may no longer execute the flow;
  :class:`NotAnApprover` (403) when the decider is not one of the request's approvers (with
  none named, only the run's owner decides; ``allow_self_approval: false`` refuses the owner);
- :class:`InvalidDecision` (422) for an action outside the request's ``allowed_decisions``, or
  values the request kind cannot take (a tool approval's edit without ``args``...);
  :class:`InvalidValues` (422) for values that do not match the request's ``fields`` schema,
  one problem per field;
- :class:`NotResumable` (409) when the run does not wait for this request (no pending
  request, a claim in flight, or a stale ``request_id``); :class:`AlreadyVoted` (409) for a
  second vote of the same person on a request that needs several.

:func:`count_vote` says whether a decision resolves the request or is one vote of a quorum
(``required_approvals`` distinct approvers for the first decision; any other decision by one
approver resolves at once).

:func:`apply_decision` turns a checked decision into the run's next state: a late answer is
rerouted as the request's deadline says (``on_timeout: default`` → the default action,
else the fallback action, else ``__expired__``: no branch runs), a decision made by the
deadline itself (:func:`deadline_decision`) is applied as it is, and only the gated vertex
becomes buildable again, with the decision injected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jsonschema.exceptions import best_match

from signoff.engine.audit.canonical import sha256_hex
from signoff.engine.durations import duration_seconds
from signoff.engine.errors import (
    AlreadyVoted,
    Forbidden,
    InvalidDecision,
    InvalidStandingApproval,
    InvalidValues,
    NotAnApprover,
    NotResumable,
)
from signoff.engine.models import EXPIRED_ACTION, AppliedDecision, Decision, PendingRequest, Vote, as_utc
from signoff.engine.state import RunState
from signoff.engine.valueschema import ValuesValidator, too_many_items


@dataclass(frozen=True)
class Decider:
    """Who sends a decision, as the rules need to know them: their user id, the approver
    references they match (``user:<id>``, ``user:<name>``, ``group:<owner_id>/<name>`` of every
    group they are in), whether the run is theirs, and whether they may execute its flow now."""

    user_id: str
    refs: frozenset[str] = field(default_factory=frozenset)
    owner: bool = False
    may_execute: bool = True


def user_ref(user: str) -> str:
    return f"user:{user}"


def group_ref(owner_id: str, name: str) -> str:
    return f"group:{owner_id}/{name}"


def check_decider(pending: PendingRequest, decider: Decider) -> None:
    """Forbidden or NotAnApprover when ``decider`` may not decide ``pending``."""
    named = bool(pending.approvers or pending.approver_refs)
    if decider.owner:
        if not decider.may_execute:
            raise Forbidden("You may no longer execute this flow, so you may not decide its runs")
        if not named:
            return
        if not pending.allow_self_approval:
            raise NotAnApprover("This request may not be approved by the run's own owner (allow_self_approval: "
                                "false)")
    if not named or not (decider.refs & set(pending.approver_refs)):
        raise NotAnApprover()


def check_decision(pending: PendingRequest | None, request_id: str, decision: Decision, *,
                   waiting: bool = True, decider: Decider | None = None, votes: Sequence[Vote] = (),
                   values: bool = True, max_items: int | None = None, max_standing: float | None = None) -> None:
    """Raise (in the order of the module's docstring) when ``decision`` cannot answer
    ``request_id`` of a run whose pending request is ``pending``. ``waiting`` is False while the
    run cannot take a decision even though it has a pending request (a claim is being applied).
    ``decider`` None: the caller checked who decides (the engine's own runner). ``values`` False:
    the values are not checked against the request's ``fields`` (the workflow's Update validator:
    only cheap checks there; the API checked them before sending, the activity checks them again).
    ``max_items``: an array in the values longer than this, or more than ten times this many
    values in all, is InvalidValues (SIGNOFF_MAX_VALUE_ITEMS; None: no such bound). A
    ``remember`` is checked by :func:`check_remember` (``max_standing``: SIGNOFF_MAX_STANDING),
    after who decides and the action, before the values."""
    if pending is not None:
        if decider is not None:
            check_decider(pending, decider)
        if decision.action_id not in pending.allowed_decisions:
            raise InvalidDecision(
                f"action_id {decision.action_id!r} is not one of the allowed decisions: "
                f"{', '.join(pending.allowed_decisions)}",
                allowed_decisions=list(pending.allowed_decisions),
            )
        check_remember(pending, decision, max_standing)
        if values:
            _check_values(pending, decision, max_items)
    if pending is None or not waiting or pending.request_id != request_id:
        raise NotResumable(
            f"The run is not waiting for request {request_id!r}"
            + (f" (it waits for {pending.request_id!r})" if pending is not None and pending.request_id != request_id
               else "")
        )
    if decider is not None and any(v.user == decider.user_id for v in votes):
        raise AlreadyVoted()


def quick_to_check(pending: PendingRequest | None, decision: Decision) -> bool:
    """Whether :func:`check_decision` of ``decision`` costs no more than a few comparisons: no
    schema to check its values against (the action has no ``fields``, the request is no tool
    approval) and no standing approval asked. Such a check runs on the caller's event loop; any
    other is run off it, bounded in time (its cost grows with the values and the schema), as
    every check was (a thread hop each way per decision, issue 33)."""
    return pending is None or (decision.remember is None and pending.kind != "tool_approval"
                               and (pending.fields or {}).get(decision.action_id) is None)


# standing approvals (DESIGN §17, engine/standing.py): what a decision's ``remember`` may be
STANDING_SCOPES = ("session", "flow")
REMEMBERED_ACTIONS = ("approve", "edit")


@dataclass(frozen=True)
class Remember:
    """A decision's ``remember``, checked: the scope and how long the rule lasts."""

    scope: str
    seconds: float


def check_remember(pending: PendingRequest, decision: Decision, max_seconds: float | None = None) -> Remember | None:
    """The decision's ``remember`` as a :class:`Remember` (None without one), or
    InvalidStandingApproval: on a request that is not an Agent's tool approval (a gate), on an
    action other than approve or edit, a scope other than ``session``/``flow``, a ``for`` that
    is not a duration above 0 or is longer than ``max_seconds`` (SIGNOFF_MAX_STANDING; None: the
    caller has no settings, e.g. the workflow's validator: the API and the activity check it)."""
    remember = decision.remember
    if remember is None:
        return None
    if pending.kind != "tool_approval" or not pending.tool:
        raise InvalidStandingApproval(
            "remember (a standing approval) is only for an Agent's tool approval; this request is a gate "
            f"({pending.kind}): decide it without remember")
    if decision.action_id not in REMEMBERED_ACTIONS:
        raise InvalidStandingApproval(
            f"remember goes with an approve or an edit, not with {decision.action_id!r}")
    unknown = sorted(set(remember) - {"scope", "for"})
    if unknown:
        raise InvalidStandingApproval(f"remember takes scope and for; not {', '.join(map(str, unknown))[:200]}")
    scope = remember.get("scope")
    if scope not in STANDING_SCOPES:
        raise InvalidStandingApproval(f"remember.scope must be 'session' or 'flow', not {str(scope)[:50]!r}")
    try:
        seconds = duration_seconds(remember.get("for"), "remember.for")
    except ValueError as err:
        raise InvalidStandingApproval(str(err)) from None
    if seconds <= 0:
        raise InvalidStandingApproval('remember.for must be a duration above 0: seconds or {"value": 8, "unit": '
                                      '"Hours"}')
    if max_seconds is not None and seconds > max_seconds:
        raise InvalidStandingApproval(
            f"remember.for is {seconds:g} seconds, longer than a standing approval may last: {max_seconds:g} "
            "seconds (SIGNOFF_MAX_STANDING)", max_seconds=max_seconds)
    return Remember(str(scope), seconds)


def count_vote(pending: PendingRequest, decision: Decision, votes: Sequence[Vote]) -> bool:
    """Whether ``decision``, added to ``votes``, resolves the request (else it is one more vote of
    a quorum that is not complete)."""
    if pending.quorum_action is None or decision.action_id != pending.quorum_action:
        return True
    return len(votes) + 1 >= pending.required_approvals


def _check_values(pending: PendingRequest, decision: Decision, max_items: int | None = None) -> None:
    if pending.kind == "tool_approval":
        _tool_approval_values(pending, decision)
        return
    schema = (pending.fields or {}).get(decision.action_id)
    if schema is None:
        return
    if max_items is not None and (long := too_many_items(decision.values or {}, max_items)):
        raise InvalidValues(long)
    by_field: dict[str, list[Any]] = {}
    for error in ValuesValidator(schema).iter_errors(decision.values or {}):
        loc = ".".join(["values", *[str(p) for p in error.absolute_path], *_missing(error)])
        by_field.setdefault(loc, []).append(error)
    # one problem per field: a value that breaks several rules (too short and not matching the
    # pattern) is one field to fix; the most relevant rule is named
    problems = [{"loc": loc, "message": error.message, "type": str(error.validator)}
                for loc, errors in by_field.items() for error in [best_match(errors)] if error is not None]
    if problems:
        raise InvalidValues(sorted(problems, key=lambda p: p["loc"]))


def _missing(error: Any) -> list[str]:
    """The property a ``required`` error is about (jsonschema says it in the message only)."""
    if error.validator == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        if match:
            return [match.group(1)]
    return []


def with_defaults(pending: PendingRequest, action_id: str, values: dict[str, Any] | None) -> dict[str, Any] | None:
    """The values with the schema's defaults for the properties left out."""
    schema = (pending.fields or {}).get(action_id)
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return values
    filled = dict(values or {})
    for name, sub in props.items():
        if name not in filled and isinstance(sub, dict) and "default" in sub:
            filled[name] = sub["default"]
    return filled or values


# What each action of an Agent's tool approval takes as ``values`` (docs/agent.md): the one
# statement of it, which the decision check below, AG-UI's ``responseSchema`` and the card's
# form all read. (approve takes nothing; an edit's ``args`` may also come as a JSON text of an
# object, as a form sends it.)
TOOL_APPROVAL_VALUES: dict[str, dict[str, Any]] = {
    "edit": {"type": "object", "required": ["args"],
             "properties": {"args": {"type": "object", "description": "the arguments to run the tool with instead"}}},
    "respond": {"type": "object", "required": ["message"],
                "properties": {"message": {"type": "string", "minLength": 1, "pattern": "\\S",
                                           "description": "the tool's answer, in its place"}}},
    "reject": {"type": "object",
               "properties": {"message": {"type": "string", "description": "what the model is told (optional)"}}},
}
_TOOL_VALUE_NEEDED = {
    ("edit", "args"): "An edit needs values.args: the tool's arguments as an object, e.g. {example}",
    ("respond", "message"): "A respond needs values.message: the text the model gets as the tool's answer",
}


def tool_value_required(action: str, name: str) -> bool:
    """Whether a tool approval's ``action`` needs ``values[name]`` (TOOL_APPROVAL_VALUES)."""
    return name in TOOL_APPROVAL_VALUES.get(action, {}).get("required", ())


def tool_args(value: Any) -> dict[str, Any] | None:
    """``values.args`` of a tool approval's edit: an object, or a JSON text of one."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def executed_args(pending: PendingRequest | None, action_id: str, values: dict[str, Any] | None
                  ) -> dict[str, Any] | None:
    """The arguments a tool call runs with after this decision (its receipt's ``executed_args``,
    docs/audit.md): the proposed ones on approve, the edited ones on edit; None when it does
    not run (reject, respond) or the request is no tool call."""
    if pending is None or pending.kind != "tool_approval" or pending.tool is None:
        return None
    if action_id == "approve":
        args = pending.tool.get("args")
        return dict(args) if isinstance(args, dict) else {}
    if action_id == "edit":
        return tool_args((values or {}).get("args")) or {}
    return None


def args_sha256(args: dict[str, Any] | None) -> str | None:
    """sha256 of the canonical JSON of a tool call's arguments (None: none to run)."""
    return None if args is None else sha256_hex(dict(args))


def _tool_approval_values(pending: PendingRequest, decision: Decision) -> None:
    """The values of a tool approval's action as TOOL_APPROVAL_VALUES says: an edit needs
    ``args`` (an object), a respond ``message`` (text, not blank); a reject's ``message`` is
    optional text (docs/agent.md)."""
    action, values = decision.action_id, decision.values or {}
    schema = TOOL_APPROVAL_VALUES.get(action)
    if schema is None:
        return
    for name, prop in schema["properties"].items():
        value = values.get(name)
        if prop["type"] == "object":
            usable = value is not None and tool_args(value) is not None
        else:
            usable = isinstance(value, str) and bool(value.strip() if prop.get("minLength") else True)
        if usable:
            continue
        if tool_value_required(action, name):
            example = json.dumps({"action_id": "edit", "values": {"args": (pending.tool or {}).get("args") or {}}})
            raise InvalidDecision(_TOOL_VALUE_NEEDED[(action, name)].format(example=example))
        if value is not None:
            raise InvalidDecision(f"values.{name} of a {action} must be {'text' if prop['type'] == 'string' else 'an object'}")


def deadline(pending: PendingRequest) -> datetime | None:
    """When the request's answer becomes late (None: it never does)."""
    if not pending.timeout_seconds or pending.timeout_seconds <= 0:
        return None
    return pending.paused_at + timedelta(seconds=pending.timeout_seconds)


def late_action(pending: PendingRequest) -> tuple[str, dict[str, Any] | None]:
    """What a late answer (or the deadline itself) becomes: the default decision, the fallback
    action, or ``__expired__`` (no branch runs)."""
    if pending.on_timeout == "default" and pending.default_action:
        return pending.default_action, pending.default_values
    if pending.fallback_action and pending.on_timeout in (None, "fallback"):
        return pending.fallback_action, None
    return EXPIRED_ACTION, None


def deadline_decision(pending: PendingRequest) -> Decision:
    """The decision the deadline makes by itself (``on_timeout`` fallback or default)."""
    action, values = late_action(pending)
    return Decision.model_construct(action_id=action, values=values)


def apply_decision(
    state: RunState,
    request_id: str,
    decision: Decision,
    now: datetime,
    decided_by: str | None = None,
    *,
    votes: Sequence[Vote] = (),
    timed_out: bool = False,
    values: bool = True,
) -> tuple[RunState, AppliedDecision]:
    """Apply a decision to the run's pending request (checked by :func:`check_decision` first;
    ``values`` False: the caller checked the values against this request already).
    A decision after the deadline is rerouted (:func:`late_action`). ``timed_out``: the deadline
    made it (nobody answered): it is applied as it is, with no person. Returns the new state (the
    input is not changed) and the decision as applied."""
    pending = state.pending
    if not timed_out:
        check_decision(pending, request_id, decision, waiting=state.pending_vertex is not None, values=values)
    elif pending is None or pending.request_id != request_id or state.pending_vertex is None:
        raise NotResumable(f"The run is not waiting for request {request_id!r}")
    assert pending is not None and state.pending_vertex is not None
    now = as_utc(now)
    action, values = decision.action_id, decision.values
    rerouted = timed_out
    due = deadline(pending)
    if not timed_out and due is not None and now > due:
        action, values = late_action(pending)
        values = values if action != decision.action_id else decision.values
        rerouted = True
    if action != EXPIRED_ACTION:
        values = with_defaults(pending, action, values)
    applied = AppliedDecision(
        request_id=request_id,
        requested_action=decision.action_id if not timed_out else "",
        action_id=action,
        values=values,
        decided_by=None if timed_out else decided_by,
        decided_at=now,
        rerouted=rerouted,
        timeout_seconds=pending.timeout_seconds,
        timed_out=timed_out,
        votes=list(votes),
        executed_sha256=args_sha256(executed_args(pending, action, values)),
    )
    return with_decision(state, applied), applied


def with_decision(state: RunState, applied: AppliedDecision) -> RunState:
    """The run's state once ``applied`` (a decision on its pending request, as apply_decision
    made it) is taken: the gate's vertex un-built, to be built again with the decision. The
    input is not changed."""
    assert state.pending is not None and state.pending_vertex is not None
    request_id = applied.request_id
    new = state.model_copy(deep=True)
    vid = state.pending_vertex
    new.decisions.append(applied)
    new.decision_vertex[request_id] = vid
    new.injected[vid] = request_id
    new.pending = None
    new.pending_vertex = None
    # un-build only the gated vertex
    if vid in new.built:
        new.built.remove(vid)
    new.outputs.pop(vid, None)
    new.stopped.pop(vid, None)
    return new


def decision_event(applied: AppliedDecision) -> dict[str, Any]:
    """The data of the ``human_input_decision`` event of ``applied`` (how it was sent, ``via``...,
    is added by the caller)."""
    data: dict[str, Any] = {
        "request_id": applied.request_id,
        "action_id": applied.action_id,
        "values": applied.values,
        "decided_by": applied.decided_by,
        "decided_at": applied.decided_at.isoformat(),
    }
    if applied.timed_out:
        data["timed_out"] = True
    if applied.votes:
        data["votes"] = [v.model_dump(mode="json") for v in applied.votes]
    return data


def expired_event(applied: AppliedDecision) -> dict[str, Any]:
    """The data of the ``human_input_expired`` event of a rerouted decision."""
    return {
        "request_id": applied.request_id,
        "requested_action": applied.requested_action or None,
        "rerouted_to": applied.action_id,
        "timeout_seconds": applied.timeout_seconds,
    }


def recorded_decision(pending: PendingRequest, decided: dict[str, Any], expired: dict[str, Any] | None = None
                      ) -> AppliedDecision:
    """A decision as its ``human_input_decision`` event recorded it (with its
    ``human_input_expired`` when it was rerouted): the AppliedDecision that apply_decision
    returned when it was made, for ``pending``, the request it answered."""
    timed_out = bool(decided.get("timed_out"))
    requested = (expired.get("requested_action") or "") if expired is not None else decided["action_id"]
    return AppliedDecision(
        request_id=decided["request_id"],
        requested_action="" if timed_out else requested,
        action_id=decided["action_id"],
        values=decided.get("values"),
        decided_by=decided.get("decided_by"),
        decided_at=datetime.fromisoformat(decided["decided_at"]),
        rerouted=expired is not None,
        timeout_seconds=pending.timeout_seconds,
        timed_out=timed_out,
        votes=[Vote.model_validate(v) for v in decided.get("votes") or []],
        executed_sha256=args_sha256(executed_args(pending, decided["action_id"], decided.get("values"))),
    )
