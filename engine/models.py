"""Plain data shapes shared by every layer (engine, store, activities, workflows, API).

These are pydantic v2 models with no behaviour beyond validation, so the Temporal workflow
sandbox can pass them through and the API can build its public models from them. Over 500 lines
on purpose: the contract between the layers, data shapes only.
"""

from __future__ import annotations

from dataclasses import dataclass

from datetime import datetime, timezone
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive datetime is UTC by signoff's convention (SQLite's text, a
    timestamp without zone). The one place that rule is written: the models' datetimes are
    :data:`UTCDateTime`, the store decodes through it, the rest take them as they come."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


#: A datetime that is always timezone-aware UTC once a model holds it (a naive one is read as UTC).
UTCDateTime = Annotated[datetime, AfterValidator(as_utc)]


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
    paused_at: UTCDateTime
    # tool_approval only: the tool the model asked for and its arguments
    tool: dict[str, Any] | None = None
    # DESIGN §9 (a Human Input's params; absent, a gate behaves as before):
    # a JSON Schema for the decision's values, per action id (an action without one takes any)
    fields: dict[str, dict[str, Any]] | None = None
    # who may decide, as written in the flow (user names or ids, "group:NAME"); empty: the run's
    # owner. ``approver_refs``: the same resolved when the run paused ("user:<id>",
    # "group:<owner_id>/<name>"), escalation adds to it.
    approvers: list[str] = Field(default_factory=list)
    approver_refs: list[str] = Field(default_factory=list)
    allow_self_approval: bool = True
    required_approvals: int = 1  # distinct approvers the first action needs
    on_timeout: Literal["fallback", "default", "fail"] | None = None  # what the deadline does by itself
    default_action: str | None = None
    default_values: dict[str, Any] | None = None
    remind_every_seconds: float = 0
    escalate_after_seconds: float = 0
    escalate_to: list[str] = Field(default_factory=list)
    # the channels the request is sent on (DESIGN §14): "email", "slack"; [] none; None every
    # channel the operator configured
    notify: list[str] | None = None

    @property
    def quorum_action(self) -> str | None:
        """The action that needs ``required_approvals`` votes (the first option), or None."""
        if self.required_approvals <= 1 or not self.allowed_decisions:
            return None
        return self.options[0].action_id if self.options else self.allowed_decisions[0]

    @property
    def acts_on_timeout(self) -> bool:
        return self.on_timeout is not None and self.timeout_seconds > 0


class Vote(BaseModel):
    """One approver's vote on a request that needs several (``required_approvals``)."""

    user: str  # user id
    action_id: str
    values: dict[str, Any] | None = None
    at: UTCDateTime


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action_id: str = Field(min_length=1, max_length=200)
    values: dict[str, Any] | None = None
    # a tool approval's approve or edit may ask for a standing approval (DESIGN §17,
    # engine/standing.py): {"scope": "session"|"flow", "for": duration}; checked by check_decision
    remember: dict[str, Any] | None = None


class AppliedDecision(BaseModel):
    """A decision as the engine applied it, after any timeout reroute."""

    request_id: str
    requested_action: str
    action_id: str  # after reroute
    values: dict[str, Any] | None = None
    decided_by: str | None = None
    decided_at: UTCDateTime
    rerouted: bool = False
    timeout_seconds: float = 0
    timed_out: bool = False  # applied by the deadline itself (on_timeout), nobody answered
    votes: list[Vote] = Field(default_factory=list)  # every vote that led to it (a quorum)
    # a tool call's: sha256 of the canonical JSON of the arguments it runs with (its receipt's
    # ``executed_args``, engine/audit/receipts.py); the Agent compares before the side effect
    executed_sha256: str | None = None


# ---- stored records -------------------------------------------------------------------


class User(BaseModel):
    id: str
    name: str
    created_at: UTCDateTime
    # contacts (DESIGN §14, engine/contacts.py): where a request reaches the person
    email: str | None = None
    slack: str | None = None  # a Slack user id (U..., W...)
    # whether each contact is verified (docs/channels.md, "Verified contacts"): one a person sets
    # for themselves is pending until its confirmation link or Slack button is used; an
    # operator's (``signoff users create/set``) is verified. Changing a contact makes it pending.
    email_verified: bool = False
    slack_verified: bool = False

    def reach(self, channel: str) -> str | None:
        """The contact a request may be sent to on ``channel`` (``email``, ``slack``): set and
        verified, else None (nothing is sent to a pending contact)."""
        value = getattr(self, channel, None) if channel in ("email", "slack") else None
        return value if value and getattr(self, f"{channel}_verified", False) else None

    def contact_state(self, channel: str) -> str | None:
        """``verified``, ``pending``, or None when the contact is not set."""
        if not getattr(self, channel, None):
            return None
        return "verified" if getattr(self, f"{channel}_verified", False) else "pending"


