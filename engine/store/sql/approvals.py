"""Who may decide a pending request, and the votes written only while it waits, in SQL.

Approver references (``user:<id>``, ``group:<owner_id>/<name>``) are rows per (job, request,
reference), with the user or the group's owner and name in their own columns: a group
reference matches the members of exactly that owner's group. ``list_assigned_pending`` reads
memberships at query time and checks each reference against the job's *current* request, so
rows of an earlier request, or of a job that is no longer suspended, never list it. A job's
rows go when it reaches a terminal status (jobs.py deletes them in that transaction).

``append_event_if_waiting`` locks the job row with a conditional no-op UPDATE (the same row a
claim updates), so a vote is ordered entirely before or after a resume or cancel claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from signoff.engine.models import InboxEntry, Job, utcnow
from signoff.engine.store.base import ACCESS_NOTES, AccessChanged, DecisionReads, StoreError
from signoff.engine.store.encoding import approver_ref, unique_strings
from signoff.engine.store.sql.core import Tx
from signoff.engine.store.sql.events import DuplicateEvent, DuplicateEvents
from signoff.engine.store.base import ReceiptMaker
from signoff.engine.store.sql.jobs import SQLJobs
from signoff.engine.store.sql.queries import Q
from signoff.engine.store.sql.receipts import SQLReceipts

__all__ = ["SQLApprovals"]

INBOX_ROWS_PER_READ = 500  # the rows of an inbox page read by id in one statement


class _NotHeld(Exception):
    """Raised inside record_decision's transaction to roll it back: the claim is not the caller's."""


def _refs(refs: Iterable[str]) -> list[tuple[str, str | None, str | None, str | None]]:
    """Each reference once, parsed (ValueError/TypeError before any change)."""
    return [(ref, *approver_ref(ref)) for ref in unique_strings(refs, "refs")]


class SQLApprovals(SQLReceipts, SQLJobs):
    """Part of SQLStore: approver references, the assigned list, votes while a request waits."""

    async def _write_refs(self, tx: Tx, job_id: str, request_id: str, parsed: list[Any], *, replace: bool) -> None:
        # the job row first (when there is one): concurrent changes of one job's references queue
        # on it, in the same order as a status change takes it (job, then the rest)
        await tx.execute(Q.lock_job, (job_id,))
        if replace:
            await tx.execute(Q.delete_request_approvers, (job_id, request_id))
        if parsed:
            await tx.executemany(Q.insert_request_approver, [(job_id, request_id, *p) for p in parsed])

    async def set_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> None:
        """See Store.set_request_approvers."""
        parsed = _refs(refs)
        async with self._tx(write=True) as tx:
            await self._write_refs(tx, job_id, request_id, parsed, replace=True)

    async def add_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> list[str]:
        """See Store.add_request_approvers."""
        parsed = _refs(refs)
        async with self._tx(write=True) as tx:
            await self._write_refs(tx, job_id, request_id, parsed, replace=False)
            rows = await tx.fetchall(Q.request_approvers, (job_id, request_id))
        return [r["ref"] for r in rows]

    async def request_approvers(self, job_id: str, request_id: str) -> list[str]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.request_approvers, (job_id, request_id))
        return [r["ref"] for r in rows]

    async def record_decision(self, job_id: str, events: Sequence[tuple[str, dict[str, Any], str]], *,
                              token: str, request_id: str, action_id: str, participants: Iterable[str],
                              claim: bool = False, receipt: ReceiptMaker | None = None,
                              access_since: tuple[str, datetime] | None = None,
                              reads: DecisionReads | None = None,
                              stamp: datetime | None = None) -> list[int] | None:
        """See Store.record_decision. The conditional no-op UPDATE locks the job row while the
        claim is the caller's (job row, then the counter row: the order of every status change
        with its event, so no deadlock); with ``claim``, the claim's conditional UPDATE
        (claim_decision's) comes first and takes that lock itself."""
        ids = unique_strings(participants, "user_ids")
        bodies = [(name, self._enc_event(data), key) for name, data, key in events]
        now = self._enc_dt(utcnow())
        seen = self._enc_dt(stamp) if stamp is not None else None

        async def write(tx: Tx) -> list[int]:
            if access_since is not None:  # the carried check still holds (issue 33), or nothing
                who, since = access_since
                if await tx.fetchone(Q.access_changed_since, (ACCESS_NOTES + who, self._enc_dt(since))):
                    raise AccessChanged(f"The access of {who} changed since the decision was checked")
            if claim:
                if not token:
                    raise StoreError("A decision's claim token is a non-empty string.")
                if stamp is None:
                    await tx.execute(Q.claim_resume, (token, now, job_id, request_id))
                else:  # only while the row is as the caller's read saw it
                    await tx.execute(Q.claim_resume_stamped, (token, now, job_id, request_id, seen))
            held = await tx.fetchone(Q.lock_claimed, (job_id, token))  # the run's last receipt, too
            seqs = await self._append_all(tx, job_id, bodies)  # every key used: DuplicateEvents
            if held is None:
                raise _NotHeld()
            await tx.execute(Q.stamp_card, (action_id, request_id))
            if receipt is not None:  # its INSERT, with the UPDATE that says it is the run's last
                await self._write_receipt(tx, job_id, receipt, held, Q.clear_pending_receipt, now, job_id)
            else:
                await tx.execute(Q.clear_pending, (now, job_id))
            if ids:
                await tx.executemany(Q.insert_participant, [(u, job_id, now) for u in ids])
            if reads is not None:  # what its deliveries need, read here (no round trips of their own)
                owners = unique_strings(reads.owners, "owner_ids")
                hooks = await tx.fetchall(Q.webhooks_of_owners.format(owners=", ".join("?" for _ in owners)),
                                          owners) if owners else []
                told = await tx.fetchall(Q.list_notifications, (job_id, reads.notifications)) \
                    if reads.notifications > 0 else []
                reads.webhooks = [self._webhook_record(r) for r in hooks]  # type: ignore[attr-defined]
                reads.told = [self._notification(r) for r in told]  # type: ignore[attr-defined]
            return seqs

        try:
            return await self._write(write)
        except DuplicateEvents:  # all recorded by another attempt first: nothing written now
            return None
        except _NotHeld:  # rolled back: the job ended (or was claimed otherwise) meanwhile
            return None

    async def add_participants(self, job_id: str, user_ids: Iterable[str]) -> None:
        """See Store.add_participants."""
        ids = unique_strings(user_ids, "user_ids")
        if not ids:
            return
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            await tx.executemany(Q.insert_participant, [(u, job_id, now) for u in ids])

    async def participated_jobs(self, user_id: str, *, limit: int = 200) -> list[Job]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.participated_jobs, (user_id, limit))
        return [self._job(r) for r in rows]

    async def took_part(self, job_id: str, user_id: str) -> bool:
        async with self._tx(write=False) as tx:
            return await tx.fetchone(Q.took_part, (job_id, user_id)) is not None

    async def list_assigned_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """See Store.list_assigned_pending: one statement, memberships read with the jobs."""
        sql, params = Q.assigned_pending, [user_id, user_id]
        if flow_id is not None:
            sql += " AND j.flow_id = ?"
            params.append(flow_id)
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql + " ORDER BY j.updated_at DESC, j.job_id DESC", params)
        return [self._job(r) for r in rows]

    def _inbox(self, user_id: str, flow_id: str | None, session_id: str | None, kind: str | None
               ) -> tuple[tuple[str, list[Any]], tuple[str, list[Any]]]:
        """The inbox's two parts (Q.inbox_own, Q.inbox_assigned) with their filters, each with
        its parameters."""
        where, values = "", []
        for sql, value in (("j.flow_id = ?", flow_id), ("COALESCE(j.session_id, '') = ?", session_id),
                           ("j.pending_kind = ?", kind)):
            if value is not None:
                where += f" AND {sql}"
                values.append(value)
        me = [user_id] * 4
        return ((Q.inbox_own.format(f=where), [user_id, *values]),
                (Q.inbox_assigned.format(f=where), [*me, *values, *me, *values]))

    async def inbox(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                    kind: str | None = None, limit: int = 25, offset: int = 0, oldest: bool = False) -> list[Job]:
        """See Store.inbox. The first ``offset + limit`` of each part, newest (or oldest) first
        (the own part read off jobs_inbox in its order, either way, stopping there), merged; then
        the page's rows by id."""
        limit, offset = max(0, int(limit)), max(0, int(offset))
        if limit == 0:
            return []
        (own, own_params), (assigned, assigned_params) = self._inbox(user_id, flow_id, session_id, kind)
        way = "ASC" if oldest else "DESC"
        order = f" ORDER BY paused_at {way}, job_id {way} LIMIT ?"
        async with self._tx(write=False) as tx:
            keys = await tx.fetchall(f"SELECT job_id, paused_at FROM ({own}) w{order}", [*own_params, offset + limit])
            keys += await tx.fetchall(f"SELECT job_id, paused_at FROM ({assigned}) w{order}",
                                      [*assigned_params, offset + limit])
            keys.sort(key=lambda r: (r["paused_at"], r["job_id"]), reverse=not oldest)
            page = [r["job_id"] for r in keys[offset:offset + limit]]
            rows = []
            for at in range(0, len(page), INBOX_ROWS_PER_READ):  # a bounded IN list (PostgreSQL takes 65,535)
                chunk = page[at:at + INBOX_ROWS_PER_READ]
                rows += await tx.fetchall(f"SELECT * FROM jobs WHERE job_id IN ({', '.join('?' * len(chunk))})", chunk)
        by_id = {r["job_id"]: r for r in rows}
        return [self._job(by_id[j]) for j in page if j in by_id]

    async def inbox_entries(self, user_id: str, *, limit: int) -> list[InboxEntry]:
        """See Store.inbox_entries: inbox's two parts with their keys and columns, no job row."""
        limit = max(0, int(limit))
        (own, own_params), (assigned, assigned_params) = self._inbox(user_id, None, None, None)
        order = " ORDER BY paused_at DESC, job_id DESC LIMIT ?"
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(f"SELECT * FROM ({own}) w{order}", [*own_params, limit])
            rows += await tx.fetchall(f"SELECT * FROM ({assigned}) w{order}", [*assigned_params, limit])
        rows.sort(key=lambda r: (r["paused_at"], r["job_id"]), reverse=True)
        return [InboxEntry(job_id=r["job_id"], request_id=r["pending_request_id"], paused_at=self._dec_dt(r["paused_at"]),
                           flow_id=r["flow_id"], session_id=r["session_id"], kind=r["pending_kind"] or "node_input")
                for r in rows[:limit]]

    async def inbox_count(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                          kind: str | None = None, cap: int = 1000) -> int:
        """See Store.inbox_count: each part counted up to ``cap`` rows, never further."""
        cap = max(0, int(cap))
        total = 0
        async with self._tx(write=False) as tx:
            for sql, params in self._inbox(user_id, flow_id, session_id, kind):
                row = await tx.fetchone(f"SELECT count(*) AS n FROM (SELECT job_id FROM ({sql}) w LIMIT ?) c",
                                        [*params, cap])
                total += int(row["n"]) if row else 0
        return min(total, cap)

    async def inbox_flows(self, user_id: str) -> list[str]:
        """See Store.inbox_flows: the own part's flows by a loose scan of jobs_inbox_flows."""
        (_, _), (assigned, params) = self._inbox(user_id, None, None, None)
        async with self._tx(write=False) as tx:
            own = await tx.fetchall(Q.inbox_own_flows, (user_id, user_id))
            others = await tx.fetchall(f"SELECT DISTINCT flow_id FROM ({assigned}) w", params)
        return sorted({r["flow_id"] for r in own} | {r["flow_id"] for r in others})

    async def waiting_on_others(self, user_id: str, *, limit: int) -> list[str]:
        """See Store.waiting_on_others (jobs_user_status finds the user's suspended jobs)."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.waiting_on_others, (user_id, int(limit)))
        return [r["job_id"] for r in rows]

    async def append_event_if_waiting(
        self, job_id: str, request_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None,
        receipt: ReceiptMaker | None = None,
    ) -> int | None:
        """See Store.append_event_if_waiting. The conditional no-op UPDATE locks the job row while
        it waits for ``request_id``; the append then takes the counter row (job row, then
        counter: the order of every status change with its event, so no deadlock)."""
        body = self._enc_event(data)

        async def write(tx: Tx) -> int | None:
            waiting = await tx.fetchone(Q.lock_waiting, (job_id, request_id))  # the run's last receipt, too
            if waiting is not None:
                seq = await self._append(tx, job_id, event, body, dedupe_key)
                if receipt is not None:
                    await self._write_receipt(tx, job_id, receipt, waiting, Q.set_receipt, job_id)
                return seq
            if dedupe_key is None:
                return None
            first = await tx.fetchone(Q.event_by_dedupe, (job_id, dedupe_key))
            return int(first["seq"]) if first is not None else None

        try:
            return await self._write(write)
        except DuplicateEvent as dup:  # rolled back: the counter and the job row untouched
            return dup.seq
