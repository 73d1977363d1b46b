"""Plain data shapes shared by every layer (engine, store, activities, workflows, API).

These are pydantic v2 models with no behaviour beyond validation, so the Temporal workflow
sandbox can pass them through and the API can build its public models from them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class JobStatus(StrEnum):
    queued = "queued"
    in_progress = "in_progress"
    suspended = "suspended"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    timed_out = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {JobStatus.completed, JobStatus.failed, JobStatus.cancelled, JobStatus.timed_out}
)

EXPIRED_ACTION = "__expired__"
FALLBACK_ACTION = "fallback"


class Option(BaseModel):
    action_id: str
    label: str


class PendingRequest(BaseModel):
    """What a paused run waits for (DESIGN §6): the pending body, the status' human_request and
    the data of the human_input_required event."""

    request_id: str
    kind: Literal["node_input", "tool_approval"] = "node_input"
    prompt: str = ""
    options: list[Option] = Field(default_factory=list)
    allowed_decisions: list[str] = Field(default_factory=list)
    timeout_seconds: float = 0  # 0 = waits forever
    fallback_action: str | None = None
    paused_at: datetime
    # tool_approval only: the tool the model asked for and its arguments
    tool: dict[str, Any] | None = None


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action_id: str = Field(min_length=1, max_length=200)
    values: dict[str, Any] | None = None


class AppliedDecision(BaseModel):
    """A decision as the engine applied it, after any timeout reroute."""

    request_id: str
    requested_action: str
    action_id: str  # after reroute
    values: dict[str, Any] | None = None
    decided_by: str | None = None
    decided_at: datetime
    rerouted: bool = False
    timeout_seconds: float = 0


# ---- stored records -------------------------------------------------------------------


class User(BaseModel):
    id: str
    name: str
    created_at: datetime


class FlowRecord(BaseModel):
    id: str
    owner_id: str
    name: str
    spec: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime


class SecretInfo(BaseModel):
    """A user's named secret as listed: its name and times, never its value."""

    owner_id: str
    name: str
    created_at: datetime
    updated_at: datetime


class SecretRecord(BaseModel):
    """A user's named secret with its value, encrypted by the caller (the store keeps opaque
    bytes). Not a SecretInfo on purpose: a record is never where a listing is expected, and
    ``ciphertext`` stays out of its repr (logs, tracebacks)."""

    owner_id: str
    name: str
    ciphertext: bytes = Field(repr=False)
    created_at: datetime
    updated_at: datetime


class NewJob(BaseModel):
    job_id: str
    flow_id: str
    flow_version: int
    user_id: str
    session_id: str | None = None
    request: dict[str, Any] = Field(default_factory=dict)  # input_value, tweaks, mode, ...
    idempotency_key: str | None = None
    status: JobStatus = JobStatus.queued
    # an inline run's lease (docs/inline.md): set at creation so no crash leaves a job unleased
    lease_until: datetime | None = None


class Job(BaseModel):
    job_id: str
    flow_id: str
    flow_version: int
    user_id: str
    session_id: str | None
    status: JobStatus
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    pending: PendingRequest | None = None
    run_id: str
    idempotency_key: str | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    @property
    def effective_session(self) -> str:
        return self.session_id or self.flow_id


class Event(BaseModel):
    job_id: str
    seq: int
    event: str
    data: dict[str, Any]
    created_at: datetime


class CheckpointRecord(BaseModel):
    id: str
    run_id: str
    job_id: str | None
    data: dict[str, Any]
    created_at: datetime
    expires_at: datetime | None = None


class Message(BaseModel):
    """One entry of a session's chat history. A gate card has kind="card" and a card dict:
    {prompt, options, request_id, submitted_action?, superseded?}."""

    id: str
    session_id: str
    flow_id: str | None = None
    job_id: str | None = None
    sender: Literal["User", "Machine"]
    sender_name: str
    text: str = ""
    kind: Literal["message", "card"] = "message"
    card: dict[str, Any] | None = None
    created_at: datetime


class SpanRecord(BaseModel):
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    type: str = "component"
    start_time: datetime
    end_time: datetime | None = None
    status: Literal["ok", "error", "unset"] = "unset"
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    attributes: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    flow_id: str | None = None