class DecisionLink(BaseModel):
    """A one-time decision link as stored (engine/links.py): only the token's hash, bound to one
    request of one run and one approver, valid until ``expires_at``, used once (``used_at``)."""

    token_hash: str
    job_id: str
    request_id: str
    user_id: str
    channel: str
    csrf: str  # the link page's form token (random, per link: a POST must come from the page)
    created_at: UTCDateTime
    expires_at: UTCDateTime
    used_at: UTCDateTime | None = None


class ContactToken(BaseModel):
    """A contact's verification as stored (engine/verify.py): only the token's hash, bound to one
    user and the address (or Slack id) it was sent to, valid until ``expires_at``, used once.
    ``attempts``, ``delivered``, ``error``: how its sending went (the verification's delivery
    log). Rows are kept until they expire: they are also what the re-send cap counts."""

    token_hash: str
    user_id: str
    channel: str  # email, slack
    address: str
    csrf: str  # the confirmation page's form token (email)
    created_at: UTCDateTime
    expires_at: UTCDateTime
    used_at: UTCDateTime | None = None
    attempts: int = 0
    delivered: bool = False
    error: str | None = None


class StandingApproval(BaseModel):
    """A standing approval rule (DESIGN §17, engine/standing.py): later calls of ``tool`` in
    ``flow_id`` (scope ``session``: in ``session_id`` of ``session_user_id``'s runs) are approved
    by ``maker`` without asking, until ``expires_at`` or ``revoked_at``."""

    id: str
    maker_id: str
    flow_id: str
    flow_owner_id: str  # who may see and revoke it besides its maker
    tool: str
    scope: Literal["session", "flow"]
    session_id: str | None = None  # scope session: the run's session
    session_user_id: str | None = None  # scope session: whose session (the run's owner)
    job_id: str  # the run and request whose decision made it
    request_id: str
    created_at: UTCDateTime
    expires_at: UTCDateTime
    revoked_at: UTCDateTime | None = None
    uses: int = 0
    last_used_at: UTCDateTime | None = None

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and self.expires_at > now


class Notification(BaseModel):
    """One attempt to tell one person about one event of a run on one channel (a delivery log
    row, readable by the run's owner)."""

    id: str
    job_id: str
    request_id: str
    seq: int
    event: str
    channel: str
    user_id: str
    attempt: int
    delivered: bool
    error: str | None = None
    ref: str | None = None  # what the channel calls what was sent (Slack: "{channel} {ts}": its update)
    at: UTCDateTime


class FlowRecord(BaseModel):
    id: str
    owner_id: str
    name: str
    spec: dict[str, Any]
    version: int
    created_at: UTCDateTime
    updated_at: UTCDateTime


class ReceiptRecord(BaseModel):
    """A stored receipt (DESIGN §16, engine/audit/receipts.py): its place in its run's chain
    (``seq`` 1, 2, ...), what it is found by, its hash (the next one's ``prev_sha256``) and the
    receipt itself (``body``: as signed)."""

    job_id: str
    seq: int
    receipt_id: str
    flow_id: str
    at: UTCDateTime
    sha256: str
    body: dict[str, Any]


class SecretInfo(BaseModel):
    """A user's named secret as listed: its name and times, never its value."""

    owner_id: str
    name: str
    created_at: UTCDateTime
    updated_at: UTCDateTime


class SecretRecord(BaseModel):
    """A user's named secret with its value, encrypted by the caller (the store keeps opaque
    bytes). Not a SecretInfo on purpose: a record is never where a listing is expected, and
    ``ciphertext`` stays out of its repr (logs, tracebacks)."""

    owner_id: str
    name: str
    ciphertext: bytes = Field(repr=False)
    created_at: UTCDateTime
    updated_at: UTCDateTime


def effective_session(session_id: str | None, flow_id: str) -> str:
    """A run's session for its chat history and supersede: its own, else its flow's id."""
    return session_id or flow_id


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
    lease_until: UTCDateTime | None = None

    @property
    def effective_session(self) -> str:
        return effective_session(self.session_id, self.flow_id)


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
    created_at: UTCDateTime
    updated_at: UTCDateTime
    finished_at: UTCDateTime | None = None

    @property
    def effective_session(self) -> str:
        return effective_session(self.session_id, self.flow_id)

    def waits_for(self, request_id: str) -> bool:
        """Whether the job waits for the request ``request_id``: ``suspended`` with that request
        pending. A job under a decision's claim (``in_progress``, its request still set) or at
        another request does not; the store's conditional writes check the same
        (``Store.append_event_if_waiting``)."""
        return self.status == JobStatus.suspended and self.pending is not None \
            and self.pending.request_id == request_id


