"""Jobs, in memory: create, status, the single-flight claims of a decision, a stop and a
supersede, the pending lists, and inline runs' lease, stop request and sweep (docs/inline.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from signoff.engine.models import (
    DECISION_KEYS,
    TERMINAL_STATUSES,
    DecisionClaim,
    Event,
    FlowRecord,
    Job,
    JobStatus,
    Message,
    NewJob,
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
from signoff.engine.store.encoding import as_utc, dumps, octets, unique_strings
from signoff.engine.store.memory.core import _event, _first, _holds, _Job, MemoryCore, _RUNNING, _same, _Tables


class MemoryJobs(MemoryCore):
    """Part of MemoryStore: jobs."""

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

    async def create_job(self, job: NewJob, *, max_in_flight: int = 0, max_stored_bytes: int = 0,
                         reads: SubmitReads | None = None) -> tuple[Job, bool]:
        """See Store.create_job: the user's stored bytes, the idempotency key, then the same job
        submitted again, then the user's jobs in flight (no await in between: one step of the
        event loop)."""
        status = JobStatus(job.status)
        request = dumps(job.request)
        now = utcnow()
        t = self._tables()
        if max_stored_bytes > 0:
            stored_bytes_check(t.stored.get(job.user_id, 0), max_stored_bytes)
        keyed = t.idempotency.get((job.user_id, job.idempotency_key)) if job.idempotency_key is not None else None
        if keyed is None and job.job_id not in t.jobs:
            if max_in_flight > 0:
                in_flight = sum(1 for r in t.jobs.values() if r.user_id == job.user_id and r.status in _RUNNING)
                runs_in_flight_check(in_flight, max_in_flight)
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
            self._charge(t, job.user_id, octets(request))
            if reads is not None:
                reads.suspended = self._suspended(t, job.flow_id, job.user_id, job.effective_session)
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

    async def get_job_with_flow(self, job_id: str) -> tuple[Job | None, FlowRecord | None]:
        """See Store.get_job_with_flow."""
        row = self._tables().jobs.get(job_id)
        if row is None:
            return None, None
        return self._job(row), await self.get_flow(row.flow_id)  # type: ignore[attr-defined]  # MemoryFlows

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
        """See Store.set_status. A terminal status also clears the pending request and sets
        finished_at; the claim token stays (it records which resume claim led to the end).
        One step: nothing below awaits anything else (``spans`` and ``leftovers`` included)."""
        if spans:
            await self.save_spans(spans)  # type: ignore[attr-defined]
        for message in messages:  # refused (a card that is not JSON) before any change
            dumps(message.card)
        if messages and await self._set_status(job_id, status, expect=expect, result=result, error=error,
                                               event=None, check=True):
            for message in messages:  # the run's last words, then its end (add_message awaits nothing)
                await self.add_message(message)  # type: ignore[attr-defined]
        changed = await self._set_status(job_id, status, expect=expect, result=result, error=error, event=event)
        if changed and JobStatus(status).terminal and leftovers is not None:
            await self.delete_checkpoints(leftovers[0])  # type: ignore[attr-defined]
            if leftovers[1]:
                await self.delete_blobs(leftovers[1])  # type: ignore[attr-defined]
        return changed

    async def _set_status(self, job_id: str, status: JobStatus, *, expect: Iterable[JobStatus] | None,
                          result: dict[str, Any] | None, error: dict[str, Any] | None,
                          event: tuple[str, dict[str, Any]] | None, check: bool = False) -> bool:
        """``check``: whether it would change the row, nothing changed."""
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
        if check:
            return True
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
        self._charge(t, row.user_id, octets(result_body) + octets(error_body))
        return True

    # ---- inline runs: lease, stop request, sweep (docs/inline.md)

    async def renew_lease(self, job_id: str, until: datetime) -> str:
        row = self._tables().jobs.get(job_id)
        if row is None or not row.leased_and_running:
            return "ended"
        row.lease_until = as_utc(until)
        return "cancel_requested" if row.cancel_requested_at is not None else "running"

    async def lease_state(self, job_id: str) -> str:
        row = self._tables().jobs.get(job_id)
        if row is None or not row.leased_and_running:
            return "ended"
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
            self._charge(t, row.user_id, octets(body))
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
        spans: list[SpanRecord] | None = None,
        checkpoint: PauseCheckpoint | None = None,
        messages: Sequence[Message] = (),
        approvers: Iterable[str] | None = None,
        reads: DecisionReads | None = None,
    ) -> bool:
        """``queued|in_progress → suspended`` with the pending request (any stale claim dropped);
        ``event`` appended with it, unless ``dedupe_key`` was used (see Store.mark_suspended);
        ``checkpoint``, ``messages`` and ``approvers`` with it, only when the row changes. One
        step: nothing below awaits anything else."""
        refs = self._parse_refs(approvers) if approvers is not None else None  # type: ignore[attr-defined]
        for message in messages:  # refused (a card that is not JSON) before any change
            dumps(message.card)
        if checkpoint is not None:
            dumps(checkpoint.data)
        owners = set(unique_strings(reads.owners, "owner_ids")) if reads is not None else set()
        if spans:
            await self.save_spans(spans)  # type: ignore[attr-defined]  # one step: it awaits nothing else
        body = dumps(pending.model_dump(mode="json"))
        ev = _event(event)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is None or row.status not in _RUNNING:
            return False
        if ev is not None:  # first: it raises before writing anything
            self._append(t, job_id, *ev, dedupe_key)
        if refs is not None:  # who may decide, as the status shows
            await self.set_request_approvers(job_id, pending.request_id, list(refs))  # type: ignore[attr-defined]
        if checkpoint is not None:  # the pause's state, with the pause (DESIGN §1.1)
            await self.save_checkpoint(checkpoint.run_id, checkpoint.data, job_id=job_id,  # type: ignore[attr-defined]
                                       expires_at=checkpoint.expires_at)
        for message in messages:  # the card (and what came before it), then its event
            await self.add_message(message)  # type: ignore[attr-defined]  # awaits nothing
        row.status, row.pending, row.pending_request_id = JobStatus.suspended, body, pending.request_id
        row.claim_token, row.updated_at = None, utcnow()
        if reads is not None:  # in the same step (this awaits nothing)
            reads.webhooks = [self._webhook_record(h)  # type: ignore[attr-defined]
                              for h in self._hooks(lambda h: h.owner_id in owners)]  # type: ignore[attr-defined]
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
                                              created_at=e.created_at, sha256=e.sha256, prev_sha256=e.prev_sha256)
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
        return self._suspended(self._tables(), flow_id, user_id, effective_session)

    def _suspended(self, t: _Tables, flow_id: str, user_id: str, effective_session: str) -> list[Job]:
        found = [
            r
            for r in t.jobs.values()
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
