"""The SQL that SQLite and PostgreSQL share (private).

Both backends implement :class:`engine.store.base.Store` through :class:`SQLStore`: every
method is written once here against a tiny transaction interface (:class:`Tx`), and the public
classes (:mod:`engine.store.sqlite`, :mod:`engine.store.postgres`) only say how to open a
transaction and how values are encoded. Queries use ``?`` placeholders; the PostgreSQL backend
rewrites them to ``%s`` once per query.

Correctness rests on the database, never on the process: every claim is one conditional
UPDATE, the per-job event seq is a counter row incremented in the same transaction as the
event insert, and the idempotency key is a unique index on (user_id, idempotency_key). This
holds across processes (API and worker) and, on PostgreSQL, across replicas.
"""

from __future__ import annotations

import abc
import hashlib
import json
import secrets
import uuid
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import date, datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel

from signoff.engine.models import (
    TERMINAL_STATUSES,
    CheckpointRecord,
    Event,
    FlowRecord,
    Job,
    JobStatus,
    Message,
    NewJob,
    PendingRequest,
    SpanRecord,
    User,
    utcnow,
)
from signoff.engine.store.base import Store, StoreConflict, StoreError

__all__ = ["MIGRATIONS", "SQLStore", "Tx", "hash_api_key"]

# ---------------------------------------------------------------------------------------------
# Migrations: an append-only list. Position i (1-based) is schema version i. Never edit or
# reorder an entry that has shipped; add a new one. Type names are filled in per dialect:
# {json} JSON document (TEXT on SQLite, json on PostgreSQL: kept verbatim, key order preserved)
# {ts}   timezone-aware UTC timestamp (ISO-8601 TEXT on SQLite, timestamptz on PostgreSQL)
# {blob} bytes; {serial} an auto-increment primary key giving insertion order.

