"""What every part of the in-memory store shares: the rows (dataclasses), the tables, the
helpers, and :class:`MemoryCore` (the tables, open or closed, and the lifecycle)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any, TypeVar

from signoff.engine.models import (
    ContactToken,
    DecisionLink,
    EventNote,
    JobStatus,
    Notification,
    ReceiptRecord,
    StandingApproval,
    User,
    WebhookDelivery,
)
from signoff.engine.store.base import Store, StoreError
from signoff.engine.store.encoding import ApproverRef, dumps

T = TypeVar("T")

_RUNNING = (JobStatus.queued, JobStatus.in_progress)  # what a lease, a stop request and a pause act on
_ACTIVE = (JobStatus.queued, JobStatus.in_progress, JobStatus.suspended)  # a job that is not over


def _same(stored: Any, wanted: Any) -> bool:
    """SQL's ``=``: a NULL (None) matches nothing, not even another NULL."""
    return wanted is not None and stored == wanted


def _holds(row: _Job, token: str | None) -> bool:
    """Whether ``token`` holds the job's claim: its last claim (kept once the job ended; a pause
    clears it), as SQL's ``claim_held`` reads it."""
    return row.status not in (JobStatus.queued, JobStatus.suspended) and _same(row.claim_token, token)


def _first(rows: Iterable[T], limit: int) -> list[T]:
    """SQL's ``LIMIT``; a negative limit is refused (ValueError) rather than read as "all"."""
    return list(islice(rows, limit))


def _event(event: tuple[str, dict[str, Any]] | None) -> tuple[str, str] | None:
    """An event given with a status change: its name and its data encoded (before any change)."""
    return (event[0], dumps(event[1])) if event is not None else None


@dataclass
class _Flow:
    id: str
    owner_id: str
    name: str
    spec: str
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass
class _FlowVersion:
    name: str
    spec: str
    created_at: datetime


@dataclass
class _Secret:
    ciphertext: bytes
    created_at: datetime
    updated_at: datetime


@dataclass
class _Group:
    created_at: datetime
    members: set[str] = field(default_factory=set)


@dataclass
class _Webhook:
    id: str
    owner_id: str
    url: str
    events: str  # a JSON list, as in SQL
    secret_ciphertext: bytes
    created_at: datetime


@dataclass
class _Job:
    job_id: str
    flow_id: str
    flow_version: int
    user_id: str
    session_id: str | None
    status: JobStatus
    request: str
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    lease_until: datetime | None
    result: str | None = None
    error: str | None = None
    pending: str | None = None
    pending_request_id: str | None = None
    claim_token: str | None = None
    cancel_requested_at: datetime | None = None

    @property
    def leased_and_running(self) -> bool:
        """What a lease renewal and a stop request act on (an inline run that has not ended)."""
        return self.status in _RUNNING and self.lease_until is not None


@dataclass
class _Event:
    seq: int
    event: str
    data: str
    created_at: datetime
    dedupe_key: str | None
    sha256: str | None = None  # the hash chain (engine/audit/events.py)
    prev_sha256: str | None = None


@dataclass
class _Checkpoint:
    id: str
    run_id: str
    job_id: str | None
    data: str
    created_at: datetime
    expires_at: datetime | None
    size: int = 0  # what it counts to charged_to (Store.stored_bytes)
    charged_to: str | None = None


@dataclass
class _Message:
    id: str
    session_id: str
    flow_id: str | None
    job_id: str | None
    sender: str
    sender_name: str
    text: str
    kind: str
    card: str | None  # without the stamps below, which are kept apart as in SQL and merged on read
    card_request_id: str | None
    submitted_action: str | None
    superseded: bool
    created_at: datetime
    stopped: bool = False


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    type: str
    start_time: datetime
    end_time: datetime | None
    status: str
    inputs: str
    outputs: str
    attributes: str
    run_id: str | None
    flow_id: str | None
    size: int = 0  # what it counts to charged_to (Store.stored_bytes)
    charged_to: str | None = None


