"""A job's event log, in memory: gap-free seq per job, each event chained to the one before
(docs/audit.md), the decision recorded with its events, and the in-process tail."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

from signoff.engine.audit.events import event_sha256
from signoff.engine.models import Event, EventNote, JobStatus, as_utc, utcnow
from signoff.engine.store.base import ACCESS_CHANGED, ACCESS_NOTES, AccessChanged, DecisionReads, ReceiptMaker, StoreError
from signoff.engine.store.encoding import dumps, octets, unique_strings
from signoff.engine.store.memory.core import _Event, _first, _same, _Tables
from signoff.engine.store.memory.receipts import MemoryReceipts


class MemoryEvents(MemoryReceipts):
    """Part of MemoryStore: events."""

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
        seq, at = len(events) + 1, utcnow()
        prev = events[-1].sha256 if events else None
        sha = event_sha256(job_id, seq, event, json.loads(body), at, prev)
        events.append(_Event(seq, event, body, at, dedupe_key, sha, prev))
        self._charge_job(t, job_id, octets(body))
        for tail in self._tails:  # nothing in this store rolls back once appended
            tail.put_nowait(EventNote(job_id, len(events), event))
        return len(events)

    def _note_access(self, t: _Tables, user_id: str) -> None:
        """An access note for ``user_id`` (Store.tail_events)."""
        self._append(t, ACCESS_NOTES + user_id, ACCESS_CHANGED, dumps({}), None)

    async def append_event(self, job_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None = None,
                           receipt: ReceiptMaker | None = None, standing_use: tuple[str, datetime] | None = None) -> int:
        body = dumps(data)
        t = self._tables()
        used = dedupe_key is not None and any(e.dedupe_key == dedupe_key for e in t.events.get(job_id, ()))
        made = self._next_receipt(t, job_id, receipt) if receipt is not None and not used else None
        seq = self._append(t, job_id, event, body, dedupe_key)
        if made is not None:
            self._keep_receipt(t, made)
        if standing_use is not None and not used:
            rule = t.standing.get(standing_use[0])
            if rule is not None:
                rule.uses += 1
                rule.last_used_at = as_utc(standing_use[1])
        return seq

    async def record_decision(self, job_id: str, events: Sequence[tuple[str, dict[str, Any], str]], *,
                              token: str, request_id: str, action_id: str, participants: Iterable[str],
                              claim: bool = False, receipt: ReceiptMaker | None = None,
                              access_since: tuple[str, datetime] | None = None,
                              reads: DecisionReads | None = None,
                              stamp: datetime | None = None) -> list[int] | None:
        """See Store.record_decision: checked and encoded first, then written in one step."""
        ids = unique_strings(participants, "user_ids")
        bodies = [(name, dumps(data), key) for name, data, key in events]
        if not all(isinstance(name, str) for name, _, _ in bodies):
            raise StoreError("An event needs a name (a string).")
        t = self._tables()
        if access_since is not None:
            who, since = access_since
            if any(e.created_at > as_utc(since) for e in t.events.get(ACCESS_NOTES + who, ())):
                raise AccessChanged(f"The access of {who} changed since the decision was checked")
        used = {e.dedupe_key: e.seq for e in t.events.get(job_id, ()) if e.dedupe_key is not None}
        if all(key in used for _, _, key in bodies):
            return None  # recorded by another attempt first
        job = t.jobs.get(job_id)
        if claim:
            if not token:
                raise StoreError("A decision's claim token is a non-empty string.")
            if job is not None and job.status == JobStatus.suspended and _same(job.pending_request_id, request_id) \
                    and (stamp is None or job.updated_at == as_utc(stamp)):
                job.status, job.claim_token, job.updated_at = JobStatus.in_progress, token, utcnow()
        if job is None or job.status != JobStatus.in_progress or not _same(job.claim_token, token):
            return None
        made = self._next_receipt(t, job_id, receipt) if receipt is not None else None
        seqs = [self._append(t, job_id, name, body, key) for name, body, key in bodies]
        for row in t.messages.values():
            if row.kind == "card" and _same(row.card_request_id, request_id):
                row.submitted_action = action_id
        job.pending, job.pending_request_id, job.updated_at = None, None, utcnow()
        t.participants.update((u, job_id) for u in ids)
        if made is not None:
            self._keep_receipt(t, made)
        if reads is not None:  # in the same step (these await nothing)
            owners = set(unique_strings(reads.owners, "owner_ids"))
            reads.webhooks = [self._webhook_record(h)  # type: ignore[attr-defined]
                              for h in self._hooks(lambda h: h.owner_id in owners)]  # type: ignore[attr-defined]
            reads.told = await self.list_notifications(job_id, limit=reads.notifications) \
                if reads.notifications > 0 else []  # type: ignore[attr-defined]
        return seqs

    async def append_event_if_waiting(
        self, job_id: str, request_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None,
        receipt: ReceiptMaker | None = None,
    ) -> int | None:
        """See Store.append_event_if_waiting: the check and the append in one step."""
        body = dumps(data)
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is not None and row.status == JobStatus.suspended and _same(row.pending_request_id, request_id):
            used = dedupe_key is not None and any(e.dedupe_key == dedupe_key for e in t.events.get(job_id, ()))
            made = self._next_receipt(t, job_id, receipt) if receipt is not None and not used else None
            seq = self._append(t, job_id, event, body, dedupe_key)
            if made is not None:
                self._keep_receipt(t, made)
            return seq
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
            Event(job_id=job_id, seq=e.seq, event=e.event, data=json.loads(e.data), created_at=e.created_at,
                  sha256=e.sha256, prev_sha256=e.prev_sha256)
            for e in _first(later, limit)
        ]

    async def last_event_seq(self, job_id: str) -> int:
        return len(self._tables().events.get(job_id, ()))

    async def read_events_named(self, job_id: str, event: str) -> list[Event]:
        return [Event(job_id=job_id, seq=e.seq, event=e.event, data=json.loads(e.data), created_at=e.created_at,
                  sha256=e.sha256, prev_sha256=e.prev_sha256)
                for e in self._tables().events.get(job_id, ()) if e.event == event]
