"""The attributes of signoff's spans (the store exporter maps them back to SpanRecord fields),
values cut to a bound, and the gate span's name."""

from __future__ import annotations

import itertools
import json
from typing import Any

from opentelemetry.trace import Status, StatusCode

from signoff.engine.models import EXPIRED_ACTION, FALLBACK_ACTION, PendingRequest

from signoff.engine.tracing.ids import hex_span

GATE_PREFIX = "Human In The Loop — "
MAX_VALUE_CHARS = 2000  # each input/output value is cut to this many characters of JSON

# Attribute names (the store exporter maps them back to SpanRecord fields).
A_RUN = "signoff.run_id"
A_JOB = "signoff.job_id"
A_FLOW = "signoff.flow_id"
A_KIND = "signoff.kind"  # flow | component | gate
A_PARENT = "signoff.parent_span_id"  # the parent in signoff's own span tree (hex)
A_VERTEX = "signoff.vertex_id"
A_COMPONENT = "signoff.component_type"
A_INPUTS = "signoff.inputs"  # JSON object, values truncated
A_OUTPUTS = "signoff.outputs"


def _within(value: Any, limit: int) -> Any:
    """``value`` with every string longer than ``limit`` cut to ``limit + 1`` characters and every
    list or object to its first ``limit`` items: its JSON is the same as ``value``'s for the first
    ``limit`` characters, and longer than ``limit`` when anything was cut, so cutting it gives what
    cutting ``value``'s JSON gives, without encoding what the cut throws away (a run's output may
    be megabytes: encoding it whole on the event loop for a 2,000-character attribute was most of
    a busy API process's time, issue 28)."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit + 1]
    if isinstance(value, dict):
        items = value.items() if len(value) <= limit else itertools.islice(value.items(), limit)
        return {k: _within(v, limit) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [_within(v, limit) for v in (value if len(value) <= limit else value[:limit])]
    return value


def bounded(values: dict[str, Any] | None, limit: int = MAX_VALUE_CHARS) -> dict[str, Any]:
    """The values with each one cut to ``limit`` characters of JSON (a cut value becomes a
    string ending in '…'). Always JSON-serialisable. Only what the cut keeps is encoded."""
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        try:
            raw = json.dumps(_within(value, limit), default=str, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):  # e.g. a value that holds itself
            raw = json.dumps(str(value), ensure_ascii=False)
        if len(raw) <= limit:
            out[str(key)] = json.loads(raw)
        else:
            out[str(key)] = raw[: max(limit - 1, 0)] + "…"
    return out


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def json_attr(values: dict[str, Any] | None, limit: int) -> str:
    return json.dumps(bounded(values, limit), ensure_ascii=False)


def gate_label(pending: PendingRequest | None, action_id: str) -> str:
    """The chosen option's own label; ``Expired`` for the sentinel, ``Fallback`` for the fallback
    branch (unless an option of that id has its own label)."""
    for option in pending.options if pending is not None else []:
        if option.action_id == action_id:
            return option.label
    if action_id == EXPIRED_ACTION:
        return "Expired"
    if action_id == FALLBACK_ACTION:
        return "Fallback"
    return action_id


def gate_span_name(pending: PendingRequest | None, action_id: str) -> str:
    return GATE_PREFIX + gate_label(pending, action_id)


def base_attributes(run_id: str, job_id: str | None, flow_id: str | None, kind: str, parent: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {A_RUN: str(run_id), A_KIND: kind, A_PARENT: hex_span(parent)}
    if job_id:
        attrs[A_JOB] = str(job_id)
    if flow_id:
        attrs[A_FLOW] = str(flow_id)
    return attrs



def mark_interrupted(span: Any, exc: BaseException, limit: int) -> None:
    """A span whose work raised: error status with the exception for a failure, the
    ``signoff.cancelled`` mark for a cancellation."""
    if isinstance(exc, Exception):
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{exc.__class__.__name__}: {exc}"[:limit]))
        span.set_attribute("signoff.error.type", exc.__class__.__name__)
    else:
        span.set_attribute("signoff.cancelled", True)