class Event(BaseModel):
    job_id: str
    seq: int
    event: str
    data: dict[str, Any]
    created_at: UTCDateTime
    # the run's hash chain (engine/audit/events.py): this event's hash, and its predecessor's;
    # None for an event written before the chain (migration 14)
    sha256: str | None = None
    prev_sha256: str | None = None


# The dedupe keys of a decision's events are "{claim token}:{key}" (Store.claim_decision)
DECISION_KEYS = ("decision", "expired")


@dataclass(frozen=True)
class DecisionClaim:
    """What :meth:`Store.claim_decision` found: whether the claim is the caller's (``won``: taken
    now, or still held by the same token), the job afterwards, and the events an earlier attempt
    wrote under that token (by the suffix of their dedupe key ``{token}:{suffix}``, one of
    DECISION_KEYS): when ``recorded["decision"]`` is there, that attempt applied its decision."""

    won: bool
    job: Job | None
    recorded: dict[str, Event]


@dataclass(frozen=True, slots=True)
class PendingAges:
    """How long the requests of one flow have been waiting, as :meth:`Store.pending_ages` counts
    them at one instant: ``count`` waiting, ``within[i]`` of them for at most ``bounds[i]``
    seconds (the bounds the caller gave), since ``oldest`` the longest waiting one, ``seconds``
    their ages added up."""

    flow_id: str
    count: int
    within: tuple[int, ...]
    oldest: datetime | None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """One request of a person's inbox as :meth:`Store.inbox_entries` lists it: what the inbox's
    live stream sorts, filters and compares by, without the job's JSON (read when a row is drawn)."""

    job_id: str
    request_id: str
    paused_at: datetime
    flow_id: str
    session_id: str | None
    kind: str


@dataclass(frozen=True, slots=True)
class EventNote:
    """That an event was appended, as the store's tail tells it (:meth:`Store.tail_events`):
    where to read, not what was written (the log stays per job, read with ``read_events``)."""

    job_id: str
    seq: int
    event: str


class CheckpointRecord(BaseModel):
    id: str
    run_id: str
    job_id: str | None
    data: dict[str, Any]
    created_at: UTCDateTime
    expires_at: UTCDateTime | None = None


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
    created_at: UTCDateTime


class SpanRecord(BaseModel):
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    type: str = "component"
    start_time: UTCDateTime
    end_time: UTCDateTime | None = None
    status: Literal["ok", "error", "unset"] = "unset"
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    attributes: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    flow_id: str | None = None


class Group(BaseModel):
    """A user's group of approvers (DESIGN §9). It belongs to its owner, and its name is unique
    per owner: a flow's ``"group:finance"`` means its owner's group "finance", so nobody can
    squat another user's group name. ``members``: user ids, sorted."""

    owner_id: str
    name: str
    members: list[str] = Field(default_factory=list)
    created_at: UTCDateTime


class Webhook(BaseModel):
    """A user's endpoint that receives the human_input_* events of their runs, as listed: never
    its secret."""

    id: str
    owner_id: str
    url: str
    events: list[str]  # event names; "*" for every one
    created_at: UTCDateTime


class WebhookRecord(BaseModel):
    """A webhook with its signing secret, encrypted by the caller (the store keeps opaque bytes).
    Not a Webhook on purpose (a record is never where a listing is expected), and
    ``secret_ciphertext`` stays out of its repr (logs, tracebacks)."""

    id: str
    owner_id: str
    url: str
    events: list[str]
    secret_ciphertext: bytes = Field(repr=False)
    created_at: UTCDateTime


@dataclass(frozen=True)
class DeliveryAttempt:
    """One attempt to deliver one event to a webhook, to be logged (Store.log_deliveries)."""

    webhook_id: str
    event: str
    job_id: str
    seq: int
    attempt: int
    status_code: int | None
    error: str | None
    delivered: bool


class WebhookDelivery(BaseModel):
    """One attempt to deliver one event to a webhook."""

    id: str
    webhook_id: str
    event: str
    job_id: str
    seq: int
    attempt: int
    status_code: int | None = None
    error: str | None = None
    delivered: bool
    at: UTCDateTime
