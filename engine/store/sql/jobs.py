"""Jobs in SQL: creation with its idempotency, status changes, the pause, the claims, and the
leases of inline runs.

Every claim is one conditional UPDATE whose changed-row count says who won (docs/store.md).
A status change that comes with an event appends it in the same transaction, through
:meth:`SQLEvents._append`, which is why this group extends the events group.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from signoff.engine.models import (
    DECISION_KEYS,
    TERMINAL_STATUSES,
    DecisionClaim,
    FlowRecord,
    Job,
    JobStatus,
    Message,
    NewJob,
    PendingAges,
    PendingRequest,
    SpanRecord,
    utcnow,
)
from signoff.engine.store.base import (
    DecisionReads,
    PauseCheckpoint,
    StoreConflict,
    StoreError,
    SubmitReads,
    runs_in_flight_check,
    stored_bytes_check,
)
from signoff.engine.store.encoding import approver_ref, unique_strings
from signoff.engine.store.sql.core import Tx
from signoff.engine.store.sql.events import DuplicateEvent, SQLEvents
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLJobs"]


class SQLJobs(SQLEvents):
    """Part of SQLStore: jobs, their claims and leases."""

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

    async def create_job(self, job: NewJob, *, max_in_flight: int = 0, max_stored_bytes: int = 0,
                         reads: SubmitReads | None = None) -> tuple[Job, bool]:
        """See Store.create_job: with ``max_in_flight``, the user's row is locked first (SQLite's
        write transaction is one at a time already); then the user's stored bytes read
        (``max_stored_bytes``), a repeat looked for, the user's jobs in flight counted, the
        insert; then what ``reads`` asks for (by the index jobs_suspended_session)."""
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

        suspended: list[dict[str, Any]] = []

        async def write(tx: Tx) -> tuple[dict[str, Any] | None, bool | None]:
            """The job's row and whether it was created (None: neither created nor a repeat)."""
            if max_in_flight > 0:
                await tx.execute(Q.lock_user, (job.user_id,))
            if max_stored_bytes > 0:
                # a repeat too, as check_stored_bytes before the insert was; read once the user's
                # row is locked (with max_in_flight), so one user's submits at the same moment
                # each see what the one before charged: none passes a count that another filled
                used = await tx.fetchone(Q.stored_bytes, (job.user_id,))
                stored_bytes_check(int(used["bytes"] or 0) if used else 0, max_stored_bytes)
            if max_in_flight > 0:
                row = (await tx.fetchone(Q.job_by_idempotency, (job.user_id, job.idempotency_key))
                       if job.idempotency_key is not None else None)
                if row is not None:
                    return row, False
                if await tx.fetchone(Q.job_by_id, (job.job_id,)) is None:
                    count = await tx.fetchone(Q.count_in_flight, (job.user_id,))
                    runs_in_flight_check(int(count["n"]) if count is not None else 0, max_in_flight)
            row = await tx.fetchone(insert, params)
            if row is not None:
                await self._charge(tx, job.user_id, self._json_octets(params[6]), job.job_id)  # the request
                if reads is not None:  # the runs it supersedes, as find_suspended reads them
                    suspended[:] = await tx.fetchall(Q.find_suspended, (job.flow_id, job.user_id,
                                                                        job.effective_session))
                return row, True
            if job.idempotency_key is not None:
                row = await tx.fetchone(Q.job_by_idempotency, (job.user_id, job.idempotency_key))
                if row is not None:
                    return row, False
            return await tx.fetchone(Q.job_by_id, (job.job_id,)), None

        row, created = await self._write(write)
        if created is not None:
            assert row is not None
            if created and reads is not None:
                reads.suspended = [self._job(r) for r in suspended]
            return self._job(row), created
        if row is not None and row["user_id"] == job.user_id and row["flow_id"] == job.flow_id:
            return self._job(row), False  # the same job submitted again (e.g. an activity retry)
        raise StoreConflict(f"A different job with id {job.job_id!r} already exists.")

    async def get_job(self, job_id: str) -> Job | None:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.job_by_id, (job_id,))
        return self._job(row) if row else None

    async def get_job_with_flow(self, job_id: str) -> tuple[Job | None, FlowRecord | None]:
        """See Store.get_job_with_flow: one statement (the flow joined to the job)."""
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.job_with_flow, (job_id,))
        if row is None:
            return None, None
        if row["f_id"] is None:  # the flow was deleted
            return self._job(row), None
        return self._job(row), self._flow(  # type: ignore[attr-defined]  # SQLFlows, beside this group
            {k[2:]: v for k, v in row.items() if k.startswith("f_")})

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
        """See Store.set_status. A terminal status also clears the pending request and the claim
        and sets finished_at; ``result``/``error`` are written only when given; ``messages``
        (before the event, as add_message writes them) and ``event`` are written in the same
        transaction when (and only when) the row changed. ``spans`` of
        this job (or of none) are saved in that transaction, after the job row (save_spans'
        order); spans of other runs are saved first, on their own. What the writes count goes
        to one usage row of the job's user (the job's shard)."""
        status = JobStatus(status)
        allowed = [JobStatus(s) for s in expect] if expect is not None else list(JobStatus)
        allowed = sorted({s.value for s in allowed if s not in TERMINAL_STATUSES})
        together = bool(spans) and all(s.run_id in (None, job_id) for s in spans or ())
        if spans and (not together or not allowed):
            await self.save_spans(spans)  # type: ignore[attr-defined]  # SQLSpans, beside this group
        if not allowed:
            return False
        now = self._enc_dt(utcnow())
        sets = ["status = ?", "updated_at = ?"]
        params: list[Any] = [status.value, now]
        size = 0  # result and error are written once, with the terminal status (counted then)
        if result is not None:
            sets.append("result = ?")
            params.append(self._enc_json(result))
            size += self._json_octets(params[-1])
        if error is not None:
            sets.append("error = ?")
            params.append(self._enc_json(error))
            size += self._json_octets(params[-1])
        if status.terminal:
            # the claim token is kept: it records which resume claim led to this end (a retried
            # claimant learns that its run already ended); rollback needs in_progress anyway
            sets += ["finished_at = ?", "pending = NULL", "pending_request_id = NULL"]
            params.append(now)
        sql = f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ? AND status IN ({', '.join('?' for _ in allowed)})"
        body = self._enc_event(event[1]) if event is not None else None

        async def write(tx: Tx) -> bool:
            total = size  # with the messages' octets
            changed = await tx.execute(sql, (*params, job_id, *allowed)) > 0
            for message in messages if changed else ():  # the run's last words, then its end
                total += (await self._insert_message(tx, message))[1]  # type: ignore[attr-defined]  # SQLMessages
            if changed and event is not None:
                await self._append(tx, job_id, event[0], body, None)
            if changed and status.terminal:  # an ended job waits for nobody (approvals.py)
                await tx.execute(Q.delete_job_approvers, (job_id,))
            back: list[dict[str, Any]] = []  # what to give back, as _refund takes it
            if changed and status.terminal and leftovers is not None:
                run_id, prefix = leftovers
                back += await tx.fetchall(Q.delete_checkpoints, (run_id,))
                if prefix:
                    back += await tx.fetchall(Q.delete_blobs, (len(prefix), prefix))
            if together or back:
                if changed and total:
                    row = await tx.fetchone(Q.job_user, (job_id,))
                    back.append({"charged_to": row["user_id"] if row else None, "size": -total})
                await self._spans_of_job(tx, job_id, spans or [], back)
            elif changed:
                await self._charge_job(tx, job_id, total)
            return changed

        return await self._write(write)

    # ---- inline runs: lease, stop request, sweep (docs/inline.md)

    async def renew_lease(self, job_id: str, until: datetime) -> str:
        """See Store.renew_lease."""
        enc = self._enc_dt(until)
        row = await self._write(lambda tx: tx.fetchone(Q.renew_lease, (enc, job_id)))
        if row is None:
            return "ended"
        return "cancel_requested" if row["cancel_requested_at"] is not None else "running"

    async def lease_state(self, job_id: str) -> str:
        """See Store.lease_state."""
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.lease_state, (job_id,))
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
        data = self._enc_event({"error": error.get("error"), "type": error.get("type"), "vertex_id": error.get("vertex_id")})
        for row in rows:
            stamp = self._enc_dt(utcnow())
            async with self._tx(write=True) as tx:
                # conditional on the lease still being expired: a renewal that got in first wins
                if await tx.execute(Q.fail_expired, (body, stamp, stamp, row["job_id"], enc_now)) > 0:
                    await self._append(tx, row["job_id"], event, data, None)
                    await tx.execute(Q.delete_job_approvers, (row["job_id"],))
                    await self._charge_job(tx, row["job_id"], self._json_octets(body))
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
        spans: list[SpanRecord] | None = None,
        checkpoint: PauseCheckpoint | None = None,
        messages: Sequence[Message] = (),
        approvers: Iterable[str] | None = None,
        reads: DecisionReads | None = None,
    ) -> bool:
        """``queued|in_progress → suspended`` with the pending request (any stale claim dropped);
        ``event`` appended in the same transaction only when the row changed (see
        Store.mark_suspended). The UPDATE comes first: it locks the job row, so a concurrent
        terminal write (stop) either committed before (nothing changes here, no event) or waits
        for this transaction (its terminal event comes after this one). ``spans``: as set_status
        saves them. ``checkpoint``, ``messages`` and ``approvers``: after the UPDATE, only when
        it changed the row; what they count goes to the job's user with the spans' (one usage
        write)."""
        if spans and not all(s.run_id in (None, job_id) for s in spans):
            await self.save_spans(spans)  # type: ignore[attr-defined]  # another run's: on their own
            spans = None
        # ValueError / TypeError before any change (as set_request_approvers checks them)
        refs = [(r, *approver_ref(r)) for r in unique_strings(approvers, "refs")] if approvers is not None else None
        body = self._enc_json(pending.model_dump(mode="json"))
        data = self._enc_event(event[1]) if event is not None else None
        # what the inbox sorts and filters by (migration 11), beside the request's JSON
        inbox = (self._enc_dt(pending.paused_at), pending.kind, int(bool(pending.approvers or pending.approver_refs)))
        owners = unique_strings(reads.owners, "owner_ids") if reads is not None else []
        cp = None
        if checkpoint is not None:
            cp_body = self._enc_json(checkpoint.data)
            cp = (checkpoint.run_id, cp_body, self._enc_dt(checkpoint.expires_at), self._json_octets(cp_body))

        async def write(tx: Tx, with_event: bool = True) -> bool:
            changed = await tx.execute(
                Q.mark_suspended, (body, pending.request_id, *inbox, self._enc_dt(utcnow()), job_id)) > 0
            total, user = 0, None  # what the pause's own rows count to the job's user
            if changed and refs is not None:  # who may decide, as the status shows
                await self._write_refs(tx, job_id, pending.request_id, refs, replace=True)  # type: ignore[attr-defined]
            if changed and cp is not None:  # the pause's state, with the pause (DESIGN §1.1)
                run_id, cp_body, expires, size = cp
                user = await self._job_user(tx, job_id)
                await tx.execute(Q.insert_checkpoint, (
                    str(uuid.uuid4()), run_id, job_id, cp_body, self._enc_dt(utcnow()), expires, size, user))
                total += size
            for message in messages if changed else ():  # the card (and what came before it), then its event
                total += (await self._insert_message(tx, message))[1]  # type: ignore[attr-defined]  # SQLMessages
            if changed and event is not None and with_event:
                await self._append(tx, job_id, event[0], data, dedupe_key)
            if spans:
                back: list[dict[str, Any]] = []
                if total:
                    back.append({"charged_to": user or await self._job_user(tx, job_id), "size": -total})
                await self._spans_of_job(tx, job_id, spans, back)
            elif total:
                await self._charge_job(tx, job_id, total)
            if changed and reads is not None:  # the deliveries' webhooks, read here (no round trip of their own)
                hooks = await tx.fetchall(Q.webhooks_of_owners.format(owners=", ".join("?" for _ in owners)),
                                          owners) if owners else []
                reads.webhooks = [self._webhook_record(r) for r in hooks]  # type: ignore[attr-defined]
            return changed

        try:
            return await self._write(write)
        except DuplicateEvent:  # the event is there (an earlier attempt): the status change alone
            return await self._write(lambda tx: write(tx, with_event=False))

    async def _spans_of_job(self, tx: Tx, job_id: str, spans: list[SpanRecord],
                            back: list[dict[str, Any]] | None = None) -> None:
        """Save ``spans`` (the job's, or nobody's) in ``tx``, which changes the job's row (or
        locks it here: save_spans' order), counted in one usage row per user, the job's shard,
        with what else the caller gives ``back``."""
        written: list[dict[str, Any]] = []
        if spans:
            row = await tx.fetchone(Q.lock_job_user, (job_id,))
            users = {None: None, job_id: row["user_id"] if row else None}
            written = await self._write_spans(tx, spans, users)  # type: ignore[attr-defined]  # SQLSpans
        await self._refund(tx, written + (back or []), job_id)

    async def claim_suspended_for_resume(self, job_id: str, request_id: str, token: str | None = None) -> str | None:
        """See Store.claim_suspended_for_resume. With a caller-supplied ``token``, a caller whose
        claim under that token is still the job's last one (job ``in_progress``, or ended since)
        wins again: a retried activity whose first attempt committed the claim is not locked
        out, and finds the job's real status with get_job."""
        fresh = token or uuid.uuid4().hex

        async def write(tx: Tx) -> bool:
            won = await tx.execute(Q.claim_resume, (fresh, self._enc_dt(utcnow()), job_id, request_id)) > 0
            if not won and token:
                won = await tx.fetchone(Q.claim_held, (job_id, token)) is not None
            return won

        return fresh if await self._write(write) else None

    async def claim_decision(self, job_id: str, request_id: str, token: str, *, claim: bool = True) -> DecisionClaim:
        """See Store.claim_decision: claim_suspended_for_resume's two statements, then the job
        and the token's events, in one transaction."""
        if not token:
            raise StoreError("A decision's claim token is a non-empty string.")
        async with self._tx(write=claim) as tx:
            won = claim and await tx.execute(Q.claim_resume, (token, self._enc_dt(utcnow()), job_id, request_id)) > 0
            if not won:
                won = await tx.fetchone(Q.claim_held, (job_id, token)) is not None
            row = await tx.fetchone(Q.job_by_id, (job_id,))
            rows = await tx.fetchall(Q.decision_events, (job_id, *(f"{token}:{k}" for k in DECISION_KEYS)))
        recorded = {r["dedupe_key"][len(token) + 1:]: self._event(r) for r in rows}
        return DecisionClaim(won=won, job=self._job(row) if row else None, recorded=recorded)

    async def rollback_resume_claim(self, job_id: str, claim_token: str) -> bool:
        async with self._tx(write=True) as tx:
            return await tx.execute(Q.rollback_resume, (self._enc_dt(utcnow()), job_id, claim_token)) > 0

    async def claim_suspended_for_cancel(self, job_id: str, *, event: tuple[str, dict[str, Any]] | None = None) -> bool:
        """See Store.claim_suspended_for_cancel: ``event`` is appended in the claim's transaction,
        only by the winner."""
        now = self._enc_dt(utcnow())
        body = self._enc_event(event[1]) if event is not None else None
        async with self._tx(write=True) as tx:
            won = await tx.execute(Q.claim_cancel, (now, now, job_id)) > 0
            if won and event is not None:
                await self._append(tx, job_id, event[0], body, None)
            if won:
                await tx.execute(Q.delete_job_approvers, (job_id,))
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

    async def list_active_jobs(self, flow_id: str) -> list[Job]:
        """See Store.list_active_jobs."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.flow_active_jobs, (flow_id,))
        return [self._job(r) for r in rows]

    async def want_release(self, job_id: str) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.want_release, (job_id, self._enc_dt(utcnow())))

    async def releases_due(self, before: datetime, *, limit: int = 100) -> list[str]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.releases_due, (self._enc_dt(before), limit))
        return [r["job_id"] for r in rows]

    async def released(self, job_id: str) -> None:
        async with self._tx(write=True) as tx:
            await tx.execute(Q.released, (job_id,))

    async def pending_ages(self, now: datetime, bounds: Sequence[float]) -> list[PendingAges]:
        # one count per bound, as parameters (the bounds are the caller's numbers, never text)
        within = ", ".join(f"SUM(CASE WHEN paused_at >= ? THEN 1 ELSE 0 END) AS w{i}" for i in range(len(bounds)))
        # a pause as seconds since 1970, in each dialect's words: their sum gives the ages' sum
        epoch = ("(julianday(paused_at) - 2440587.5) * 86400.0" if self.dialect == "sqlite"
                 else "EXTRACT(EPOCH FROM paused_at)")
        sql = (f"SELECT flow_id, count(*) AS n, min(paused_at) AS oldest, SUM({epoch}) AS epochs"
               f"{', ' + within if within else ''} FROM jobs "
               "WHERE status = 'suspended' GROUP BY flow_id ORDER BY n DESC, flow_id")
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql, tuple(self._enc_dt(now - timedelta(seconds=b)) for b in bounds))
        return [PendingAges(flow_id=r["flow_id"], count=int(r["n"]),
                            within=tuple(int(r[f"w{i}"] or 0) for i in range(len(bounds))),
                            oldest=self._dec_dt(r["oldest"]),
                            seconds=max(0.0, int(r["n"]) * now.timestamp() - float(r["epochs"] or 0)))
                for r in rows]

    async def count_jobs(self) -> dict[str, int]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.count_jobs)
        return {r["status"]: int(r["n"]) for r in rows}

    async def list_user_active_jobs(self, user_id: str) -> list[Job]:
        """See Store.list_user_active_jobs."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.user_active_jobs, (user_id,))
        return [self._job(r) for r in rows]
