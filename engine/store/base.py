"""The durable store: one async interface, implemented for SQLite and PostgreSQL, and in memory
(:mod:`engine.store.memory`, the reference for one process, not durable).

The engine itself only needs two narrow parts of it, :class:`CheckpointStore` and
:class:`HistoryStore`; the full :class:`Store` is what the activities and the API use.
Every method is async and never blocks the event loop. Every method is abstract: each backend
implements the whole contract, which tests/store_conformance.py checks on all of them.

Claims are atomic: of any number of concurrent callers exactly one wins, and the losers
change nothing (in SQL each claim is one conditional UPDATE).

Over 500 lines on purpose: this is the contract, every method's promise written once beside its
signature, which three backends implement and one conformance suite checks; the backends are
cut by table group (engine/store/sql/, engine/store/memory/).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Sequence

from signoff.engine.errors import RunsInFlightLimit, SignoffError, StorageLimit
from signoff.engine.models import (
    CheckpointRecord,
    DeliveryAttempt,
    DecisionClaim,
    ContactToken,
    DecisionLink,
    Event,
    EventNote,
    FlowRecord,
    Group,
    InboxEntry,
    Job,
    JobStatus,
    Message,
    NewJob,
    PendingAges,
    Notification,
    PendingRequest,
    SecretInfo,
    ReceiptRecord,
    SecretRecord,
    SpanRecord,
    StandingApproval,
    User,
    Webhook,
    WebhookDelivery,
    WebhookRecord,
)

if TYPE_CHECKING:
    from signoff.engine.audit.receipts import SignedReceipt


def run_of_blob(key: str) -> str | None:
    """The job whose blob this is: run blobs live under ``runs/<job id>/`` (engine/lifecycle.py:
    run_blob_prefix); other keys (e.g. the pages' sessions) are nobody's."""
    if not key.startswith("runs/"):
        return None
    job_id, slash, _ = key[5:].partition("/")
    return job_id if slash and job_id else None


class StoreError(SignoffError):
    """A store operation failed."""

    code = "STORE_ERROR"
    # the database is infrastructure: an activity that failed on it is retried (docs/temporal.md)
    retryable = True


class StoreUnavailable(StoreError):
    """The database cannot be reached right now (down, restarting, refusing connections, or busy
    past the timeout): nothing was changed that the caller did not see, so the same call may be
    sent again once it is back (the API answers 503 with Retry-After)."""

    code = "STORE_UNAVAILABLE"


class AccessChanged(StoreError):
    """Store.record_decision's ``access_since``: the decider's access changed since it was checked
    (an access note: a share, a group membership, their keys or account went). Nothing was written;
    the caller checks the decider again from the store (issue 33: a carried check fails closed)."""

    code = "ACCESS_CHANGED"
    retryable = False


@dataclass
class DecisionReads:
    """What Store.record_decision reads in its own transaction when it writes the decision (issue
    33: the reads its deliveries need, without round trips of their own): the webhooks of
    ``owners`` (all of theirs, whatever their events: as webhooks_for reads them before it
    filters) and the job's latest ``notifications`` (as list_notifications with that limit; 0:
    none read). Filled only when the decision was written; None: not read."""

    owners: list[str]
    notifications: int = 0
    webhooks: list[WebhookRecord] | None = None
    told: list[Notification] | None = None


@dataclass
class SubmitReads:
    """What Store.create_job reads in its own transaction when it inserts the job (issue 33: a
    submit's reads without round trips of their own): ``suspended``, the user's suspended runs
    of the job's flow in its effective session (the session, or the flow id without one), as
    find_suspended reads them, the runs a new one supersedes. Filled only when the job was
    inserted; None: not read (a repeat: the caller reads as before)."""

    suspended: list[Job] | None = None


@dataclass
class PauseCheckpoint:
    """The checkpoint a pause writes with its status (Store.mark_suspended's ``checkpoint``, issue
    33): as save_checkpoint(run_id, data, job_id=the job, expires_at=expires_at) writes it."""

    run_id: str
    data: dict[str, Any]
    expires_at: datetime | None = None


class StoreConflict(StoreError):
    """A unique value is already taken (user name, API key of another user, job id)."""

    code = "STORE_CONFLICT"


# When a submit refused for the runs in flight may try again: runs end or pause within seconds
RUNS_IN_FLIGHT_RETRY_SECONDS = 1

# An access note (Store.tail_events): a user's keys, account or a share to them went, so their open
# live streams ask at once whether they may still see what they show. It is an event of the
# pseudo-job ``ACCESS_NOTES + user_id`` named ``ACCESS_CHANGED``, written in the revoke's own
# transaction, so every process's tail tells it (PostgreSQL's NOTIFY, SQLite's table) whoever
# revoked (the API, the pages, the CLI). No job id has this form (ids are UUIDs).
ACCESS_NOTES = "access:"
ACCESS_CHANGED = "access_changed"


def stored_bytes_check(used: int, limit: int, *, adding: int = 0) -> None:
    """Raise StorageLimit when a user who keeps ``used`` bytes may not keep more (``limit`` 0:
    no limit): at the limit or over, or over it with the ``adding`` bytes about to be stored."""
    if limit and (used >= limit or used + adding > limit):
        raise StorageLimit(
            f"You keep {used:,} bytes in signoff{f' and this would add {adding:,}' if adding else ''}; this "
            f"deployment allows {limit:,} per user (SIGNOFF_USER_MAX_STORED_BYTES): delete flows or ended runs you no "
            "longer need (DELETE /api/v2/workflows/{job_id}, `signoff delete JOB`), or ask the operator for more",
            used=used, limit=limit, adding=adding)


def runs_in_flight_check(count: int, limit: int) -> None:
    """Raise RunsInFlightLimit when a user with ``count`` jobs in flight may not start one more."""
    if 0 < limit <= count:
        raise RunsInFlightLimit(
            f"You have {count} runs queued or running; at most {limit} at once (SIGNOFF_USER_MAX_RUNS_IN_FLIGHT). "
            f"Wait for one to end or pause, then submit again (in {RUNS_IN_FLIGHT_RETRY_SECONDS} s)",
            retry_after=RUNS_IN_FLIGHT_RETRY_SECONDS, limit=limit)


class CheckpointStore(abc.ABC):
    """What the engine needs to pause and resume."""

    @abc.abstractmethod
    async def save_checkpoint(
        self, run_id: str, data: dict[str, Any], *, job_id: str | None = None, expires_at: datetime | None = None
    ) -> str:
        """Persist a checkpoint; returns its id. ``data`` must be JSON-serialisable."""

    @abc.abstractmethod
    async def load_latest_checkpoint(self, run_id: str) -> CheckpointRecord | None: ...

    @abc.abstractmethod
    async def load_checkpoint(self, checkpoint_id: str) -> CheckpointRecord | None: ...

    @abc.abstractmethod
    async def delete_checkpoints(self, run_id: str) -> int: ...

    @abc.abstractmethod
    async def delete_expired_checkpoints(self, now: datetime) -> int: ...


class HistoryStore(abc.ABC):
    """A session's chat history (ChatInput's User message, ChatOutput's AI message, gate cards)."""

    @abc.abstractmethod
    async def add_message(self, message: Message) -> Message: ...

    @abc.abstractmethod
    async def list_messages(self, session_id: str, *, flow_id: str | None = None) -> list[Message]: ...

    @abc.abstractmethod
    async def stamp_card(self, request_id: str, submitted_action: str) -> int:
        """Set ``card.submitted_action`` on the card(s) whose ``card.request_id`` equals request_id."""

    @abc.abstractmethod
    async def supersede_cards(self, job_id: str, *, stopped: bool = False) -> int:
        """Close the job's unanswered cards (neither answered nor closed yet): ``card.superseded =
        true``, or with ``stopped`` ``card.stopped = true`` (the run was stopped, not replaced by a
        new one: a card must not say "superseded by a new run" when there is none). Returns how
        many it closed."""


#: A receipt's maker, called inside the transaction that writes a decision's records, under the
#: job row's lock: given the sha256 of the run's last receipt (None: it has none), it returns the
#: receipt to store next (``receipt_id``, ``flow_id``, ``at`` among its fields), its own sha256
#: and its canonical JSON, which is stored as it is (engine/audit/receipts.py:
#: ReceiptDraft.signed, a SignedReceipt). Called again if the write is.
ReceiptMaker = Callable[[str | None], "SignedReceipt"]


class Store(CheckpointStore, HistoryStore):
    """Everything signoff must not lose."""

    # ---- lifecycle
    @abc.abstractmethod
    async def setup(self) -> None:
        """Apply the append-only list of migrations (idempotent). Nothing migrates on import."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the database cannot be reached."""

    # ---- users and keys
    @abc.abstractmethod
    async def create_user(self, name: str) -> User: ...

    @abc.abstractmethod
    async def get_user(self, user_id: str) -> User | None: ...

    @abc.abstractmethod
    async def get_user_by_name(self, name: str) -> User | None: ...

    @abc.abstractmethod
    async def list_users(self, *, limit: int = 1000) -> list[User]:
        """Users by name (``signoff users list``), at most ``limit``."""

    @abc.abstractmethod
    async def create_api_key(self, user_id: str, key: str | None = None) -> str:
        """Store a key (hashed) for the user; returns the plain key, which is never stored."""

    @abc.abstractmethod
    async def user_for_api_key(self, key: str) -> User | None: ...

    @abc.abstractmethod
    async def get_or_create_user(self, name: str) -> User:
        """The user with that name, created when missing; of concurrent callers with one name,
        all get the same user."""

    @abc.abstractmethod
    async def revoke_api_key(self, key: str) -> bool:
        """Forget a key; returns whether it existed (and then notes its user's access changed)."""

    @abc.abstractmethod
    async def revoke_api_keys(self, user_id: str) -> int:
        """Forget every key of the user; returns how many there were (other users' keys stay)."""

    @abc.abstractmethod
    async def delete_user(self, user_id: str) -> bool:
        """Delete the user and what is theirs alone, in one transaction: the user row (its name
        is free again), every API key of the user, the shares granted to the user, the shares of
        the flows the user owns (granted to others) and the user's secrets. Returns whether the
        user existed; the keys, shares and secrets recorded under that id go even when it did
        not. Also the user's group memberships, the groups the user owns (with their members)
        and the user's webhooks (with their deliveries), and the runs recorded as ones the user
        took part in (add_participants), the decision links and notifications sent to the user,
        and the mutes by and of the user, and the user's count of
        stored bytes (stored_bytes: 0 afterwards). Flows and jobs are the caller's to delete or keep: they
        are not touched (nor the approver references of jobs)."""

    # ---- stored bytes per user (docs/security.md, "Budgets per user")
    @abc.abstractmethod
    async def stored_bytes(self, user_id: str) -> int:
        """The bytes the store keeps for the user: one number maintained in the transaction of
        each write it counts (never a sum over the user's rows; concurrent writes lose no count),
        read by the budget check at the door (engine/usage.py). Counted as stored, in bytes of UTF-8
        JSON text (binary: its length), what the user's actions store:

        - each version of a flow (its spec), to the flow's owner; delete_flow gives them back;
        - a job's request (create_job), its result and error (set_status, fail_expired_leases),
          its events (every append), the text and card of a message with its ``job_id``, to the
          job's user (a job that does not exist counts to nobody);
        - a checkpoint's data (its ``job_id``, else its ``run_id``: run_id = job_id), a span's
          inputs, outputs and attributes (its ``run_id``), a blob's bytes (a run's blob: key
          ``runs/<job id>/...``, engine/store/base.py: run_of_blob), to the job's user as it is
          when written; a span or blob written again counts its new size instead of its old;
          delete_checkpoints, delete_expired_checkpoints and delete_blobs give back what the
          deleted rows counted; delete_run and delete_runs_ended_before give back everything
          the deleted run counted.

        Not counted: names, ids, timestamps, a job's pending request (replaced and cleared as the
        run goes), the stamps of cards, approver references, secrets, webhooks and their log
        (bounded by their own limits). A user who never stored anything has 0."""

    # ---- secrets: named credentials of a user, encrypted by the caller (DESIGN §13)
    @abc.abstractmethod
    async def put_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """Create the owner's secret ``name``, or replace its value. A name is unique per owner
        (compared exactly: case and spaces count). The store keeps ``ciphertext`` as opaque
        bytes, byte for byte (empty included) and never decrypts it. A replace keeps
        ``created_at`` and sets ``updated_at`` to now. ``ciphertext`` that is not bytes
        (bytearray and memoryview are taken as bytes) raises TypeError before any change."""

    @abc.abstractmethod
    async def create_secret(self, owner_id: str, name: str, ciphertext: bytes) -> SecretRecord:
        """Create the owner's secret ``name`` unless it exists; returns the one stored, new or
        not (never replaced: of concurrent creators, all get the first one's). The signing keys
        of receipts are made this way (engine/audit/keys.py)."""

    @abc.abstractmethod
    async def get_secret(self, owner_id: str, name: str) -> SecretRecord | None:
        """The owner's secret with its ciphertext; None when that owner has no secret by that name
        (another owner's secret of the same name is never returned)."""

    @abc.abstractmethod
    async def list_secrets(self, owner_id: str) -> list[SecretInfo]:
        """The owner's secrets, names and times only (never a ciphertext), sorted by name in
        code-point order (the same on every backend, whatever the database's collation)."""

    @abc.abstractmethod
    async def delete_secret(self, owner_id: str, name: str) -> bool:
        """Delete the owner's secret; returns whether it existed (another owner's is untouched)."""

    # ---- groups of approvers (DESIGN §9): a group belongs to its owner, its name is unique per owner
    @abc.abstractmethod
    async def create_group(self, owner_id: str, name: str) -> Group:
        """Create the owner's group ``name``, without members. Names are compared exactly (case
        and spaces count) and are unique per owner only: another owner's group of the same name
        is another group. StoreConflict when the owner already has a group of that name (of
        concurrent callers, exactly one creates it)."""

    @abc.abstractmethod
    async def get_group(self, owner_id: str, name: str) -> Group | None:
        """The owner's group with its members (sorted); None when the owner has none of that name."""

    @abc.abstractmethod
    async def list_groups(self, owner_id: str) -> list[Group]:
        """The owner's groups with their members, by name in code-point order."""

    @abc.abstractmethod
    async def add_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        """Add members (user ids; one already a member stays once) in one transaction; returns the
        group after the change, or None (nothing written) when the owner has no such group. A
        group deleted meanwhile gets no member: its name re-created later starts empty.
        ``user_ids`` is a collection of strings: a lone str raises TypeError before any change.
        The store does not check that the users exist."""

    @abc.abstractmethod
    async def remove_group_members(self, owner_id: str, name: str, user_ids: Iterable[str]) -> Group | None:
        """Remove members (ids that are not members are ignored); returns the group after the
        change, or None when the owner has no such group. A lone str raises TypeError."""

    @abc.abstractmethod
    async def delete_group(self, owner_id: str, name: str) -> bool:
        """Delete the owner's group with its memberships; returns whether it existed. Approver
        references to it stay, and match nobody (until its owner creates that name again)."""

    @abc.abstractmethod
    async def groups_of(self, user_id: str) -> list[tuple[str, str]]:
        """``(owner_id, name)`` of every group the user is a member of, sorted (code points)."""

    # ---- who may decide a pending request: approver references ("user:<user_id>",
    # "group:<owner_id>/<name>"; a group reference splits at its first "/", owner ids have none)
    @abc.abstractmethod
    async def set_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> None:
        """Replace the approver references of the job's request ``request_id`` (other requests'
        are untouched). Duplicates are kept once; the order given is kept. A reference that is not
        ``user:<id>`` or ``group:<owner_id>/<name>`` (owner id non-empty) raises ValueError and a
        lone str TypeError, before any change. The store does not require the job to exist."""

    @abc.abstractmethod
    async def add_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> list[str]:
        """Add references to the request's (those already there stay once, in their place);
        returns every reference of that request afterwards, in the order they were first given.
        Checked as in set_request_approvers."""

    @abc.abstractmethod
    async def request_approvers(self, job_id: str, request_id: str) -> list[str]:
        """The references of the job's request, in the order they were first given ([] when none).
        A job that reached a terminal status through set_status, claim_suspended_for_cancel or
        fail_expired_leases has none left (they are deleted in that transaction)."""

    # ---- who took part in a run: who voted on or decided its requests (kept after the run ends,
    # unlike approver references: a person's decision history, and they still see the run)
    @abc.abstractmethod
    async def add_participants(self, job_id: str, user_ids: Iterable[str]) -> None:
        """Record that these users took part in the job (each once; a lone str TypeError). The
        store does not require the job or the users to exist."""

    @abc.abstractmethod
    async def participated_jobs(self, user_id: str, *, limit: int = 200) -> list[Job]:
        """The existing jobs the user took part in (add_participants), newest first by the job's
        ``created_at`` (then ``job_id``, descending), at most ``limit``."""

    @abc.abstractmethod
    async def took_part(self, job_id: str, user_id: str) -> bool:
        """Whether add_participants recorded the user for the job."""

    @abc.abstractmethod
    async def waiting_on_others(self, user_id: str, *, limit: int) -> list[str]:
        """The ids of ``user_id``'s jobs (at most ``limit``, any order) that are ``suspended`` now
        and whose current request (``pending_request_id``) has a reference naming someone else: a
        user other than ``user_id``, or any group (its members are not read)."""

    @abc.abstractmethod
    async def list_assigned_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """The jobs assigned to the user: ``suspended`` now, whose current pending request
        (``pending_request_id``) has a reference naming the user or a group the user is a member
        of at the time of the call (a member added later sees it, a removed one no longer does).
        References of an earlier request of the job, or of a job no longer suspended, never list
        it. Of any owner: the job need not be the user's. ``flow_id``: only that flow's jobs.
        Newest first by the job's ``updated_at`` (then ``job_id``, descending)."""

    @abc.abstractmethod
    async def inbox(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                    kind: str | None = None, limit: int = 25, offset: int = 0, oldest: bool = False) -> list[Job]:
        """What waits for the user to decide, a page at a time (the person's inbox, the API's
        pending list): the user's own ``suspended`` jobs whose pending request names no approvers
        (neither ``approvers`` nor ``approver_refs``), and the jobs list_assigned_pending lists
        (the user's own among them), except those whose owner the user muted (list_mutes); each
        once. Newest first by the request's ``paused_at``, then ``job_id`` descending; the
        ``offset`` first skipped, at most ``limit``. Filters: ``flow_id``; ``session_id`` (the
        job's own, ``""`` for none); ``kind`` (``node_input``, ``tool_approval``). ``oldest``: the
        reverse order (oldest ``paused_at`` first, then ``job_id`` ascending), the inbox's "waiting
        longest" sort. Indexed (migration 11): a page costs its rows, not the number waiting."""

    @abc.abstractmethod
    async def inbox_entries(self, user_id: str, *, limit: int) -> list[InboxEntry]:
        """The first ``limit`` requests of :meth:`inbox` (unfiltered, in its order) as their keys
        and what the inbox filters by (job and request ids, pause time, flow, session, kind),
        read without the jobs' rows: what the inbox's live stream compares, at a fraction of
        the cost of the jobs."""

    @abc.abstractmethod
    async def inbox_count(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                          kind: str | None = None, cap: int = 1000) -> int:
        """How many requests :meth:`inbox` holds for the user with the same filters, counted up
        to ``cap`` (``cap`` means "at least that many"): a count whose cost is bounded whatever
        the number waiting."""

    @abc.abstractmethod
    async def inbox_flows(self, user_id: str) -> list[str]:
        """The ids of the flows of the requests :meth:`inbox` holds for the user (unfiltered),
        each once, sorted: the inbox's flow filter. Its cost grows with the number of flows, not
        of requests (migration 11's jobs_inbox_flows)."""

    # ---- webhooks: a user's endpoints for the human_input_* events of their runs (DESIGN §9)
    @abc.abstractmethod
    async def create_webhook(self, owner_id: str, url: str, events: Iterable[str], secret_ciphertext: bytes,
                             *, limit: int | None = None) -> Webhook | None:
        """Create a webhook (its id generated) subscribed to ``events`` (names, kept in the order
        given, duplicates once; ``"*"`` means every event). The signing secret is encrypted by the
        caller and kept as opaque bytes; ``secret_ciphertext`` that is not bytes (bytearray and
        memoryview are taken as bytes) raises TypeError, and a lone str for ``events``
        TypeError, before any change. ``limit``: when the owner has that many webhooks already,
        nothing is created and None is returned (counted in the creating transaction: concurrent
        creations of one existing user never pass it)."""

    @abc.abstractmethod
    async def list_webhooks(self, owner_id: str) -> list[Webhook]:
        """The owner's webhooks, oldest first (``created_at``, then id); never the secret."""

    @abc.abstractmethod
    async def get_webhook(self, webhook_id: str) -> WebhookRecord | None:
        """The webhook with its secret's ciphertext (whoever owns it: the caller checks)."""

    @abc.abstractmethod
    async def delete_webhook(self, owner_id: str, webhook_id: str) -> bool:
        """Delete the webhook with its deliveries, only when ``owner_id`` owns it; returns
        whether it did (another owner's webhook is untouched)."""

    @abc.abstractmethod
    async def webhooks_for(self, owner_ids: Iterable[str], event: str) -> list[WebhookRecord]:
        """Every webhook of those owners subscribed to ``event`` (its events name it exactly, or
        hold ``"*"``), with its secret, oldest first (``created_at``, then id). No owners: []."""

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
        """Record one delivery attempt (id and ``at`` set by the store)."""
        attempt_ = DeliveryAttempt(webhook_id=webhook_id, event=event, job_id=job_id, seq=seq, attempt=attempt,
                                   status_code=status_code, error=error, delivered=delivered)
        return (await self.log_deliveries([attempt_]))[0]

    @abc.abstractmethod
    async def log_deliveries(self, attempts: Sequence[DeliveryAttempt]) -> list[WebhookDelivery]:
        """Record delivery attempts in one transaction (all or none), in the order given (each
        its id and ``at`` set by the store; list_deliveries shows the later ones first). The
        deliveries of one event to many webhooks are logged in one commit this way
        (activities/webhooks.py: ``DeliveryLog``)."""

    @abc.abstractmethod
    async def delivered_webhooks(self, job_id: str, seq: int) -> set[str]:
        """The webhooks that took the event ``seq`` of ``job_id``: those with a delivered
        attempt logged (a retried delivery of the event goes to the others only)."""

    @abc.abstractmethod
    async def list_deliveries(self, webhook_id: str, *, limit: int = 100) -> list[WebhookDelivery]:
        """The webhook's delivery attempts, newest first (the order they were logged)."""

    # ---- reaching the person (DESIGN §14): contacts, one-time decision links, notifications
    @abc.abstractmethod
    async def set_contacts(self, user_id: str, contacts: dict[str, str | None], *,
                           verified: bool) -> User | None:
        """Set the contacts named in ``contacts`` (``email``, ``slack``; None clears one), the
        others kept; returns the user as it is then (None: no such user, nothing changed). An
        unknown key raises ValueError before any change. Each contact set is ``verified`` (an
        operator vouches) or pending; one set to the value it has keeps its state unless
        ``verified``; a cleared one is not verified. A ``slack`` id another user has verified
        raises StoreConflict, nothing changed (a Slack id is one user's: it says who pressed a
        button); another user's pending claim of it is released (it held nothing).
        The values are the caller's to check (engine/contacts.py)."""

    @abc.abstractmethod
    async def user_by_slack(self, slack_id: str) -> User | None:
        """The one user whose ``slack`` contact is ``slack_id`` (verified or not: the caller looks)."""

    @abc.abstractmethod
    async def create_contact_token(self, token: ContactToken, *, since: datetime, max_per_user: int,
                                   max_per_address: int) -> bool:
        """Store a contact's verification (``used_at`` and the delivery fields ignored) unless
        ``token.user_id`` has ``max_per_user`` or more created after ``since``, or
        ``token.address`` has ``max_per_address`` or more (the re-send cap); whether it did."""

    @abc.abstractmethod
    async def get_contact_token(self, token_hash: str) -> ContactToken | None: ...

    @abc.abstractmethod
    async def last_contact_token(self, user_id: str, channel: str) -> ContactToken | None:
        """``user_id``'s newest confirmation on ``channel`` (by ``created_at``), None when none is kept."""

    @abc.abstractmethod
    async def use_contact_token(self, token_hash: str, now: datetime) -> User | None:
        """Verify the contact the token was sent to, at ``now``, in one write: only when the token
        is unused, ``expires_at`` is after ``now`` and its user's contact of its channel is still
        its ``address``; then the token is used and that contact verified, and the user is
        returned. None when it did nothing. Of concurrent callers at most one succeeds."""

    @abc.abstractmethod
    async def finish_contact_token(self, token_hash: str, *, attempts: int, delivered: bool,
                                   error: str | None) -> None:
        """How the sending of the verification went (attempts so far, delivered, the last error)."""

    @abc.abstractmethod
    async def delete_expired_contact_tokens(self, now: datetime) -> int:
        """Forget the verifications whose ``expires_at`` is at or before ``now``; how many."""

    @abc.abstractmethod
    async def create_link(self, link: DecisionLink) -> None:
        """Store a decision link (its ``used_at`` ignored: a new link is unused). The token
        itself is never stored, only ``token_hash``."""

    @abc.abstractmethod
    async def get_link(self, token_hash: str) -> DecisionLink | None: ...

    @abc.abstractmethod
    async def use_link(self, token_hash: str, now: datetime) -> bool:
        """Mark the link used at ``now`` if it is unused and ``expires_at`` is after ``now``;
        whether this call did. Of concurrent callers exactly one wins."""

    @abc.abstractmethod
    async def unuse_link(self, token_hash: str, used_at: datetime) -> bool:
        """Give back a use (its decision was refused before anything was sent: the person may
        correct it), only when the link is still marked used at ``used_at`` (this caller's use);
        whether it did."""

    @abc.abstractmethod
    async def delete_expired_links(self, now: datetime) -> int:
        """Forget the links whose ``expires_at`` is at or before ``now``; how many."""

    @abc.abstractmethod
    async def log_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                               user_id: str, attempt: int, delivered: bool, error: str | None,
                               ref: str | None = None) -> Notification:
        """Record one attempt to tell ``user_id`` about event ``seq`` (of request ``request_id``)
        of the job on ``channel``; ``ref``: what the channel calls what it sent."""

    @abc.abstractmethod
    async def claim_notification(self, *, job_id: str, request_id: str, seq: int, event: str, channel: str,
                                 user_id: str, attempt: int) -> tuple[Notification | None, Notification | None]:
        """Claim the sending of event ``seq``'s notice to ``user_id`` on ``channel`` before it is
        sent (docs/channels.md, "Once"): ``(claim, None)`` when nobody holds it, the claim a new
        log row (``delivered`` false, ``error`` None: being sent, or its outcome unknown), or
        ``(None, holder)`` when a row of that (job, request, seq, channel, user) is delivered or
        still claimed. A row finished as failed (an error) holds nothing: it may be sent again.
        Of concurrent callers exactly one gets the claim."""

    @abc.abstractmethod
    async def finish_notification(self, notification_id: str, *, delivered: bool, error: str | None,
                                  ref: str | None = None) -> None:
        """The claim's outcome: delivered (with what the channel calls it, ``ref``), or failed
        (``error``: the claim is let go, a retry may send)."""

    @abc.abstractmethod
    async def list_notifications(self, job_id: str, *, limit: int = 100) -> list[Notification]:
        """The job's notification attempts, newest first (the order they were logged)."""

    # ---- mutes: a person who muted a requester gets none of that requester's requests (their
    # inbox, pending list and webhooks skip them; docs/security.md, "Fan-out and approvers")
    @abc.abstractmethod
    async def mute(self, user_id: str, muted_id: str) -> bool:
        """``user_id`` mutes ``muted_id``; returns whether that is new (muting twice: False, the
        first ``created_at`` kept). The store does not require either user to exist."""

    @abc.abstractmethod
    async def unmute(self, user_id: str, muted_id: str) -> bool:
        """Forget that mute; returns whether there was one."""

    @abc.abstractmethod
    async def list_mutes(self, user_id: str) -> list[str]:
        """The ids ``user_id`` muted, oldest mute first (then by id)."""

    @abc.abstractmethod
    async def muted_by(self, muted_id: str, user_ids: Iterable[str]) -> set[str]:
        """Of ``user_ids`` (a lone str: TypeError), those who muted ``muted_id``."""

    # ---- standing approvals (DESIGN §17, engine/standing.py): a rule per remembered tool approval
    @abc.abstractmethod
    async def create_standing_approval(self, rule: StandingApproval) -> StandingApproval:
        """Store ``rule``; a rule of that id already stored (a retried activity) is kept as it is and
        returned instead."""

    @abc.abstractmethod
    async def get_standing_approval(self, rule_id: str) -> StandingApproval | None:
        """The rule of that id, revoked or expired included."""

    @abc.abstractmethod
    async def list_standing_approvals(self, user_id: str, *, limit: int = 500) -> list[StandingApproval]:
        """The rules ``user_id`` made, and the rules on flows they own (``flow_owner_id``), newest
        first (then by id), revoked and expired ones included; at most ``limit``."""

    @abc.abstractmethod
    async def count_standing_approvals(self, maker_id: str, now: datetime) -> int:
        """How many of ``maker_id``'s rules are in force at ``now`` (not revoked, not expired)."""

    @abc.abstractmethod
    async def find_standing_approvals(self, flow_id: str, tool: str, session_id: str, session_user_id: str,
                                      now: datetime, *, limit: int = 10) -> list[StandingApproval]:
        """The rules in force at ``now`` that cover a call of ``tool`` in ``flow_id``: scope
        ``flow``, or scope ``session`` of ``session_id`` of ``session_user_id``'s runs. Newest
        first, at most ``limit``: one indexed query (migration 13)."""

    @abc.abstractmethod
    async def revoke_standing_approval(self, rule_id: str, at: datetime) -> bool:
        """Revoke the rule (it covers nothing from then on); False when there is no such rule or
        it was revoked already (the first ``revoked_at`` is kept)."""

    @abc.abstractmethod
    async def use_standing_approval(self, rule_id: str, at: datetime) -> None:
        """Count one use of the rule (``uses`` + 1, ``last_used_at``); nothing when it is gone."""

    # ---- flows and shares
    @abc.abstractmethod
    async def save_flow(self, owner_id: str, name: str, spec: dict[str, Any], *, flow_id: str | None = None) -> FlowRecord:
        """Create a flow, or (same id) store a new version of it."""

    @abc.abstractmethod
    async def get_flow(self, flow_id: str, *, version: int | None = None) -> FlowRecord | None:
        """The latest version, or the given ``version`` (the spec a job ran)."""

    @abc.abstractmethod
    async def list_flows(self, user_id: str) -> list[FlowRecord]:
        """Flows the user owns or may execute."""

    @abc.abstractmethod
    async def delete_flow(self, flow_id: str) -> bool: ...

    @abc.abstractmethod
    async def grant_share(self, flow_id: str, user_id: str, actions: Iterable[str]) -> None: ...

    @abc.abstractmethod
    async def revoke_share(self, flow_id: str, user_id: str) -> bool: ...

    @abc.abstractmethod
    async def list_shares(self, flow_id: str, *, limit: int = 100) -> list[tuple[str, list[str]]]:
        """Who the flow is shared with: (user id, its actions sorted), by user id, at most ``limit``
        (the flow page's share list)."""

    @abc.abstractmethod
    async def has_permission(self, flow_id: str, user_id: str, action: str = "execute") -> bool:
        """The owner may do anything; others need a share with that action."""

    # ---- jobs
    @abc.abstractmethod
    async def create_job(self, job: NewJob, *, max_in_flight: int = 0, max_stored_bytes: int = 0,
                         reads: SubmitReads | None = None) -> tuple[Job, bool]:
        """Insert a job; returns (job, created). With an idempotency key already used by the same
        user, returns (that first job, False) and inserts nothing.

        ``max_in_flight`` (0: no limit): when the user already has that many jobs ``queued`` or
        ``in_progress``, inserts nothing and raises RunsInFlightLimit (``retry_after`` set). The
        count is taken in the insert's transaction with the user's row locked, so racing creations
        for one existing user never pass it; a repeated idempotency key (or the same job again)
        answers the first job as without a limit.

        ``max_stored_bytes`` (0: no limit): a user who keeps that many bytes or more
        (stored_bytes) is refused first, StorageLimit, a repeated key included, nothing inserted.
        ``reads``: filled in the same transaction when the job is inserted (SubmitReads)."""

    @abc.abstractmethod
    async def get_job(self, job_id: str) -> Job | None: ...

    @abc.abstractmethod
    async def get_job_with_flow(self, job_id: str) -> tuple[Job | None, FlowRecord | None]:
        """The job and its flow as :meth:`get_flow` gives it (the latest version; None when the
        flow was deleted), in one read: a decision's check needs both (issue 33). (None, None)
        when there is no such job."""

    @abc.abstractmethod
    async def set_status(
        self,
        job_id: str,
        status: JobStatus,
        *,
        expect: Iterable[JobStatus] | None = None,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        event: tuple[str, dict[str, Any]] | None = None,
        spans: list[SpanRecord] | None = None,
        leftovers: tuple[str, str] | None = None,
        messages: Sequence[Message] = (),
    ) -> bool:
        """Set the status when the current one is in ``expect`` (any non-terminal when None).
        Returns whether the row changed. A terminal status never changes again. ``event``
        (name, data) is appended in the same transaction when the row changed, so a status and
        its event (``end``, ``run_failed``...) are written together or not at all. A terminal
        status also deletes the job's approver references in that transaction.

        ``spans``: saved as save_spans saves them, whether or not the row changed, and (when
        they are this job's) in the same transaction, so a reader who sees the status sees them.
        ``leftovers`` (run_id, blob prefix): when the row changed to a terminal status, that
        run's checkpoints and the blobs under the prefix are deleted in the same transaction
        (as delete_checkpoints and delete_blobs; an empty prefix deletes no blob). ``messages``:
        stored as add_message stores them (idempotent by id, counted to the job's user), in the
        same transaction and only when the row changed, before the event (a chat that shows the
        run's end shows its last message with it). Issue 33:
        a run's end in one commit."""

    # ---- inline runs (docs/inline.md): a job run in the API process holds a lease
    @abc.abstractmethod
    async def renew_lease(self, job_id: str, until: datetime) -> str:
        """Extend the lease of a leased (inline) job that is still ``queued``/``in_progress``.
        Returns ``"running"``, ``"cancel_requested"`` (renewed, but a stop asked the runner to
        cancel) or ``"ended"`` (nothing changed: the job ended, e.g. swept, or holds no lease)."""

    @abc.abstractmethod
    async def lease_state(self, job_id: str) -> str:
        """What renew_lease would answer, read without renewing (a read, no write): the
        runner's heartbeats between renewals look for a stop this way."""

    @abc.abstractmethod
    async def request_cancel(self, job_id: str) -> bool:
        """Ask the process running a leased job to cancel it (durable: seen at its next renewal).
        Returns whether the job was still running and leased."""

    @abc.abstractmethod
    async def fail_expired_leases(
        self, now: datetime, error: dict[str, Any], *, event: str = "run_failed", limit: int = 100
    ) -> list[str]:
        """``queued|in_progress → failed`` (with ``error``) for leased jobs whose lease ended before
        ``now``, each with its ``event`` {error, type, vertex_id} in the same transaction (and its
        approver references deleted); a lease renewed meanwhile wins. Returns the job ids ended."""

    @abc.abstractmethod
    async def list_unstarted(self, before: datetime, *, limit: int = 100) -> list[Job]:
        """Jobs still ``queued`` without a lease (runs for Temporal) created before ``before``:
        the candidates for a workflow that was never started (the submitting process died
        between the insert and the start)."""

    @abc.abstractmethod
    async def mark_suspended(
        self,
        job_id: str,
        pending: PendingRequest,
        *,
        event: tuple[str, dict[str, Any]] | None = None,
        dedupe_key: str | None = None,
        spans: list[SpanRecord] | None = None,
        checkpoint: PauseCheckpoint | None = None,
        messages: Sequence[Message] = (),
        approvers: Iterable[str] | None = None,
        reads: DecisionReads | None = None,
    ) -> bool:
        """``in_progress → suspended`` with the pending request. ``event`` (name, data), e.g.
        ``("human_input_required", ...)``, is appended in the same transaction, only when the row
        changes: a job that ended meanwhile (stopped) gets neither, so no event is ever written
        after its terminal one. With a ``dedupe_key`` already used for the job's events (an
        earlier attempt wrote the event), the event is not written again; the status still
        changes as without an event. ``spans``: saved as set_status saves them (this job's in
        the same transaction, whether or not the row changed): the pause in one commit.

        Only when the row changes, in the same transaction (issue 33: a pause's whole state in
        one commit): ``checkpoint``, written as save_checkpoint writes it (for this job, counted
        to its user); ``messages``, stored as add_message stores them (idempotent by id, counted
        to the job's user) before the event; ``approvers``, the request's references as
        set_request_approvers sets them (checked first: a bad reference raises before any
        change). A write that changes nothing writes none of them: the caller learns why from
        the job (ended: nothing of the pause is left behind; already waiting: an earlier attempt
        wrote them). ``reads``: the webhooks of ``reads.owners`` (all of theirs, whatever their
        events, as record_decision reads them: the pause's deliveries without a round trip of
        their own) read in that transaction too, filled only when the row changed; its
        ``notifications`` are not read here."""

    @abc.abstractmethod
    async def claim_suspended_for_resume(self, job_id: str, request_id: str, token: str | None = None) -> str | None:
        """``suspended → in_progress`` when the pending request id matches. Returns a claim token
        for the single winner, None for everyone else (who changed nothing).

        ``token``: the caller's own claim token (e.g. derived from a workflow Update id), stored
        instead of a random one. The same caller asking again with the same token while its claim
        is still the job's last one (status ``in_progress`` with that token, or a terminal status
        reached since: terminal statuses keep the token; a new pause clears it) gets it back, so
        a retried activity is safe and can read the job's real status; a different token never
        wins a claim that is held."""

    @abc.abstractmethod
    async def claim_decision(self, job_id: str, request_id: str, token: str, *, claim: bool = True) -> DecisionClaim:
        """The claim of :meth:`claim_suspended_for_resume` under ``token`` and, in the same
        transaction, the job as it is then and the decision's events written under that token
        (dedupe keys ``{token}:{key}`` for the DECISION_KEYS), so that an attempt of a decision
        that runs again (a retried activity, a workflow task that ran it and was lost) sees at
        once whether an earlier attempt with the same token already claimed, and what it
        recorded. ``claim=False`` only looks (``won``: the token holds the claim), taking none."""

    @abc.abstractmethod
    async def rollback_resume_claim(self, job_id: str, claim_token: str) -> bool:
        """``in_progress → suspended`` only for the claim that was taken (pending kept), and only
        while its request is still pending: a decision recorded under the claim
        (:meth:`record_decision` clears the request) is never rolled back into a job that waits
        for nothing. Whether it was rolled back."""

    @abc.abstractmethod
    async def claim_suspended_for_cancel(self, job_id: str, *, event: tuple[str, dict[str, Any]] | None = None) -> bool:
        """``suspended → cancelled`` for exactly one caller; clears the pending request. ``event``
        (name, data), e.g. ``("run_cancelled", {"reason": "stopped"})``, is appended in the same
        transaction by the winner only: the status and its event are written together or not at
        all (a crash in between cannot lose the event), and a loser writes nothing. The winner
        also deletes the job's approver references."""

    @abc.abstractmethod
    async def clear_pending(self, job_id: str) -> None: ...

    @abc.abstractmethod
    async def find_suspended(self, flow_id: str, user_id: str, effective_session: str) -> list[Job]:
        """Suspended jobs of that flow and user whose session (or, without one, flow id) matches."""

    @abc.abstractmethod
    async def list_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """Suspended jobs with a pending request visible to the user."""

    @abc.abstractmethod
    async def list_active_jobs(self, flow_id: str) -> list[Job]:
        """The flow's jobs that are not over (``queued``, ``in_progress`` or ``suspended``), of
        every user, oldest first (``created_at``, then ``job_id``). Jobs of a deleted flow are
        still listed: the store never deletes jobs with their flow."""

    # ---- workflows to let go of: a run the service ended (a stop, a supersede) whose workflow it
    # has not cancelled yet; written before the end, deleted once the workflow is cancelled, so a
    # process that dies in between leaves it for the sweep (docs/temporal.md)
    @abc.abstractmethod
    async def want_release(self, job_id: str) -> None:
        """Record that the job's workflow is to be cancelled once the job ends (idempotent)."""

    @abc.abstractmethod
    async def releases_due(self, before: datetime, *, limit: int = 100) -> list[str]:
        """Job ids recorded by want_release before ``before``, oldest first, at most ``limit``."""

    @abc.abstractmethod
    async def released(self, job_id: str) -> None:
        """Forget the job's want_release (done, or nothing to do)."""

    @abc.abstractmethod
    async def delete_checkpoints_of_ended_runs(self) -> int:
        """Delete every checkpoint whose job has ended (completed, failed, cancelled, timed
        out), giving back their bytes; how many. A backstop for the cleanup of a run's end
        (engine/lifecycle.py), which a process killed between a late checkpoint write and its
        look at the job cuts short: an ended run needs no checkpoint."""

    # ---- deleting ended runs (docs/security.md, "Budgets per user"): what frees a user's stored bytes
    @abc.abstractmethod
    async def delete_run(self, job_id: str) -> bool:
        """Delete an ended job and everything the store keeps of it, in one transaction: the job
        row, its events (and their seq counter), the messages with its ``job_id``, its checkpoints
        (``run_id`` or ``job_id``), its spans (``trace_id`` or ``run_id``: run_id = job_id), its
        blobs (``runs/<job id>/``), its approver references, its participants, its decision links,
        its notification log and its receipts (docs/audit.md); what those rows
        counted is given back to its user (stored_bytes is then what a fresh count of what is
        left would give). Returns whether it was deleted. Only a job that has ended (completed,
        failed, cancelled, timed out) and whose workflow is let go of (no want_release left: the
        sweep still has to cancel it) is deleted; any other job, or none, changes nothing and
        gives False. The check and the delete are one statement on the job's row, so a resume or
        a stop racing it either sees the job gone (it had ended: nothing to resume) or keeps it.
        Kept: the delivery log of webhooks that told of the run (their owners' log, bounded by
        its own limit) and other runs of the same session, flow or user."""

    @abc.abstractmethod
    async def delete_runs_ended_before(self, before: datetime, *, limit: int = 500) -> list[str]:
        """delete_run for at most ``limit`` jobs that ended (``finished_at``) before ``before``,
        oldest end first, each in its own transaction (a batch never holds the database long);
        returns the ids deleted. Reads only the jobs it deletes (an index on the end time), not
        every run ever: what the API's sweep calls for SIGNOFF_RUN_RETENTION_DAYS."""

    @abc.abstractmethod
    async def pending_ages(self, now: datetime, bounds: Sequence[float]) -> list[PendingAges]:
        """The requests waiting (``suspended`` jobs) per flow: how many, how many of them paused
        at most each of ``bounds`` seconds before ``now``, the oldest pause, and the sum of their
        ages at ``now`` (a histogram's sum); one entry per
        flow that has any, the most waiting first. What the metrics report (signoff_pending_age_seconds),
        read when they are scraped: one pass over the waiting jobs."""

    @abc.abstractmethod
    async def count_jobs(self) -> dict[str, int]:
        """How many jobs there are of each status (only statuses that have some): what the
        metrics report, read when they are scraped."""

    @abc.abstractmethod
    async def list_user_active_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs that are not over (``queued``, ``in_progress`` or ``suspended``), of
        every flow, oldest first (``created_at``, then ``job_id``)."""

    # ---- events
    @abc.abstractmethod
    async def append_event(self, job_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None = None,
                           receipt: ReceiptMaker | None = None, standing_use: tuple[str, datetime] | None = None) -> int:
        """Append; returns the gap-free per-job seq (1, 2, ...) even under concurrent writers.
        With a ``dedupe_key`` (unique per job) already used, writes nothing and returns the seq
        of the event written with it (a retried activity appends once). ``receipt``: a receipt
        written with the event, never without it (a standing approval's use, engine/standing.py).
        ``standing_use`` (rule id, at): the rule's use counted (as use_standing_approval) in the
        same transaction, only when the event is written (a dedupe counts nothing)."""

    @abc.abstractmethod
    async def append_event_if_waiting(
        self, job_id: str, request_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None,
        receipt: ReceiptMaker | None = None,
    ) -> int | None:
        """Append the event only while the job waits for that request: in one transaction with a
        check that it is ``suspended`` with ``pending_request_id == request_id`` (a resume or
        cancel claim, or a new pause, is ordered entirely before or after it). Returns the new
        seq (gap-free, as append_event), or None, writing nothing, when the job does not wait
        for that request (stopped, superseded, the decision already claimed, no such job).
        With a ``dedupe_key`` already used for the job, writes nothing and returns that event's
        seq, even when the job no longer waits: the event was recorded (e.g. by the first
        attempt of a retried vote). Records each vote of a quorum exactly once. ``receipt``: the
        vote's receipt, written with the event (see :data:`ReceiptMaker`), never without it."""

    # ---- receipts (DESIGN §16): written with the decision's records, deleted with the run
    @abc.abstractmethod
    async def read_receipts(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[ReceiptRecord]:
        """The run's receipts after ``after_seq``, in chain order (seq 1, 2, ...)."""

    @abc.abstractmethod
    async def list_receipts(self, *, since: datetime, until: datetime | None = None, flow_id: str | None = None,
                            after: tuple[datetime, str, int] | None = None, limit: int = 500) -> list[ReceiptRecord]:
        """Receipts of every run with ``since <= at < until`` (of ``flow_id``'s runs only), by
        (at, job_id, seq); ``after``: the (at, job_id, seq) of the last one of the previous page."""

    @abc.abstractmethod
    async def record_decision(self, job_id: str, events: Sequence[tuple[str, dict[str, Any], str]], *,
                              token: str, request_id: str, action_id: str, participants: Iterable[str],
                              claim: bool = False, receipt: ReceiptMaker | None = None,
                              access_since: tuple[str, datetime] | None = None,
                              reads: DecisionReads | None = None,
                              stamp: datetime | None = None) -> list[int] | None:
        """A decision's records in one transaction, while the job is ``in_progress`` under the
        claim ``token`` (claim_suspended_for_resume; with ``claim``, the claim is taken first in
        the same transaction when the job is ``suspended`` waiting for ``request_id``, as
        claim_decision takes it: one commit for the claim and the decision, and none when either
        is refused): ``events`` ((name, data, dedupe key), e.g.
        the vote that completed a quorum, ``human_input_expired``, ``human_input_decision``)
        appended in order with gap-free seqs, the chat card of ``request_id`` stamped with
        ``action_id`` (as stamp_card), the job's pending request cleared, and ``participants``
        recorded (as add_participants). Returns the events' seqs. An event whose key was used
        already keeps that event's seq and is not written again. Nothing at all is written, and
        None is returned, when every key was used (another attempt with the same token recorded
        its decision first: the caller goes on from that one, Store.claim_decision shows it) or
        when the claim is no longer the job's (a stop ended it meanwhile: no event ever follows
        the job's terminal one). ``receipt``: the decision's receipt, written in the same
        transaction (see :data:`ReceiptMaker`), and not at all when nothing is.
        ``access_since`` (user id, when): the decider was checked then, by the caller's caller
        (the API's pre-check, carried to the worker): AccessChanged, nothing written, when an
        access note of that user (ACCESS_NOTES) was written after it, read in the transaction.
        ``reads``: filled in the same transaction when the records are written (DecisionReads).
        ``stamp`` (with ``claim``): the job's ``updated_at`` as the caller read it (a job carried
        from the API's read, engine/carried.py); the claim is taken only while the row still has
        that stamp (every change of a job's row sets it), else nothing is written (None), as for
        a job that no longer waits: the caller, who cannot tell which, looks again."""

    @abc.abstractmethod
    async def read_events(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[Event]: ...

    @abc.abstractmethod
    async def last_event_seq(self, job_id: str) -> int:
        """The seq of the job's last appended event (its counter; 0 for none): a log read back
        that ends before it was cut (engine/audit/events.py)."""

    @abc.abstractmethod
    async def read_events_named(self, job_id: str, event: str) -> list[Event]:
        """The job's events named ``event``, in seq order (e.g. its ``human_input_decision`` events:
        a few per run, whatever the length of its log)."""


    @abc.abstractmethod
    def tail_events(self) -> AsyncIterator[list[EventNote] | None]:
        """Every event appended to this store from now on, by any process, in batches as they
        commit (a job's in seq order). The first batch is empty and comes once the tail is in
        place: whatever commits after it is told. ``None`` says notes may have been missed (the
        tail lost its place, e.g. a reconnect): a follower reads again what it shows. Raises
        StoreError when the store is away; a new tail then starts afresh. One tail per process
        (service/feed.py) serves every follower, so a backend may hold a connection for it.
        Revoking a key or the keys of a user, deleting a user and revoking a share also append
        an access note (``ACCESS_NOTES``), which the tail tells as any event."""

    # ---- spans
    @abc.abstractmethod
    async def save_spans(self, spans: list[SpanRecord]) -> None:
        """Upsert by (trace_id, span_id)."""

    @abc.abstractmethod
    async def get_trace(self, trace_id: str) -> list[SpanRecord]: ...

    @abc.abstractmethod
    async def list_traces(
        self, *, flow_id: str | None = None, user_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """One row per trace, newest first: trace_id, run_id, flow_id, name, status, start_time,
        end_time. ``flow_id``: only traces with a span of that flow. ``user_id``: only traces of
        that user's runs, i.e. whose run (the spans' ``run_id``, or the trace id when no span
        has one) is the ``run_id`` of a job of that user; a trace without a job is nobody's.
        Both filters apply before ``limit``, so a user with few runs among many gets all of
        them up to the limit."""

    # ---- blobs (large vertex outputs kept out of Temporal history)
    @abc.abstractmethod
    async def put_blob(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    async def get_blob(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def delete_blobs(self, prefix: str) -> int: ...