@dataclass
class _Tables:
    """Everything a store holds; dicts keep insertion order, which stands in for SQL's ``pos``."""

    users: dict[str, User] = field(default_factory=dict)
    user_by_name: dict[str, str] = field(default_factory=dict)
    api_keys: dict[str, str] = field(default_factory=dict)  # key hash -> user id
    flows: dict[str, _Flow] = field(default_factory=dict)
    flow_versions: dict[tuple[str, int], _FlowVersion] = field(default_factory=dict)
    shares: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (flow, user) -> actions
    secrets: dict[tuple[str, str], _Secret] = field(default_factory=dict)  # (owner, name) -> secret
    groups: dict[tuple[str, str], _Group] = field(default_factory=dict)  # (owner, name) -> group
    # (job, request) -> reference -> parsed (user, group owner, group name), in the order given
    approvers: dict[tuple[str, str], dict[str, ApproverRef]] = field(default_factory=dict)
    participants: set[tuple[str, str]] = field(default_factory=set)  # (user, job)
    releases: dict[str, datetime] = field(default_factory=dict)  # job id -> when it was wanted
    webhooks: dict[str, _Webhook] = field(default_factory=dict)
    mutes: dict[tuple[str, str], datetime] = field(default_factory=dict)  # (user, muted) -> when
    deliveries: dict[str, WebhookDelivery] = field(default_factory=dict)  # in the order logged
    jobs: dict[str, _Job] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], str] = field(default_factory=dict)  # (user, key) -> job id
    events: dict[str, list[_Event]] = field(default_factory=dict)  # job id -> events, seq 1, 2, ...
    checkpoints: dict[str, _Checkpoint] = field(default_factory=dict)
    messages: dict[str, _Message] = field(default_factory=dict)
    spans: dict[tuple[str, str], _Span] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    blob_charges: dict[str, str] = field(default_factory=dict)  # key -> the user a run's blob counts to
    stored: dict[str, int] = field(default_factory=dict)  # user id -> bytes (Store.stored_bytes)
    links: dict[str, DecisionLink] = field(default_factory=dict)  # token hash -> link
    contact_tokens: dict[str, ContactToken] = field(default_factory=dict)  # token hash -> verification
    notifications: list[Notification] = field(default_factory=list)  # in the order logged
    standing: dict[str, StandingApproval] = field(default_factory=dict)  # rule id -> rule
    receipts: dict[str, list[ReceiptRecord]] = field(default_factory=dict)  # job id -> receipts, seq 1, 2, ...


class MemoryCore(Store):
    """The tables, open or closed, and the lifecycle; the groups of Store methods are mixed in
    (engine/store/memory/__init__.py)."""

    def __init__(self) -> None:
        self._data: _Tables | None = _Tables()
        self._tails: list[asyncio.Queue[EventNote | None]] = []

    def _tables(self) -> _Tables:
        if self._data is None:
            raise StoreError("This store is closed.")
        return self._data

    # ---- lifecycle

    async def setup(self) -> None:
        """Nothing to migrate (the tables are made with the store); checks the store is open."""
        self._tables()

    async def close(self) -> None:
        """Drop everything; the store refuses every call afterwards, as a closed SQL store does."""
        self._data = None
        for tail in self._tails:
            tail.put_nowait(None)  # wakes it: it raises, as a closed SQL store's tail

    async def ping(self) -> None:
        self._tables()

    # ---- stored bytes per user (Store.stored_bytes), changed in the same step as the write

    @staticmethod
    def _charge(t: _Tables, user_id: str | None, n: int) -> None:
        if n and user_id is not None:
            t.stored[user_id] = t.stored.get(user_id, 0) + n

    @staticmethod
    def _job_user(t: _Tables, job_id: str | None) -> str | None:
        row = t.jobs.get(job_id) if job_id is not None else None
        return row.user_id if row is not None else None

    def _charge_job(self, t: _Tables, job_id: str | None, n: int) -> None:
        self._charge(t, self._job_user(t, job_id), n)

    async def stored_bytes(self, user_id: str) -> int:
        return self._tables().stored.get(user_id, 0)
