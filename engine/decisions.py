"""Every rule about a decision, in one place (DESIGN §1, §5, §9).

:func:`check_decision` is the one check a decision passes before anything is claimed or
written, whoever sends it: the service before it asks Temporal, the workflow's ``resume``
Update validator and Signal handler, and :func:`apply_decision` itself (the in-process runner
and the activities). It raises, in this order:

- :class:`InvalidDecision` (422) for an action outside the request's ``allowed_decisions``, or
  values the request kind cannot take (a tool approval's edit without ``args``...);
- :class:`NotResumable` (409) when the run does not wait for this request (no pending
  request, a claim in flight, or a stale ``request_id``).

:func:`apply_decision` turns a checked decision into the run's next state: a late answer is
rerouted to the fallback action, or to ``__expired__`` (no branch runs), and only the gated
vertex becomes buildable again, with the decision injected.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from signoff.engine.errors import InvalidDecision, NotResumable
from signoff.engine.models import EXPIRED_ACTION, AppliedDecision, Decision, PendingRequest
from signoff.engine.state import RunState


def check_decision(pending: PendingRequest | None, request_id: str, decision: Decision, *,
                   waiting: bool = True) -> None:
    """Raise InvalidDecision or NotResumable when ``decision`` cannot answer ``request_id`` of a
    run whose pending request is ``pending``. ``waiting`` is False while the run cannot take a
    decision even though it has a pending request (a claim is being applied)."""
    if pending is not None:
        if decision.action_id not in pending.allowed_decisions:
            raise InvalidDecision(
                f"action_id {decision.action_id!r} is not one of the allowed decisions: "
                f"{', '.join(pending.allowed_decisions)}",
                allowed_decisions=list(pending.allowed_decisions),
            )
        _check_values(pending, decision)
    if pending is None or not waiting or pending.request_id != request_id:
        raise NotResumable(
            f"The run is not waiting for request {request_id!r}"
            + (f" (it waits for {pending.request_id!r})" if pending is not None and pending.request_id != request_id
               else "")
        )


def _check_values(pending: PendingRequest, decision: Decision) -> None:
    if pending.kind == "tool_approval":
        _tool_approval_values(pending, decision)


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


def _tool_approval_values(pending: PendingRequest, decision: Decision) -> None:
    """An edit needs ``values.args`` (an object), a respond needs ``values.message``; a reject's
    ``values.message`` is optional text (docs/agent.md)."""
    values = decision.values or {}
    if decision.action_id == "edit" and tool_args(values.get("args")) is None:
        raise InvalidDecision(
            "An edit needs values.args: the tool's arguments as an object, e.g. "
            + json.dumps({"action_id": "edit", "values": {"args": (pending.tool or {}).get("args") or {}}})
        )
    if decision.action_id == "respond":
        msg = values.get("message")
        if not isinstance(msg, str) or not msg.strip():
            raise InvalidDecision("A respond needs values.message: the text the model gets as the tool's answer")
    if decision.action_id == "reject" and values.get("message") is not None and not isinstance(values.get("message"), str):
        raise InvalidDecision("values.message of a reject must be text")


def apply_decision(
    state: RunState,
    request_id: str,
    decision: Decision,
    now: datetime,
    decided_by: str | None = None,
) -> tuple[RunState, AppliedDecision]:
    """Apply a person's decision to the run's pending request (checked by
    :func:`check_decision` first). A decision after ``paused_at + timeout_seconds`` is rerouted
    to the fallback action, or to ``__expired__``. Returns the new state (the input is not
    changed) and the decision as applied."""
    pending = state.pending
    check_decision(pending, request_id, decision, waiting=state.pending_vertex is not None)
    assert pending is not None and state.pending_vertex is not None
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    action = decision.action_id
    rerouted = False
    if pending.timeout_seconds and pending.timeout_seconds > 0:
        if now > pending.paused_at + timedelta(seconds=pending.timeout_seconds):
            action = pending.fallback_action or EXPIRED_ACTION
            rerouted = True
    applied = AppliedDecision(
        request_id=request_id,
        requested_action=decision.action_id,
        action_id=action,
        values=decision.values,
        decided_by=decided_by,
        decided_at=now,
        rerouted=rerouted,
        timeout_seconds=pending.timeout_seconds,
    )
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
    return new, applied
