"""The in-memory store: every :class:`~engine.store.base.Store` method, with the semantics of the
SQL backends, inside one process. ``open_store("memory://")`` makes a new, empty one.

It is the reference implementation of the contract (tests/store_conformance.py runs the same
tests on it, SQLite and PostgreSQL), the store of ``signoff run`` and of the unit tests. It is
not durable and not shared: the API and the worker, which are separate processes, need SQLite
or PostgreSQL.

Why it needs no lock: no method awaits anything, so on the event loop's one thread each runs
from its first statement to its last without another coroutine in between, the way a
transaction does. That is what makes a claim single-winner here. Each method also raises
every error it can (a value that is not JSON, an event without a name) before its first
change, so it changes everything it should or nothing: a status and its event are written
together or not at all. It is not thread-safe.

Values are kept the way the SQL backends keep them (engine/store/encoding.py): JSON documents
as text (a copy: the caller's later changes do not reach the store, key order is kept,
datetimes are serialised, NaN is refused), timestamps as aware UTC, API keys only hashed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any, TypeVar

from signoff.engine.models import (
    TERMINAL_STATUSES,
    CheckpointRecord,
    DECISION_KEYS,
    DecisionClaim,
    Event,
    EventNote,
    FlowRecord,
    Group,
    Job,
    JobStatus,
    Message,
    NewJob,
    PendingRequest,
    SecretInfo,
    SecretRecord,
    SpanRecord,
    User,
    Webhook,
    WebhookDelivery,
    WebhookRecord,
    utcnow,
)
from signoff.engine.store.base import Store, StoreConflict, StoreError
from signoff.engine.store.encoding import (
    ApproverRef,
    approver_ref,
    as_utc,
    ciphertext_bytes,
    dumps,
    hash_api_key,
    unique_strings,
)

__all__ = ["MemoryStore"]

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


@dataclass
class _Checkpoint:
    id: str
    run_id: str
    job_id: str | None
    data: str
    created_at: datetime
    expires_at: datetime | None


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
    deliveries: dict[str, WebhookDelivery] = field(default_factory=dict)  # in the order logged
    jobs: dict[str, _Job] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], str] = field(default_factory=dict)  # (user, key) -> job id
    events: dict[str, list[_Event]] = field(default_factory=dict)  # job id -> events, seq 1, 2, ...
    checkpoints: dict[str, _Checkpoint] = field(default_factory=dict)
    messages: dict[str, _Message] = field(default_factory=dict)
    spans: dict[tuple[str, str], _Span] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)


class MemoryStore(Store):
    """The whole Store in Python dicts, for one process (see the module docstring)."""

    def __init__(self) -> None:
        self._data: _Tables | None = _Tables()
        self._tails: list[asyncio.Queue[EventNote | None]] = []

    def __repr__(self) -> str:
        return "MemoryStore()"

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

    # ---- users and keys

    @staticmethod
    def _new_user(t: _Tables, name: str) -> User:
        user = User(id=str(uuid.uuid4()), name=name, created_at=utcnow())
        t.users[user.id], t.user_by_name[name] = user, user.id
        return user

    async def create_user(self, name: str) -> User:
        t = self._tables()
        if name in t.user_by_name:
            raise StoreConflict(f"A user named {name!r} already exists.")
        return self._new_user(t, name).model_copy()

    async def get_or_create_user(self, name: str) -> User:
        t = self._tables()
        user_id = t.user_by_name.get(name)
        return (t.users[user_id] if user_id is not None else self._new_user(t, name)).model_copy()

    async def get_user(self, user_id: str) -> User | None:
        user = self._tables().users.get(user_id)
        return user.model_copy() if user is not None else None

    async def get_user_by_name(self, name: str) -> User | None:
        t = self._tables()
        user_id = t.user_by_name.get(name)
        return t.users[user_id].model_copy() if user_id is not None else None

    async def list_users(self, *, limit: int = 1000) -> list[User]:
        return [u.model_copy() for u in sorted(self._tables().users.values(), key=lambda u: u.name)[:limit]]

    async def create_api_key(self, user_id: str, key: str | None = None) -> str:
        """Registering the same key for its own user again is harmless; for another, a conflict."""
        key = key or "sk-" + secrets.token_urlsafe(32)
        key_hash = hash_api_key(key)
        t = self._tables()
        owner = t.api_keys.setdefault(key_hash, user_id)
        if owner != user_id:
            raise StoreConflict("That API key already belongs to another user.")
        return key

    async def user_for_api_key(self, key: str) -> User | None:
        t = self._tables()
        user_id = t.api_keys.get(hash_api_key(key))
        user = t.users.get(user_id) if user_id is not None else None
        return user.model_copy() if user is not None else None

    async def revoke_api_key(self, key: str) -> bool:
        return self._tables().api_keys.pop(hash_api_key(key), None) is not None

    @staticmethod
    def _revoke_keys(t: _Tables, user_id: str) -> int:
        doomed = [k for k, owner in t.api_keys.items() if owner == user_id]
        for key_hash in doomed:
            del t.api_keys[key_hash]
        return len(doomed)

    async def revoke_api_keys(self, user_id: str) -> int:
        return self._revoke_keys(self._tables(), user_id)

    async def delete_user(self, user_id: str) -> bool:
        """See Store.delete_user: the user, keys, shares to them and of their flows, secrets."""
        t = self._tables()
        user = t.users.pop(user_id, None)
        if user is not None:
            del t.user_by_name[user.name]
        self._revoke_keys(t, user_id)
        owned = {f.id for f in t.flows.values() if f.owner_id == user_id}
        for share in [k for k in t.shares if k[1] == user_id or k[0] in owned]:
            del t.shares[share]
        for secret in [k for k in t.secrets if k[0] == user_id]:
            del t.secrets[secret]
        for group in t.groups.values():
            group.members.discard(user_id)
        for key in [k for k in t.groups if k[0] == user_id]:
            del t.groups[key]
        for hook in [h.id for h in t.webhooks.values() if h.owner_id == user_id]:
            self._delete_webhook(t, hook)
        t.participants = {p for p in t.participants if p[0] != user_id}
        return user is not None

    # ---- groups of approvers: (owner, name) is the key

    @staticmethod
    def _group(owner_id: str, name: str, row: _Group) -> Group:
        return Group(owner_id=owner_id, name=name, members=sorted(row.members), created_at=row.created_at)

    async def create_group(self, owner_id: str, name: str) -> Group:
        t = self._tables()
        if (owner_id, name) in t.groups:
            raise StoreConflict(f"You already have a group named {name!r}.")
        row = t.groups[(owner_id, name)] = _Group(utcnow())
        return self._group(owner_id, name, row)

    async def get_group(self, owner_id: str, name: str) -> Group | None:
        row = self._tables().groups.get((owner_id, name))
        return self._group(owner_id, name, row) if row is not None else None

    async def list_groups(self, owner_id: str) -> list[Group]:
        """By name, in code-point order (as the SQL backends sort them)."""
        mine = sorted((k[1], row) for k, row in self._tables().groups.items() if k[0] == owner_id)
        return [self._group(owner_id, name, row) for name, row in mine]

    async def add_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        ids = unique_strings(user_ids, "user_ids")
        row = self._tables().groups.get((owner_id, name))
        if row is None:
            return None
        row.members.update(ids)
        return self._group(owner_id, name, row)

    async def remove_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        ids = unique_strings(user_ids, "user_ids")
        row = self._tables().groups.get((owner_id, name))
        if row is None:
            return None
        row.members.difference_update(ids)
        return self._group(owner_id, name, row)

    async def delete_group(self, owner_id: str, name: str) -> bool:
        return self._tables().groups.pop((owner_id, name), None) is not None

    async def groups_of(self, user_id: str) -> list[tuple[str, str]]:
        return sorted(k for k, row in self._tables().groups.items() if user_id in row.members)

    # ---- webhooks (the secret as opaque bytes: encrypted by the caller)

    @staticmethod
    def _webhook(row: _Webhook) -> Webhook:
        return Webhook(id=row.id, owner_id=row.owner_id, url=row.url, events=json.loads(row.events),
                       created_at=row.created_at)

    @staticmethod
    def _webhook_record(row: _Webhook) -> WebhookRecord:
        return WebhookRecord(id=row.id, owner_id=row.owner_id, url=row.url, events=json.loads(row.events),
                             secret_ciphertext=row.secret_ciphertext, created_at=row.created_at)

    @staticmethod
    def _delete_webhook(t: _Tables, webhook_id: str) -> None:
        del t.webhooks[webhook_id]
        for delivery in [d.id for d in t.deliveries.values() if d.webhook_id == webhook_id]:
            del t.deliveries[delivery]

    def _hooks(self, keep: Callable[[_Webhook], bool]) -> list[_Webhook]:
        """Oldest first (created_at, then id), as the SQL backends list them."""
        return sorted((h for h in self._tables().webhooks.values() if keep(h)), key=lambda h: (h.created_at, h.id))

    async def create_webhook(self, owner_id: str, url: str, events: Iterable[str], secret_ciphertext: bytes) -> Webhook:
        names = dumps(unique_strings(events, "events"))
        secret = ciphertext_bytes(secret_ciphertext)
        t = self._tables()
        row = _Webhook(str(uuid.uuid4()), owner_id, url, names, secret, utcnow())
        t.webhooks[row.id] = row
        return self._webhook(row)

    async def list_webhooks(self, owner_id: str) -> list[Webhook]:
        return [self._webhook(h) for h in self._hooks(lambda h: h.owner_id == owner_id)]

    async def get_webhook(self, webhook_id: str) -> WebhookRecord | None:
        row = self._tables().webhooks.get(webhook_id)
        return self._webhook_record(row) if row is not None else None

    async def delete_webhook(self, owner_id: str, webhook_id: str) -> bool:
        t = self._tables()
        row = t.webhooks.get(webhook_id)
        if row is None or row.owner_id != owner_id:
            return False
        self._delete_webhook(t, webhook_id)
        return True

    async def webhooks_for(self, owner_ids: Iterable[str], event: str) -> list[WebhookRecord]:
        owners = set(unique_strings(owner_ids, "owner_ids"))
        hooks = [self._webhook_record(h) for h in self._hooks(lambda h: h.owner_id in owners)]
        return [h for h in hooks if event in h.events or "*" in h.events]

    async def log_delivery(
        self,
        webhook_id: str,
        *,
        event: str,
        job_id: str,
        seq: int,
        attempt: int,
        status_code: int | None,
        error: str | None,
        delivered: bool,
    ) -> WebhookDelivery:
        delivery = WebhookDelivery(
            id=str(uuid.uuid4()), webhook_id=webhook_id, event=event, job_id=job_id, seq=int(seq),
            attempt=int(attempt), status_code=int(status_code) if status_code is not None else None,
            error=error, delivered=bool(delivered), at=utcnow(),
        )
        self._tables().deliveries[delivery.id] = delivery
        return delivery.model_copy()

    async def list_deliveries(self, webhook_id: str, *, limit: int = 100) -> list[WebhookDelivery]:
        """Newest first: the reverse of the order they were logged."""
        mine = (d for d in reversed(self._tables().deliveries.values()) if d.webhook_id == webhook_id)
        return [d.model_copy() for d in _first(mine, limit)]

    # ---- secrets (opaque bytes: encrypted by the caller)

    @staticmethod
    def _secret(owner_id: str, name: str, row: _Secret) -> SecretRecord:
        return SecretRecord(
            owner_id=owner_id, name=name, ciphertext=row.ciphertext, created_at=row.created_at, updated_at=row.updated_at
        )

    async def put_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """Create or replace; a replace keeps created_at (see Store.put_secret)."""
        data = ciphertext_bytes(ciphertext)
        now = utcnow()
        t = self._tables()
        row = t.secrets.get((owner_id, name))
        if row is None:
            row = t.secrets[(owner_id, name)] = _Secret(data, now, now)
        else:
            row.ciphertext, row.updated_at = data, now
        return self._secret(owner_id, name, row)

    async def get_secret(self, owner_id: str, name: str) -> SecretRecord | None:
        row = self._tables().secrets.get((owner_id, name))
        return self._secret(owner_id, name, row) if row is not None else None

    async def list_secrets(self, owner_id: str) -> list[SecretInfo]:
        """Names and times only, by name (code-point order, as the SQL backends sort them)."""
        mine = sorted((k[1], row) for k, row in self._tables().secrets.items() if k[0] == owner_id)
        return [
            SecretInfo(owner_id=owner_id, name=name, created_at=row.created_at, updated_at=row.updated_at)
            for name, row in mine
        ]

    async def delete_secret(self, owner_id: str, name: str) -> bool:
        return self._tables().secrets.pop((owner_id, name), None) is not None

    # ---- flows and shares

    @staticmethod
    def _flow(row: _Flow) -> FlowRecord:
        return FlowRecord(
            id=row.id,
            owner_id=row.owner_id,
            name=row.name,
            spec=json.loads(row.spec),
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    async def save_flow(
        self, owner_id: str, name: str, spec: dict[str, Any], *, flow_id: str | None = None
    ) -> FlowRecord:
        """A new flow, or (same id) its next version; the owner never changes."""
        flow_id = flow_id or str(uuid.uuid4())
        body = dumps(spec)
        now = utcnow()
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            row = t.flows[flow_id] = _Flow(flow_id, owner_id, name, body, 1, now, now)
        else:
            row.name, row.spec, row.version, row.updated_at = name, body, row.version + 1, now
        t.flow_versions[(flow_id, row.version)] = _FlowVersion(name, body, now)
        return self._flow(row)

    async def get_flow(self, flow_id: str, *, version: int | None = None) -> FlowRecord | None:
        """The flow (its latest version, or ``version`` when given: the spec a job ran)."""
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            return None
        if version is None:
            return self._flow(row)
        kept = t.flow_versions.get((flow_id, version))
        if kept is None:
            return None
        return FlowRecord(
            id=row.id,
            owner_id=row.owner_id,
            name=kept.name,
            spec=json.loads(kept.spec),
            version=version,
            created_at=row.created_at,
            updated_at=kept.created_at,
        )

    async def list_flows(self, user_id: str) -> list[FlowRecord]:
        t = self._tables()
        mine = [r for r in t.flows.values() if r.owner_id == user_id or (r.id, user_id) in t.shares]
        return [self._flow(r) for r in sorted(mine, key=lambda r: (r.created_at, r.id))]

    async def delete_flow(self, flow_id: str) -> bool:
        """The flow with its versions and shares."""
        t = self._tables()
        for version in [k for k in t.flow_versions if k[0] == flow_id]:
            del t.flow_versions[version]
        for share in [k for k in t.shares if k[0] == flow_id]:
            del t.shares[share]
        return t.flows.pop(flow_id, None) is not None

    async def grant_share(self, flow_id: str, user_id: str, actions: Iterable[str]) -> None:
        """Add ``actions`` to what the user may do with the flow (earlier grants are kept)."""
        wanted = {str(a) for a in actions}
        self._tables().shares.setdefault((flow_id, user_id), set()).update(wanted)

    async def revoke_share(self, flow_id: str, user_id: str) -> bool:
        return self._tables().shares.pop((flow_id, user_id), None) is not None

    async def has_permission(self, flow_id: str, user_id: str, action: str = "execute") -> bool:
        t = self._tables()
        row = t.flows.get(flow_id)
        if row is None:
            return False
        return row.owner_id == user_id or action in t.shares.get((flow_id, user_id), ())

    # ---- jobs

    @staticmethod
    def _job(row: _Job) -> Job:
        return Job(
            job_id=row.job_id,
            flow_id=row.flow_id,
            flow_version=row.flow_version,
            user_id=row.user_id,
            session_id=row.session_id,
            status=row.status,
            request=json.loads(row.request),
            result=json.loads(row.result) if row.result is not None else None,
            error=json.loads(row.error) if row.error is not None else None,
            pending=PendingRequest.model_validate(json.loads(row.pending)) if row.pending is not None else None,
            run_id=row.job_id,  # run_id = job_id (DESIGN §1.5)
            idempotency_key=row.idempotency_key,
            created_at=row.created_at,
            updated_at=row.updated_at,
            finished_at=row.finished_at,
        )

    async def create_job(self, job: NewJob) -> tuple[Job, bool]:
        """See Store.create_job: the idempotency key first, then the same job submitted again."""
        status = JobStatus(job.status)
        request = dumps(job.request)
        now = utcnow()
        t = self._tables()
        keyed = t.idempotency.get((job.user_id, job.idempotency_key)) if job.idempotency_key is not None else None
        if keyed is None and job.job_id not in t.jobs:
            row = t.jobs[job.job_id] = _Job(
                job_id=job.job_id,
                flow_id=job.flow_id,
                flow_version=job.flow_version,
                user_id=job.user_id,
                session_id=job.session_id,
                status=status,
                request=request,
                idempotency_key=job.idempotency_key,
                created_at=now,
                updated_at=now,
                finished_at=now if status.terminal else None,
                lease_until=as_utc(job.lease_until) if job.lease_until is not None else None,
            )
            if job.idempotency_key is not None:
                t.idempotency[(job.user_id, job.idempotency_key)] = job.job_id
            return self._job(row), True
        if keyed is not None:
            return self._job(t.jobs[keyed]), False
        row = t.jobs[job.job_id]
        if row.user_id == job.user_id and row.flow_id == job.flow_id:
            return self._job(row), False  # the same job submitted again (e.g. an activity retry)
        raise StoreConflict(f"A different job with id {job.job_id!r} already exists.")

    async def get_job(self, job_id: str) -> Job | None:
        row = self._tables().jobs.get(job_id)
        return self._job(row) if row is not None else None

    async def set_status(
        self,
        job_id: str,
        status: JobStatus,
        *,
        expect: Iterable[JobStatus] | None = None,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        event: tuple[str, dict[str, Any]] | None = None,
    ) -> bool:
        """See Store.set_status. A terminal status also clears the pending request and sets
        finished_at; the claim token stays (it records which resume claim led to the end)."""
        status = JobStatus(status)
        allowed = {JobStatus(s) for s in expect} if expect is not None else set(JobStatus)
        allowed -= TERMINAL_STATUSES
        if not allowed:
            return False
        result_body = dumps(result) if result is not None else None
        error_body = dumps(error) if error is not None else None
        ev = _event(event)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is None or row.status not in allowed:
            return False
        if ev is not None:
            self._append(t, job_id, *ev, None)  # first: it refuses a nameless event before any change
        now = utcnow()
        row.status, row.updated_at = status, now
        if result_body is not None:
            row.result = result_body
        if error_body is not None:
            row.error = error_body
        if status.terminal:
            row.finished_at, row.pending, row.pending_request_id = now, None, None
            self._drop_approvers(t, job_id)
        return True

    # ---- inline runs: lease, stop request, sweep (docs/inline.md)

    async def renew_lease(self, job_id: str, until: datetime) -> str:
        row = self._tables().jobs.get(job_id)
        if row is None or not row.leased_and_running:
            return "ended"
        row.lease_until = as_utc(until)
        return "cancel_requested" if row.cancel_requested_at is not None else "running"

    async def request_cancel(self, job_id: str) -> bool:
        row = self._tables().jobs.get(job_id)
        if row is None or not row.leased_and_running:
            return False
        row.cancel_requested_at = utcnow()
        return True

    async def fail_expired_leases(
        self, now: datetime, error: dict[str, Any], *, event: str = "run_failed", limit: int = 100
    ) -> list[str]:
        """See Store.fail_expired_leases: the longest-expired first, each with its event."""
        now = as_utc(now)
        body = dumps(error)
        data = dumps({"error": error.get("error"), "type": error.get("type"), "vertex_id": error.get("vertex_id")})
        t = self._tables()
        expired = [
            (r.lease_until, r)
            for r in t.jobs.values()
            if r.status in _RUNNING and r.lease_until is not None and r.lease_until < now
        ]
        expired.sort(key=lambda pair: pair[0])
        ended = [r for _, r in _first(expired, limit)]
        for row in ended:
            self._append(t, row.job_id, event, data, None)
            stamp = utcnow()
            row.status, row.error, row.updated_at, row.finished_at = JobStatus.failed, body, stamp, stamp
            row.pending, row.pending_request_id = None, None
            self._drop_approvers(t, row.job_id)
        return [r.job_id for r in ended]

    async def list_unstarted(self, before: datetime, *, limit: int = 100) -> list[Job]:
        before = as_utc(before)
        t = self._tables()
        waiting = sorted(
            (r for r in t.jobs.values() if r.status == JobStatus.queued and r.lease_until is None and r.created_at < before),
            key=lambda r: r.created_at,
        )
        return [self._job(r) for r in _first(waiting, limit)]

    async def mark_suspended(
        self,
        job_id: str,
        pending: PendingRequest,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
        dedupe_key: str | None = None,
    ) -> bool:
        """``queued|in_progress → suspended`` with the pending request (any stale claim dropped);
        ``event`` appended with it, unless ``dedupe_key`` was used (see Store.mark_suspended)."""
        body = dumps(pending.model_dump(mode="json"))
        ev = _event(event)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is None or row.status not in _RUNNING:
            return False
        if ev is not None:
            self._append(t, job_id, *ev, dedupe_key)
        row.status, row.pending, row.pending_request_id = JobStatus.suspended, body, pending.request_id
        row.claim_token, row.updated_at = None, utcnow()
        return True

    async def claim_suspended_for_resume(self, job_id: str, request_id: str, token: str | None = None) -> str | None:
        """See Store.claim_suspended_for_resume: the single winner, or the same caller again
        (same ``token``) while its claim is still the job's last one."""
        fresh = token or uuid.uuid4().hex
        row = self._tables().jobs.get(job_id)
        if row is None:
            return None
        if row.status == JobStatus.suspended and _same(row.pending_request_id, request_id):
            row.status, row.claim_token, row.updated_at = JobStatus.in_progress, fresh, utcnow()
            return fresh
        return fresh if token and _holds(row, token) else None

    async def claim_decision(self, job_id: str, request_id: str, token: str, *, claim: bool = True) -> DecisionClaim:
        if not token:
            raise StoreError("A decision's claim token is a non-empty string.")
        t = self._tables()
        row = t.jobs.get(job_id)
        if claim:
            won = await self.claim_suspended_for_resume(job_id, request_id, token=token) is not None
        else:
            won = row is not None and _holds(row, token)
        keys = {f"{token}:{k}": k for k in DECISION_KEYS}
        recorded = {keys[e.dedupe_key]: Event(job_id=job_id, seq=e.seq, event=e.event, data=json.loads(e.data),
                                              created_at=e.created_at)
                    for e in t.events.get(job_id, ()) if e.dedupe_key in keys}
        return DecisionClaim(won=won, job=self._job(row) if row is not None else None, recorded=recorded)

    async def rollback_resume_claim(self, job_id: str, claim_token: str) -> bool:
        row = self._tables().jobs.get(job_id)
        if (row is None or row.status != JobStatus.in_progress or not _same(row.claim_token, claim_token)
                or row.pending_request_id is None):  # a recorded decision cleared the request: never undone
            return False
        row.status, row.claim_token, row.updated_at = JobStatus.suspended, None, utcnow()
        return True

    async def claim_suspended_for_cancel(self, job_id: str, *, event: tuple[str, dict[str, Any]] | None = None) -> bool:
        ev = _event(event)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is None or row.status != JobStatus.suspended:
            return False
        if ev is not None:
            self._append(t, job_id, *ev, None)
        now = utcnow()
        row.status, row.pending, row.pending_request_id, row.claim_token = JobStatus.cancelled, None, None, None
        row.updated_at, row.finished_at = now, now
        self._drop_approvers(t, job_id)
        return True

    async def clear_pending(self, job_id: str) -> None:
        row = self._tables().jobs.get(job_id)
        if row is not None:
            row.pending, row.pending_request_id, row.updated_at = None, None, utcnow()

    async def find_suspended(self, flow_id: str, user_id: str, effective_session: str) -> list[Job]:
        found = [
            r
            for r in self._tables().jobs.values()
            if r.flow_id == flow_id
            and r.user_id == user_id
            and r.status == JobStatus.suspended
            and _same(r.session_id if r.session_id is not None else r.flow_id, effective_session)
        ]
        return [self._job(r) for r in sorted(found, key=lambda r: (r.created_at, r.job_id))]

    async def list_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """The user's own suspended jobs that wait for a decision, oldest first."""
        found = [
            r
            for r in self._tables().jobs.values()
            if r.user_id == user_id
            and r.status == JobStatus.suspended
            and r.pending is not None
            and (flow_id is None or r.flow_id == flow_id)
        ]
        return [self._job(r) for r in sorted(found, key=lambda r: (r.created_at, r.job_id))]

    # ---- who may decide a pending request: approver references

    @staticmethod
    def _drop_approvers(t: _Tables, job_id: str) -> None:
        """An ended job waits for nobody: its references go with its terminal status."""
        for key in [k for k in t.approvers if k[0] == job_id]:
            del t.approvers[key]

    @staticmethod
    def _parse_refs(refs: Iterable[str]) -> dict[str, ApproverRef]:
        return {ref: approver_ref(ref) for ref in unique_strings(refs, "refs")}

    async def set_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> None:
        parsed = self._parse_refs(refs)
        t = self._tables()
        if parsed:
            t.approvers[(job_id, request_id)] = parsed
        else:
            t.approvers.pop((job_id, request_id), None)

    async def add_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> list[str]:
        parsed = self._parse_refs(refs)
        t = self._tables()
        kept = t.approvers.get((job_id, request_id), {})
        kept = {**kept, **{r: p for r, p in parsed.items() if r not in kept}}
        if kept:
            t.approvers[(job_id, request_id)] = kept
        return list(kept)

    async def request_approvers(self, job_id: str, request_id: str) -> list[str]:
        return list(self._tables().approvers.get((job_id, request_id), ()))

    async def add_participants(self, job_id: str, user_ids: Iterable[str]) -> None:
        ids = unique_strings(user_ids, "user_ids")
        self._tables().participants.update((u, job_id) for u in ids)

    async def participated_jobs(self, user_id: str, *, limit: int = 200) -> list[Job]:
        t = self._tables()
        rows = [t.jobs[j] for u, j in t.participants if u == user_id and j in t.jobs]
        rows.sort(key=lambda r: (r.created_at, r.job_id), reverse=True)
        return [self._job(r) for r in rows[:limit]]

    async def took_part(self, job_id: str, user_id: str) -> bool:
        return (user_id, job_id) in self._tables().participants

    async def list_assigned_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """See Store.list_assigned_pending: memberships read now, the job's current request only."""
        t = self._tables()
        groups = {k for k, row in t.groups.items() if user_id in row.members}

        def names_user(ref: ApproverRef) -> bool:
            user, owner, name = ref
            return user == user_id if user is not None else (owner, name) in groups

        found = [
            r
            for r in t.jobs.values()
            if r.status == JobStatus.suspended
            and r.pending_request_id is not None
            and (flow_id is None or r.flow_id == flow_id)
            and any(names_user(p) for p in t.approvers.get((r.job_id, r.pending_request_id), {}).values())
        ]
        found.sort(key=lambda r: (r.updated_at, r.job_id), reverse=True)
        return [self._job(r) for r in found]

    def _active(self, keep: Callable[[_Job], bool]) -> list[Job]:
        found = [r for r in self._tables().jobs.values() if r.status in _ACTIVE and keep(r)]
        return [self._job(r) for r in sorted(found, key=lambda r: (r.created_at, r.job_id))]

    async def list_active_jobs(self, flow_id: str) -> list[Job]:
        """See Store.list_active_jobs."""
        return self._active(lambda r: r.flow_id == flow_id)

    async def want_release(self, job_id: str) -> None:
        self._tables().releases.setdefault(job_id, utcnow())

    async def releases_due(self, before: datetime, *, limit: int = 100) -> list[str]:
        due = sorted((at, j) for j, at in self._tables().releases.items() if at < as_utc(before))
        return [j for _, j in due[:limit]]

    async def released(self, job_id: str) -> None:
        self._tables().releases.pop(job_id, None)

    async def count_jobs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self._tables().jobs.values():
            counts[row.status.value] = counts.get(row.status.value, 0) + 1
        return counts

    async def list_user_active_jobs(self, user_id: str) -> list[Job]:
        """See Store.list_user_active_jobs."""
        return self._active(lambda r: r.user_id == user_id)

    # ---- events

    def _append(self, t: _Tables, job_id: str, event: str, body: str, dedupe_key: str | None) -> int:
        """The next seq of the job (1, 2, ...), or, for a ``dedupe_key`` already used, the seq
        of the event written with it (nothing is written). Raises before writing anything, so a
        status change calls it before changing the row."""
        if not isinstance(event, str):
            raise StoreError(f"An event needs a name (a string), not {event!r}.")
        events = t.events.setdefault(job_id, [])
        if dedupe_key is not None:
            for e in events:
                if e.dedupe_key == dedupe_key:
                    return e.seq
        events.append(_Event(len(events) + 1, event, body, utcnow(), dedupe_key))
        for tail in self._tails:  # nothing in this store rolls back once appended
            tail.put_nowait(EventNote(job_id, len(events), event))
        return len(events)

    async def append_event(self, job_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None = None) -> int:
        body = dumps(data)
        return self._append(self._tables(), job_id, event, body, dedupe_key)

    async def record_decision(self, job_id: str, events: Sequence[tuple[str, dict[str, Any], str]], *,
                              token: str, request_id: str, action_id: str, participants: Iterable[str]
                              ) -> list[int] | None:
        """See Store.record_decision: checked and encoded first, then written in one step."""
        ids = unique_strings(participants, "user_ids")
        bodies = [(name, dumps(data), key) for name, data, key in events]
        if not all(isinstance(name, str) for name, _, _ in bodies):
            raise StoreError("An event needs a name (a string).")
        t = self._tables()
        used = {e.dedupe_key: e.seq for e in t.events.get(job_id, ()) if e.dedupe_key is not None}
        if all(key in used for _, _, key in bodies):
            return None  # recorded by another attempt first
        job = t.jobs.get(job_id)
        if job is None or job.status != JobStatus.in_progress or not _same(job.claim_token, token):
            return None
        seqs = [self._append(t, job_id, name, body, key) for name, body, key in bodies]
        for row in t.messages.values():
            if row.kind == "card" and _same(row.card_request_id, request_id):
                row.submitted_action = action_id
        job.pending, job.pending_request_id, job.updated_at = None, None, utcnow()
        t.participants.update((u, job_id) for u in ids)
        return seqs

    async def append_event_if_waiting(
        self, job_id: str, request_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None
    ) -> int | None:
        """See Store.append_event_if_waiting: the check and the append in one step."""
        body = dumps(data)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is not None and row.status == JobStatus.suspended and _same(row.pending_request_id, request_id):
            return self._append(t, job_id, event, body, dedupe_key)
        if dedupe_key is not None:
            for e in t.events.get(job_id, ()):
                if e.dedupe_key == dedupe_key:
                    return e.seq
        return None

    async def tail_events(self) -> AsyncIterator[list[EventNote] | None]:
        self._tables()
        queue: asyncio.Queue[EventNote | None] = asyncio.Queue()
        self._tails.append(queue)
        try:
            yield []
            while True:
                notes = [await queue.get()]
                while not queue.empty():
                    notes.append(queue.get_nowait())
                self._tables()  # closed meanwhile: StoreError, as a closed SQL store
                yield [n for n in notes if n is not None]
        finally:
            self._tails.remove(queue)

    async def read_events(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[Event]:
        later = (e for e in self._tables().events.get(job_id, ()) if e.seq > after_seq)
        return [
            Event(job_id=job_id, seq=e.seq, event=e.event, data=json.loads(e.data), created_at=e.created_at)
            for e in _first(later, limit)
        ]


    # ---- checkpoints

    @staticmethod
    def _checkpoint(row: _Checkpoint) -> CheckpointRecord:
        return CheckpointRecord(
            id=row.id,
            run_id=row.run_id,
            job_id=row.job_id,
            data=json.loads(row.data),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        body = dumps(data)
        t = self._tables()
        row = _Checkpoint(
            str(uuid.uuid4()), run_id, job_id, body, utcnow(), as_utc(expires_at) if expires_at is not None else None
        )
        t.checkpoints[row.id] = row
        return row.id

    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        for row in reversed(self._tables().checkpoints.values()):
            if row.run_id == run_id:
                return self._checkpoint(row)
        return None

    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = self._tables().checkpoints.get(checkpoint_id)
        return self._checkpoint(row) if row is not None else None

    def _delete_checkpoints(self, doomed: Callable[[_Checkpoint], bool]) -> int:
        checkpoints = self._tables().checkpoints
        ids = [row.id for row in checkpoints.values() if doomed(row)]
        for checkpoint_id in ids:
            del checkpoints[checkpoint_id]
        return len(ids)

    async def delete_checkpoints(self, run_id: str) -> int:
        return self._delete_checkpoints(lambda row: row.run_id == run_id)

    async def delete_expired_checkpoints(self, now: datetime) -> int:
        """Those with ``expires_at <= now`` (loads never filter on expiry)."""
        now = as_utc(now)
        return self._delete_checkpoints(lambda row: row.expires_at is not None and row.expires_at <= now)

    # ---- chat history

    @staticmethod
    def _message(row: _Message) -> Message:
        card = json.loads(row.card) if row.card is not None else None
        if card is not None:
            if row.submitted_action is not None:
                card["submitted_action"] = row.submitted_action
            if row.superseded:
                card["superseded"] = True
        return Message(
            id=row.id,
            session_id=row.session_id,
            flow_id=row.flow_id,
            job_id=row.job_id,
            sender=row.sender,  # type: ignore[arg-type]  # stored from a Message, so one of its literals
            sender_name=row.sender_name,
            text=row.text,
            kind=row.kind,  # type: ignore[arg-type]
            card=card,
            created_at=row.created_at,
        )

    async def add_message(self, message: Message) -> Message:
        """Store a message; idempotent by ``message.id`` (a retried write returns the stored one).
        A card's ``submitted_action``/``superseded`` are kept apart from it, as in SQL, so a card
        comes back with the stamps it was given or got, never with ``superseded: false``."""
        card = dict(message.card) if message.card is not None else None
        submitted, superseded = None, False
        if card is not None:
            submitted = card.pop("submitted_action", None)
            superseded = bool(card.pop("superseded", False))
        body = dumps(card) if card is not None else None
        t = self._tables()
        row = t.messages.get(message.id)
        if row is None:
            row = t.messages[message.id] = _Message(
                id=message.id,
                session_id=message.session_id,
                flow_id=message.flow_id,
                job_id=message.job_id,
                sender=message.sender,
                sender_name=message.sender_name,
                text=message.text,
                kind=message.kind,
                card=body,
                card_request_id=str(card["request_id"]) if card is not None and card.get("request_id") is not None else None,
                submitted_action=submitted,
                superseded=superseded,
                created_at=as_utc(message.created_at),
            )
        return self._message(row)

    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]:
        """By ``created_at``, then in the order they were added."""
        found = [
            r
            for r in self._tables().messages.values()
            if r.session_id == session_id and (flow_id is None or r.flow_id == flow_id)
        ]
        return [self._message(r) for r in sorted(found, key=lambda r: r.created_at)]

    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        stamped = 0
        for row in self._tables().messages.values():
            if row.kind == "card" and _same(row.card_request_id, request_id):
                row.submitted_action = submitted_action
                stamped += 1
        return stamped

    async def supersede_cards(self, job_id: str) -> int:
        """The job's cards that were neither answered nor superseded yet."""
        superseded = 0
        for row in self._tables().messages.values():
            if row.kind == "card" and _same(row.job_id, job_id) and row.submitted_action is None and not row.superseded:
                row.superseded = True
                superseded += 1
        return superseded

    # ---- spans

    @staticmethod
    def _span(row: _Span) -> SpanRecord:
        return SpanRecord(
            trace_id=row.trace_id,
            span_id=row.span_id,
            parent_id=row.parent_id,
            name=row.name,
            type=row.type,
            start_time=row.start_time,
            end_time=row.end_time,
            status=row.status,  # type: ignore[arg-type]  # stored from a SpanRecord
            inputs=json.loads(row.inputs),
            outputs=json.loads(row.outputs),
            attributes=json.loads(row.attributes),
            run_id=row.run_id,
            flow_id=row.flow_id,
        )

    async def save_spans(self, spans: list[SpanRecord]) -> None:
        """Upsert by (trace_id, span_id); every span is encoded before the first is stored."""
        rows = [
            _Span(
                trace_id=s.trace_id,
                span_id=s.span_id,
                parent_id=s.parent_id,
                name=s.name,
                type=s.type,
                start_time=as_utc(s.start_time),
                end_time=as_utc(s.end_time) if s.end_time is not None else None,
                status=s.status,
                inputs=dumps(s.inputs),
                outputs=dumps(s.outputs),
                attributes=dumps(s.attributes),
                run_id=s.run_id,
                flow_id=s.flow_id,
            )
            for s in spans
        ]
        if not rows:
            return
        t = self._tables()
        for row in rows:
            t.spans[(row.trace_id, row.span_id)] = row

    async def get_trace(self, trace_id: str) -> list[SpanRecord]:
        found = [r for r in self._tables().spans.values() if r.trace_id == trace_id]
        return [self._span(r) for r in sorted(found, key=lambda r: (r.start_time, r.span_id))]

    async def list_traces(
        self, *, flow_id: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Newest first. ``status`` is "error" when any span failed, else the root span's status,
        else "ok" once every span has ended. Filtered before the limit (see Store.list_traces)."""
        t = self._tables()
        traces: dict[str, list[_Span]] = {}
        for row in t.spans.values():
            traces.setdefault(row.trace_id, []).append(row)
        if flow_id is not None:
            traces = {k: v for k, v in traces.items() if any(s.flow_id == flow_id for s in v)}
        if user_id is not None:
            runs = {r.job_id for r in t.jobs.values() if r.user_id == user_id}  # run_id = job_id
            traces = {
                k: v
                for k, v in traces.items()
                if max((s.run_id for s in v if s.run_id is not None), default=k) in runs
            }
        out = []
        for trace_id, spans in traces.items():
            root = min(spans, key=lambda s: (s.parent_id is not None, s.start_time))
            open_spans = sum(1 for s in spans if s.end_time is None)
            if any(s.status == "error" for s in spans):
                status = "error"
            elif root.status and root.status != "unset":
                status = root.status
            else:
                status = "ok" if open_spans == 0 else "unset"
            out.append(
                {
                    "trace_id": trace_id,
                    "run_id": max((s.run_id for s in spans if s.run_id is not None), default=None),
                    "flow_id": max((s.flow_id for s in spans if s.flow_id is not None), default=None),
                    "name": root.name,
                    "status": status,
                    "start_time": min(s.start_time for s in spans),
                    "end_time": max(s.end_time for s in spans if s.end_time is not None) if open_spans == 0 else None,
                }
            )
        out.sort(key=lambda r: r["trace_id"])
        out.sort(key=lambda r: r["start_time"], reverse=True)  # stable: ties stay by trace_id
        return _first(out, limit)

    # ---- blobs

    async def put_blob(self, key: str, data: bytes) -> None:
        self._tables().blobs[key] = bytes(data)

    async def get_blob(self, key: str) -> bytes | None:
        return self._tables().blobs.get(key)

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        blobs = self._tables().blobs
        gone = [k for k in blobs if k.startswith(prefix)]
        for key in gone:
            del blobs[key]
        return len(gone)