MIGRATIONS: list[list[str]] = [
    # 1: the initial schema
    [
        """CREATE TABLE users (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at {ts} NOT NULL)""",
        """CREATE TABLE api_keys (
            key_hash TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX api_keys_user ON api_keys (user_id)",
        """CREATE TABLE flows (
            id TEXT PRIMARY KEY,
            owner_id TEXT NOT NULL,
            name TEXT NOT NULL,
            spec {json} NOT NULL,
            version INTEGER NOT NULL,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL)""",
        "CREATE INDEX flows_owner ON flows (owner_id)",
        """CREATE TABLE flow_versions (
            flow_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            name TEXT NOT NULL,
            spec {json} NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (flow_id, version))""",
        """CREATE TABLE flow_shares (
            flow_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            actions TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (flow_id, user_id))""",
        "CREATE INDEX flow_shares_user ON flow_shares (user_id)",
        """CREATE TABLE jobs (
            job_id TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            flow_version INTEGER NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT,
            status TEXT NOT NULL,
            request {json} NOT NULL,
            result {json},
            error {json},
            pending {json},
            pending_request_id TEXT,
            claim_token TEXT,
            run_id TEXT NOT NULL,
            idempotency_key TEXT,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL,
            finished_at {ts})""",
        "CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key)",
        "CREATE INDEX jobs_flow_user_status ON jobs (flow_id, user_id, status)",
        "CREATE INDEX jobs_user_status ON jobs (user_id, status)",
        """CREATE TABLE job_event_seq (
            job_id TEXT PRIMARY KEY,
            last_seq BIGINT NOT NULL)""",
        """CREATE TABLE events (
            job_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            event TEXT NOT NULL,
            data {json} NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (job_id, seq))""",
        """CREATE TABLE checkpoints (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            run_id TEXT NOT NULL,
            job_id TEXT,
            data {json} NOT NULL,
            created_at {ts} NOT NULL,
            expires_at {ts})""",
        "CREATE INDEX checkpoints_run ON checkpoints (run_id, pos)",
        "CREATE INDEX checkpoints_expiry ON checkpoints (expires_at)",
        """CREATE TABLE messages (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            flow_id TEXT,
            job_id TEXT,
            sender TEXT NOT NULL,
            sender_name TEXT NOT NULL,
            text TEXT NOT NULL,
            kind TEXT NOT NULL,
            card {json},
            card_request_id TEXT,
            submitted_action TEXT,
            superseded INTEGER NOT NULL DEFAULT 0,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX messages_session ON messages (session_id, created_at, pos)",
        "CREATE INDEX messages_card ON messages (card_request_id)",
        "CREATE INDEX messages_job ON messages (job_id)",
        """CREATE TABLE spans (
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            parent_id TEXT,
            name TEXT NOT NULL,
            type TEXT NOT NULL,
            start_time {ts} NOT NULL,
            end_time {ts},
            status TEXT NOT NULL,
            inputs {json} NOT NULL,
            outputs {json} NOT NULL,
            attributes {json} NOT NULL,
            run_id TEXT,
            flow_id TEXT,
            PRIMARY KEY (trace_id, span_id))""",
        "CREATE INDEX spans_flow ON spans (flow_id)",
        "CREATE INDEX spans_start ON spans (start_time)",
        """CREATE TABLE blobs (
            key TEXT PRIMARY KEY,
            data {blob} NOT NULL,
            created_at {ts} NOT NULL)""",
    ],
    # 2: idempotent event appends (a retried activity writes its event once)
    [
        "ALTER TABLE events ADD COLUMN dedupe_key TEXT",
        "CREATE UNIQUE INDEX events_dedupe ON events (job_id, dedupe_key)",
    ],
    # 3: inline runs (docs/inline.md): a lease renewed by the process running the job, and a
    # durable stop request that process checks
    [
        "ALTER TABLE jobs ADD COLUMN lease_until {ts}",
        "ALTER TABLE jobs ADD COLUMN cancel_requested_at {ts}",
        "CREATE INDEX jobs_lease ON jobs (lease_until)",
    ],
    # 4: finding runs whose workflow was never started (list_unstarted)
    [
        "CREATE INDEX jobs_status_created ON jobs (status, created_at)",
    ],
]

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS signoff_migrations (
    version INTEGER PRIMARY KEY,
    applied_at {ts} NOT NULL)"""


# ---------------------------------------------------------------------------------------------
# Named queries (shared by both dialects; ``?`` placeholders).


class Q:
    insert_user = "INSERT INTO users (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING *"
    user_by_id = "SELECT * FROM users WHERE id = ?"
    user_by_name = "SELECT * FROM users WHERE name = ?"
    insert_api_key = (
        "INSERT INTO api_keys (key_hash, user_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING key_hash"
    )
    api_key_owner = "SELECT user_id FROM api_keys WHERE key_hash = ?"
    user_for_api_key = "SELECT u.* FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.key_hash = ?"
    delete_api_key = "DELETE FROM api_keys WHERE key_hash = ?"

    upsert_flow = (
        "INSERT INTO flows (id, owner_id, name, spec, version, created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET name = excluded.name, spec = excluded.spec, "
        "version = flows.version + 1, updated_at = excluded.updated_at RETURNING *"
    )
    insert_flow_version = "INSERT INTO flow_versions (flow_id, version, name, spec, created_at) VALUES (?, ?, ?, ?, ?)"
    flow_by_id = "SELECT * FROM flows WHERE id = ?"
    flow_version = (
        "SELECT f.id, f.owner_id, v.name, v.spec, v.version, f.created_at, v.created_at AS updated_at "
        "FROM flows f JOIN flow_versions v ON v.flow_id = f.id WHERE f.id = ? AND v.version = ?"
    )
    list_flows = (
        "SELECT f.* FROM flows f WHERE f.owner_id = ? OR EXISTS (SELECT 1 FROM flow_shares s "
        "WHERE s.flow_id = f.id AND s.user_id = ?) ORDER BY f.created_at, f.id"
    )
    delete_flow = "DELETE FROM flows WHERE id = ?"
    delete_flow_versions = "DELETE FROM flow_versions WHERE flow_id = ?"
    delete_flow_shares = "DELETE FROM flow_shares WHERE flow_id = ?"
    share = "SELECT actions FROM flow_shares WHERE flow_id = ? AND user_id = ?"
    upsert_share = (
        "INSERT INTO flow_shares (flow_id, user_id, actions, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (flow_id, user_id) DO UPDATE SET actions = excluded.actions"
    )
    delete_share = "DELETE FROM flow_shares WHERE flow_id = ? AND user_id = ?"
    flow_owner = "SELECT owner_id FROM flows WHERE id = ?"

    insert_job = (
        "INSERT INTO jobs (job_id, flow_id, flow_version, user_id, session_id, status, request, run_id, "
        "idempotency_key, created_at, updated_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING RETURNING *"
    )
    insert_leased_job = (
        "INSERT INTO jobs (job_id, flow_id, flow_version, user_id, session_id, status, request, run_id, "
        "idempotency_key, created_at, updated_at, finished_at, lease_until) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING *"
    )
    # inline runs: the lease, a stop request, the sweep of expired leases
    renew_lease = (
        "UPDATE jobs SET lease_until = ? WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL RETURNING cancel_requested_at"
    )
    request_cancel = (
        "UPDATE jobs SET cancel_requested_at = ? WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL"
    )
    expired_leases = (
        "SELECT job_id FROM jobs WHERE status IN ('queued', 'in_progress') AND lease_until IS NOT NULL "
        "AND lease_until < ? ORDER BY lease_until LIMIT ?"
    )
    fail_expired = (
        "UPDATE jobs SET status = 'failed', error = ?, updated_at = ?, finished_at = ?, pending = NULL, "
        "pending_request_id = NULL WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL AND lease_until < ?"
    )
    unstarted_jobs = (
        "SELECT * FROM jobs WHERE status = 'queued' AND lease_until IS NULL AND created_at < ? "
        "ORDER BY created_at LIMIT ?"
    )
    job_by_id = "SELECT * FROM jobs WHERE job_id = ?"
    job_by_idempotency = "SELECT * FROM jobs WHERE user_id = ? AND idempotency_key = ?"
    mark_suspended = (
        "UPDATE jobs SET status = 'suspended', pending = ?, pending_request_id = ?, claim_token = NULL, "
        "updated_at = ? WHERE job_id = ? AND status IN ('queued', 'in_progress')"
    )
    claim_resume = (
        "UPDATE jobs SET status = 'in_progress', claim_token = ?, updated_at = ? "
        "WHERE job_id = ? AND status = 'suspended' AND pending_request_id = ?"
    )
    # the same claimant again (a retried activity): the claim it took is still the job's last
    # (running on, or ended since: a terminal status keeps the token; a new pause clears it)
    claim_held = "SELECT 1 AS held FROM jobs WHERE job_id = ? AND status NOT IN ('queued', 'suspended') AND claim_token = ?"
    rollback_resume = (
        "UPDATE jobs SET status = 'suspended', claim_token = NULL, updated_at = ? "
        "WHERE job_id = ? AND status = 'in_progress' AND claim_token = ?"
    )
    claim_cancel = (
        "UPDATE jobs SET status = 'cancelled', pending = NULL, pending_request_id = NULL, claim_token = NULL, "
        "updated_at = ?, finished_at = ? WHERE job_id = ? AND status = 'suspended'"
    )
    clear_pending = "UPDATE jobs SET pending = NULL, pending_request_id = NULL, updated_at = ? WHERE job_id = ?"
    find_suspended = (
        "SELECT * FROM jobs WHERE flow_id = ? AND user_id = ? AND status = 'suspended' "
        "AND COALESCE(session_id, flow_id) = ? ORDER BY created_at, job_id"
    )
    list_pending = "SELECT * FROM jobs WHERE user_id = ? AND status = 'suspended' AND pending IS NOT NULL"

    next_seq = (
        "INSERT INTO job_event_seq (job_id, last_seq) VALUES (?, 1) ON CONFLICT (job_id) "
        "DO UPDATE SET last_seq = job_event_seq.last_seq + 1 RETURNING last_seq"
    )
    insert_event = "INSERT INTO events (job_id, seq, event, data, created_at, dedupe_key) VALUES (?, ?, ?, ?, ?, ?)"
    event_by_dedupe = "SELECT seq FROM events WHERE job_id = ? AND dedupe_key = ?"
    read_events = "SELECT job_id, seq, event, data, created_at FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?"

    insert_checkpoint = (
        "INSERT INTO checkpoints (id, run_id, job_id, data, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)"
    )
    latest_checkpoint = "SELECT * FROM checkpoints WHERE run_id = ? ORDER BY pos DESC LIMIT 1"
    checkpoint_by_id = "SELECT * FROM checkpoints WHERE id = ?"
    delete_checkpoints = "DELETE FROM checkpoints WHERE run_id = ?"
    delete_expired_checkpoints = "DELETE FROM checkpoints WHERE expires_at IS NOT NULL AND expires_at <= ?"

    insert_message = (
        "INSERT INTO messages (id, session_id, flow_id, job_id, sender, sender_name, text, kind, card, "
        "card_request_id, submitted_action, superseded, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING RETURNING *"
    )
    message_by_id = "SELECT * FROM messages WHERE id = ?"
    list_messages = "SELECT * FROM messages WHERE session_id = ?"
    stamp_card = "UPDATE messages SET submitted_action = ? WHERE card_request_id = ? AND kind = 'card'"
    supersede_cards = (
        "UPDATE messages SET superseded = 1 WHERE job_id = ? AND kind = 'card' "
        "AND submitted_action IS NULL AND superseded = 0"
    )

    upsert_span = (
        "INSERT INTO spans (trace_id, span_id, parent_id, name, type, start_time, end_time, status, inputs, "
        "outputs, attributes, run_id, flow_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (trace_id, span_id) DO UPDATE SET parent_id = excluded.parent_id, name = excluded.name, "
        "type = excluded.type, start_time = excluded.start_time, end_time = excluded.end_time, "
        "status = excluded.status, inputs = excluded.inputs, outputs = excluded.outputs, "
        "attributes = excluded.attributes, run_id = excluded.run_id, flow_id = excluded.flow_id"
    )
    trace = "SELECT * FROM spans WHERE trace_id = ? ORDER BY start_time, span_id"
    list_traces = (
        "SELECT s.trace_id AS trace_id, MAX(s.run_id) AS run_id, MAX(s.flow_id) AS flow_id, "
        "MIN(s.start_time) AS start_time, MAX(s.end_time) AS end_time, "
        "SUM(CASE WHEN s.status = 'error' THEN 1 ELSE 0 END) AS errors, "
        "SUM(CASE WHEN s.end_time IS NULL THEN 1 ELSE 0 END) AS open_spans, "
        "(SELECT r.name FROM spans r WHERE r.trace_id = s.trace_id ORDER BY "
        "CASE WHEN r.parent_id IS NULL THEN 0 ELSE 1 END, r.start_time LIMIT 1) AS name, "
        "(SELECT r.status FROM spans r WHERE r.trace_id = s.trace_id ORDER BY "
        "CASE WHEN r.parent_id IS NULL THEN 0 ELSE 1 END, r.start_time LIMIT 1) AS root_status "
        "FROM spans s {where} GROUP BY s.trace_id ORDER BY MIN(s.start_time) DESC, s.trace_id LIMIT ?"
    )

    put_blob = (
        "INSERT INTO blobs (key, data, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET data = excluded.data, created_at = excluded.created_at"
    )
    get_blob = "SELECT data FROM blobs WHERE key = ?"
    delete_blobs = "DELETE FROM blobs WHERE substr(key, 1, ?) = ?"

    migrations_version = "SELECT MAX(version) AS version FROM signoff_migrations"
    record_migration = "INSERT INTO signoff_migrations (version, applied_at) VALUES (?, ?)"
    ping = "SELECT 1 AS one"


# ---------------------------------------------------------------------------------------------


def hash_api_key(key: str) -> str:
    """API keys are random and high-entropy, so one SHA-256 is enough (no salt/KDF needed)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """JSON text as stored: no NaN/Infinity (PostgreSQL's json refuses them), unicode kept."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"value is not JSON-serialisable: {exc}") from exc


def as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        # A naive datetime in signoff is always UTC by convention.
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


class _Duplicate(Exception):
    """Raised inside an append's transaction to roll it back: the key was used (seq inside)."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class Tx(abc.ABC):
    """One transaction (write) or one connection (read), as the shared SQL sees it."""

    @abc.abstractmethod
    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; returns the number of rows it changed."""

    @abc.abstractmethod
    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abc.abstractmethod
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...


class SQLStore(Store):
    """Every Store method, written once. Subclasses provide transactions and value encoding."""

    dialect: str = ""
    ddl_types: dict[str, str] = {}

    # ---- what a backend provides

    @abc.abstractmethod
    def _tx(self, *, write: bool) -> AbstractAsyncContextManager[Tx]:
        """A transaction that takes the write lock up front (write=True), or a read connection."""

    @abc.abstractmethod
    def _enc_json(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def _dec_json(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def _enc_dt(self, value: datetime | None) -> Any: ...

    @abc.abstractmethod
    def _dec_dt(self, value: Any) -> datetime | None: ...

    async def _migration_lock(self, tx: Tx) -> None:
        """Serialise concurrent setup() calls (SQLite: BEGIN IMMEDIATE already does)."""

    # ---- lifecycle

    async def setup(self) -> None:
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            await self._migration_lock(tx)
            await tx.execute(MIGRATIONS_TABLE.format(**self.ddl_types))
            row = await tx.fetchone(Q.migrations_version)
            current = int(row["version"] or 0) if row else 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"The database schema is at version {current}, newer than this signoff knows "
                    f"({len(MIGRATIONS)}): upgrade signoff before using this database."
                )
            for version in range(current + 1, len(MIGRATIONS) + 1):
                for statement in MIGRATIONS[version - 1]:
                    await tx.execute(statement.format(**self.ddl_types))
                await tx.execute(Q.record_migration, (version, now))

    async def schema_version(self) -> int:
        """The schema version recorded by setup() (0 before the first setup())."""
        async with self._tx(write=True) as tx:
            await tx.execute(MIGRATIONS_TABLE.format(**self.ddl_types))
            row = await tx.fetchone(Q.migrations_version)
        return int(row["version"] or 0) if row else 0

    async def ping(self) -> None:
        async with self._tx(write=False) as tx:
            await tx.fetchone(Q.ping)

    # ---- users and keys

    def _user(self, row: dict[str, Any]) -> User:
        return User(id=row["id"], name=row["name"], created_at=self._dec_dt(row["created_at"]))

    async def create_user(self, name: str) -> User:
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_user, (str(uuid.uuid4()), name, self._enc_dt(utcnow())))
        if row is None:
            raise StoreConflict(f"A user named {name!r} already exists.")
        return self._user(row)

    async def get_or_create_user(self, name: str) -> User:
        """The user with that name, created when missing (safe under concurrent callers)."""
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_user, (str(uuid.uuid4()), name, self._enc_dt(utcnow())))
            if row is None:
                row = await tx.fetchone(Q.user_by_name, (name,))
        assert row is not None
        return self._user(row)

    async def get_user(self, user_id: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_by_id, (user_id,))
        return self._user(row) if row else None

    async def get_user_by_name(self, name: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_by_name, (name,))
        return self._user(row) if row else None

    async def create_api_key(self, user_id: str, key: str | None = None) -> str:
        key = key or "sk-" + secrets.token_urlsafe(32)
        key_hash = hash_api_key(key)
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_api_key, (key_hash, user_id, self._enc_dt(utcnow())))
            if row is None:
                owner = await tx.fetchone(Q.api_key_owner, (key_hash,))
                if owner is None or owner["user_id"] != user_id:
                    raise StoreConflict("That API key already belongs to another user.")
        return key

    async def user_for_api_key(self, key: str) -> User | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.user_for_api_key, (hash_api_key(key),))
        return self._user(row) if row else None

    async def revoke_api_key(self, key: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_api_key, (hash_api_key(key),)) > 0

    # ---- flows and shares

    def _flow(self, row: dict[str, Any]) -> FlowRecord:
        return FlowRecord(
            id=row["id"],
            owner_id=row["owner_id"],
            name=row["name"],
            spec=self._dec_json(row["spec"]),
            version=int(row["version"]),
            created_at=self._dec_dt(row["created_at"]),
            updated_at=self._dec_dt(row["updated_at"]),
        )

    async def save_flow(
        self, owner_id: str, name: str, spec: dict[str, Any], *, flow_id: str | None = None
    ) -> FlowRecord:
        flow_id = flow_id or str(uuid.uuid4())
        now = self._enc_dt(utcnow())
        spec_json = self._enc_json(spec)
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.upsert_flow, (flow_id, owner_id, name, spec_json, now, now))
            assert row is not None
            await tx.execute(Q.insert_flow_version, (flow_id, row["version"], name, spec_json, now))
        return self._flow(row)

    async def get_flow(self, flow_id: str, *, version: int | None = None) -> FlowRecord | None:
        """The flow (its latest version, or ``version`` when given: the spec a job ran)."""
        async with self._tx(write=False) as tx:
            if version is None:
                row = await tx.fetchone(Q.flow_by_id, (flow_id,))
            else:
                row = await tx.fetchone(Q.flow_version, (flow_id, version))
        return self._flow(row) if row else None

    async def list_flows(self, user_id: str) -> list[FlowRecord]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_flows, (user_id, user_id))
        return [self._flow(r) for r in rows]

    async def delete_flow(self, flow_id: str) -> bool:
        async with self._tx(write=True) as tx:
            deleted = await tx.execute(Q.delete_flow, (flow_id,))
            await tx.execute(Q.delete_flow_versions, (flow_id,))
            await tx.execute(Q.delete_flow_shares, (flow_id,))
        return deleted > 0

    async def grant_share(self, flow_id: str, user_id: str, actions: Iterable[str]) -> None:
        """Add ``actions`` to what the user may do with the flow (earlier grants are kept)."""
        wanted = {str(a) for a in actions}
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.share, (flow_id, user_id))
            if row:
                wanted |= set(json.loads(row["actions"]))
            await tx.execute(Q.upsert_share, (flow_id, user_id, json.dumps(sorted(wanted)), self._enc_dt(utcnow())))

    async def revoke_share(self, flow_id: str, user_id: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_share, (flow_id, user_id)) > 0

    async def has_permission(self, flow_id: str, user_id: str, action: str = "execute") -> bool:
        async with self._tx(write=False) as tx:
            owner = await tx.fetchone(Q.flow_owner, (flow_id,))
            if owner is None:
                return False
            if owner["owner_id"] == user_id:
                return True
            row = await tx.fetchone(Q.share, (flow_id, user_id))
        return bool(row) and action in json.loads(row["actions"])

    # ---- jobs

    def _job(self, row: dict[str, Any]) -> Job:
        pending = self._dec_json(row["pending"]) if row["pending"] is not None else None
        return Job(
            job_id=row["job_id"],
            flow_id=row["flow_id"],
            flow_version=int(row["flow_version"]),
            user_id=row["user_id"],
            session_id=row["session_id"],
            status=JobStatus(row["status"]),
            request=self._dec_json(row["request"]),
            result=self._dec_json(row["result"]) if row["result"] is not None else None,
            error=self._dec_json(row["error"]) if row["error"] is not None else None,
            pending=PendingRequest.model_validate(pending) if pending is not None else None,
            run_id=row["run_id"],
            idempotency_key=row["idempotency_key"],
            created_at=self._dec_dt(row["created_at"]),
            updated_at=self._dec_dt(row["updated_at"]),
            finished_at=self._dec_dt(row["finished_at"]),
        )

    async def create_job(self, job: NewJob) -> tuple[Job, bool]:
        now = utcnow()
        status = JobStatus(job.status)
        params = (
            job.job_id,
            job.flow_id,
            job.flow_version,
            job.user_id,
            job.session_id,
            status.value,
            self._enc_json(job.request),
            job.job_id,  # run_id = job_id (DESIGN §1.5)
            job.idempotency_key,
            self._enc_dt(now),
            self._enc_dt(now),
            self._enc_dt(now if status.terminal else None),
        )
        insert = Q.insert_job
        if job.lease_until is not None:  # an inline run (docs/inline.md): born with its lease
            insert, params = Q.insert_leased_job, (*params, self._enc_dt(job.lease_until))
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(insert, params)
            if row is not None:
                return self._job(row), True
            if job.idempotency_key is not None:
                row = await tx.fetchone(Q.job_by_idempotency, (job.user_id, job.idempotency_key))
                if row is not None:
                    return self._job(row), False
            row = await tx.fetchone(Q.job_by_id, (job.job_id,))
        if row is not None and row["user_id"] == job.user_id and row["flow_id"] == job.flow_id:
            return self._job(row), False  # the same job submitted again (e.g. an activity retry)
        raise StoreConflict(f"A different job with id {job.job_id!r} already exists.")

    async def get_job(self, job_id: str) -> Job | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.job_by_id, (job_id,))
        return self._job(row) if row else None

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
        """See Store.set_status. A terminal status also clears the pending request and the claim
        and sets finished_at; ``result``/``error`` are written only when given; ``event`` is
        appended in the same transaction when (and only when) the row changed."""
        status = JobStatus(status)
        allowed = [JobStatus(s) for s in expect] if expect is not None else list(JobStatus)
        allowed = sorted({s.value for s in allowed if s not in TERMINAL_STATUSES})
        if not allowed:
            return False
        now = self._enc_dt(utcnow())
        sets = ["status = ?", "updated_at = ?"]
        params: list[Any] = [status.value, now]
        if result is not None:
            sets.append("result = ?")
            params.append(self._enc_json(result))
        if error is not None:
            sets.append("error = ?")
            params.append(self._enc_json(error))
        if status.terminal:
            # the claim token is kept: it records which resume claim led to this end (a retried
            # claimant learns that its run already ended); rollback needs in_progress anyway
            sets += ["finished_at = ?", "pending = NULL", "pending_request_id = NULL"]
            params.append(now)
        sql = f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ? AND status IN ({', '.join('?' for _ in allowed)})"
        body = self._enc_json(event[1]) if event is not None else None
        async with self._tx(write=True) as tx:
            changed = await tx.execute(sql, (*params, job_id, *allowed)) > 0
            if changed and event is not None:
                await self._append(tx, job_id, event[0], body, None)
        return changed

    # ---- inline runs: lease, stop request, sweep (docs/inline.md)

    async def renew_lease(self, job_id: str, until: datetime) -> str:
        """See Store.renew_lease."""
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.renew_lease, (self._enc_dt(until), job_id))
        if row is None:
            return "ended"
        return "cancel_requested" if row["cancel_requested_at"] is not None else "running"

    async def request_cancel(self, job_id: str) -> bool:
        """See Store.request_cancel."""
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.request_cancel, (self._enc_dt(utcnow()), job_id)) > 0

    async def fail_expired_leases(
        self, now: datetime, error: dict[str, Any], *, event: str = "run_failed", limit: int = 100
    ) -> list[str]:
        """See Store.fail_expired_leases."""
        enc_now = self._enc_dt(now)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.expired_leases, (enc_now, limit))
        ended: list[str] = []
        body = self._enc_json(error)
        data = self._enc_json({"error": error.get("error"), "type": error.get("type"), "vertex_id": error.get("vertex_id")})
        for row in rows:
            stamp = self._enc_dt(utcnow())
            async with self._tx(write=True) as tx:
                # conditional on the lease still being expired: a renewal that got in first wins
                if await tx.execute(Q.fail_expired, (body, stamp, stamp, row["job_id"], enc_now)) > 0:
                    await self._append(tx, row["job_id"], event, data, None)
                    ended.append(row["job_id"])
        return ended

    async def list_unstarted(self, before: datetime, *, limit: int = 100) -> list[Job]:
        """See Store.list_unstarted."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.unstarted_jobs, (self._enc_dt(before), limit))
        return [self._job(r) for r in rows]

    async def mark_suspended(
        self,
        job_id: str,
        pending: PendingRequest,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
        dedupe_key: str | None = None,
    ) -> bool:
        """``queued|in_progress → suspended`` with the pending request (any stale claim dropped);
        ``event`` appended in the same transaction only when the row changed (see
        Store.mark_suspended). The UPDATE comes first: it locks the job row, so a concurrent
        terminal write (stop) either committed before (nothing changes here, no event) or waits
        for this transaction (its terminal event comes after this one)."""
        body = self._enc_json(pending.model_dump(mode="json"))
        data = self._enc_json(event[1]) if event is not None else None
        try:
            async with self._tx(write=True) as tx:
                changed = await tx.execute(
                    Q.mark_suspended, (body, pending.request_id, self._enc_dt(utcnow()), job_id)) > 0
                if changed and event is not None:
                    await self._append(tx, job_id, event[0], data, dedupe_key)
                return changed
        except _Duplicate:  # the event is there (an earlier attempt): the status change alone
            async with self._tx(write=True) as tx:
                return await tx.execute(
                    Q.mark_suspended, (body, pending.request_id, self._enc_dt(utcnow()), job_id)) > 0

    async def claim_suspended_for_resume(self, job_id: str, request_id: str, token: str | None = None) -> str | None:
        """See Store.claim_suspended_for_resume. With a caller-supplied ``token``, a caller whose
        claim under that token is still the job's last one (job ``in_progress``, or ended since)
        wins again: a retried activity whose first attempt committed the claim is not locked
        out, and finds the job's real status with get_job."""
        fresh = token or uuid.uuid4().hex
        async with self._tx(write=True) as tx:
            won = await tx.execute(Q.claim_resume, (fresh, self._enc_dt(utcnow()), job_id, request_id)) > 0
            if not won and token:
                won = await tx.fetchone(Q.claim_held, (job_id, token)) is not None
        return fresh if won else None

    async def rollback_resume_claim(self, job_id: str, claim_token: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.rollback_resume, (self._enc_dt(utcnow()), job_id, claim_token)) > 0

    async def claim_suspended_for_cancel(self, job_id: str, *, event: tuple[str, dict[str, Any]] | None = None) -> bool:
        """See Store.claim_suspended_for_cancel: ``event`` is appended in the claim's transaction,
        only by the winner."""
        now = self._enc_dt(utcnow())
        body = self._enc_json(event[1]) if event is not None else None
        async with self._tx(write=True) as tx:
            won = await tx.execute(Q.claim_cancel, (now, now, job_id)) > 0
            if won and event is not None:
                await self._append(tx, job_id, event[0], body, None)
        return won

    async def clear_pending(self, job_id: str) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.clear_pending, (self._enc_dt(utcnow()), job_id))

    async def find_suspended(self, flow_id: str, user_id: str, effective_session: str) -> list[Job]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.find_suspended, (flow_id, user_id, effective_session))
        return [self._job(r) for r in rows]

    async def list_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """The user's own suspended jobs that wait for a decision, oldest first."""
        sql, params = Q.list_pending, [user_id]
        if flow_id is not None:
            sql += " AND flow_id = ?"
            params.append(flow_id)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql + " ORDER BY created_at, job_id", params)
        return [self._job(r) for r in rows]

    # ---- events

    async def append_event(self, job_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None = None) -> int:
        """See Store.append_event. With a ``dedupe_key`` already used for this job, nothing is
        written and the first event's seq is returned."""
        body = self._enc_json(data)
        try:
            async with self._tx(write=True) as tx:
                return await self._append(tx, job_id, event, body, dedupe_key)
        except _Duplicate as dup:  # the transaction rolled back: the counter is untouched
            return dup.seq

    async def _append(self, tx: Tx, job_id: str, event: str, body: Any, dedupe_key: str | None) -> int:
        # The counter row first: it is the per-job lock, so the duplicate check below sees any
        # append with the same key that committed before this one took the lock.
        row = await tx.fetchone(Q.next_seq, (job_id,))
        assert row is not None
        seq = int(row["last_seq"])
        if dedupe_key is not None:
            first = await tx.fetchone(Q.event_by_dedupe, (job_id, dedupe_key))
            if first is not None:
                raise _Duplicate(int(first["seq"]))
        await tx.execute(Q.insert_event, (job_id, seq, event, body, self._enc_dt(utcnow()), dedupe_key))
        return seq

    async def read_events(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[Event]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.read_events, (job_id, after_seq, limit))
        return [
            Event(
                job_id=r["job_id"],
                seq=int(r["seq"]),
                event=r["event"],
                data=self._dec_json(r["data"]),
                created_at=self._dec_dt(r["created_at"]),
            )
            for r in rows
        ]

    # ---- checkpoints

    def _checkpoint(self, row: dict[str, Any]) -> CheckpointRecord:
        return CheckpointRecord(
            id=row["id"],
            run_id=row["run_id"],
            job_id=row["job_id"],
            data=self._dec_json(row["data"]),
            created_at=self._dec_dt(row["created_at"]),
            expires_at=self._dec_dt(row["expires_at"]),
        )

    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        checkpoint_id = str(uuid.uuid4())
        params = (
            checkpoint_id,
            run_id,
            job_id,
            self._enc_json(data),
            self._enc_dt(utcnow()),
            self._enc_dt(expires_at),
        )
        async with self._tx(write=True) as tx:
            await tx.execute(Q.insert_checkpoint, params)
        return checkpoint_id

    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.latest_checkpoint, (run_id,))
        return self._checkpoint(row) if row else None

    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.checkpoint_by_id, (checkpoint_id,))
        return self._checkpoint(row) if row else None

    async def delete_checkpoints(self, run_id: str) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_checkpoints, (run_id,))

    async def delete_expired_checkpoints(self, now: datetime) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_expired_checkpoints, (self._enc_dt(now),))

    # ---- chat history

    def _message(self, row: dict[str, Any]) -> Message:
        card = self._dec_json(row["card"]) if row["card"] is not None else None
        if card is not None:
            if row["submitted_action"] is not None:
                card["submitted_action"] = row["submitted_action"]
            if row["superseded"]:
                card["superseded"] = True
        return Message(
            id=row["id"],
            session_id=row["session_id"],
            flow_id=row["flow_id"],
            job_id=row["job_id"],
            sender=row["sender"],
            sender_name=row["sender_name"],
            text=row["text"],
            kind=row["kind"],
            card=card,
            created_at=self._dec_dt(row["created_at"]),
        )

    async def add_message(self, message: Message) -> Message:
        """Store a message; idempotent by ``message.id`` (a retried write returns the stored one).
        A card's ``submitted_action``/``superseded`` live in their own columns so the stamps are
        plain UPDATEs; they are merged back into ``card`` on read."""
        card = dict(message.card) if message.card is not None else None
        submitted = superseded = None
        if card is not None:
            submitted = card.pop("submitted_action", None)
            superseded = bool(card.pop("superseded", False))
        params = (
            message.id,
            message.session_id,
            message.flow_id,
            message.job_id,
            message.sender,
            message.sender_name,
            message.text,
            message.kind,
            self._enc_json(card) if card is not None else None,
            str(card["request_id"]) if card is not None and card.get("request_id") is not None else None,
            submitted,
            1 if superseded else 0,
            self._enc_dt(message.created_at),
        )
        async with self._tx(write=True) as tx:
            row = await tx.fetchone(Q.insert_message, params)
            if row is None:
                row = await tx.fetchone(Q.message_by_id, (message.id,))
        assert row is not None
        return self._message(row)

    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]:
        sql, params = Q.list_messages, [session_id]
        if flow_id is not None:
            sql += " AND flow_id = ?"
            params.append(flow_id)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql + " ORDER BY created_at, pos", params)
        return [self._message(r) for r in rows]

    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.stamp_card, (submitted_action, request_id))

    async def supersede_cards(self, job_id: str) -> int:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.supersede_cards, (job_id,))

    # ---- spans

    def _span(self, row: dict[str, Any]) -> SpanRecord:
        return SpanRecord(
            trace_id=row["trace_id"],
            span_id=row["span_id"],
            parent_id=row["parent_id"],
            name=row["name"],
            type=row["type"],
            start_time=self._dec_dt(row["start_time"]),
            end_time=self._dec_dt(row["end_time"]),
            status=row["status"],
            inputs=self._dec_json(row["inputs"]),
            outputs=self._dec_json(row["outputs"]),
            attributes=self._dec_json(row["attributes"]),
            run_id=row["run_id"],
            flow_id=row["flow_id"],
        )

    async def save_spans(self, spans: list[SpanRecord]) -> None:
        if not spans:
            return
        rows = [
            (
                s.trace_id,
                s.span_id,
                s.parent_id,
                s.name,
                s.type,
                self._enc_dt(s.start_time),
                self._enc_dt(s.end_time),
                s.status,
                self._enc_json(s.inputs),
                self._enc_json(s.outputs),
                self._enc_json(s.attributes),
                s.run_id,
                s.flow_id,
            )
            for s in spans
        ]
        async with self._tx(write=True) as tx:
            await tx.executemany(Q.upsert_span, rows)

    async def get_trace(self, trace_id: str) -> list[SpanRecord]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.trace, (trace_id,))
        return [self._span(r) for r in rows]

    async def list_traces(self, *, flow_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Newest first. ``status`` is "error" when any span failed, else the root span's status,
        else "ok" once every span has ended."""
        where, params = "", []
        if flow_id is not None:
            where = "WHERE s.trace_id IN (SELECT f.trace_id FROM spans f WHERE f.flow_id = ?)"
            params.append(flow_id)
        params.append(limit)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.list_traces.format(where=where), params)
        out = []
        for r in rows:
            if int(r["errors"] or 0) > 0:
                status = "error"
            elif r["root_status"] and r["root_status"] != "unset":
                status = r["root_status"]
            else:
                status = "ok" if int(r["open_spans"] or 0) == 0 else "unset"
            out.append(
                {
                    "trace_id": r["trace_id"],
                    "run_id": r["run_id"],
                    "flow_id": r["flow_id"],
                    "name": r["name"],
                    "status": status,
                    "start_time": self._dec_dt(r["start_time"]),
                    "end_time": self._dec_dt(r["end_time"]) if int(r["open_spans"] or 0) == 0 else None,
                }
            )
        return out

    # ---- blobs

    async def put_blob(self, key: str, data: bytes) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.put_blob, (key, bytes(data), self._enc_dt(utcnow())))

    async def get_blob(self, key: str) -> bytes | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.get_blob, (key,))
        return bytes(row["data"]) if row else None

    async def delete_blobs(self, prefix: str) -> int:
        """Delete every blob whose key starts with ``prefix`` (an empty prefix refuses)."""
        if not prefix:
            raise ValueError("delete_blobs needs a non-empty prefix")
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.delete_blobs, (len(prefix), prefix))
