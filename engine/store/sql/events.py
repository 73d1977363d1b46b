"""The per-job event log in SQL: gap-free seqs, dedupe keys and the hash chain.

The seq comes from a counter row incremented in the same transaction as the insert; that row
is the per-job lock (docs/store.md, "Event seq" and "Event dedupe"). Holding it, the insert
reads the previous event's hash and chains the new one to it (docs/audit.md, "The event log's
hash chain"), so the chain follows the seqs whatever races.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.engine.audit.events import canonical_json, chained_sha256
from signoff.engine.models import Event, utcnow
from signoff.engine.store.base import ACCESS_CHANGED, ACCESS_NOTES, ReceiptMaker
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["DuplicateEvent", "DuplicateEvents", "EventBody", "SQLEvents"]


@dataclass(frozen=True, slots=True)
class EventBody:
    """An event's data ready to append (SQLEvents._enc_event): as stored, and in canonical JSON
    as a reader gets it back (what its hash covers), both made before the append's transaction,
    so the lock is held only for the read of the previous hash and one SHA-256."""

    body: Any
    canonical: str


class DuplicateEvent(Exception):
    """Raised inside an append's transaction to roll it back: the key was used (seq inside)."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class DuplicateEvents(Exception):
    """Raised inside a transaction appending several events to roll it back: every key was used
    (their seqs inside)."""

    def __init__(self, seqs: list[int]) -> None:
        super().__init__(seqs)
        self.seqs = seqs


class SQLEvents(SQLCore):
    """Part of SQLStore: the event log."""

    async def append_event(self, job_id: str, event: str, data: dict[str, Any], *, dedupe_key: str | None = None,
                           receipt: ReceiptMaker | None = None, standing_use: tuple[str, datetime] | None = None) -> int:
        """See Store.append_event. With a ``dedupe_key`` already used for this job, nothing is
        written (the receipt and the rule's use neither) and the first event's seq is returned.
        With a receipt, the job row is locked first (it holds the run's last receipt: job row,
        then the counter row, the order of every write of both)."""
        body = self._enc_event(data)

        async def write(tx: Tx) -> int:
            last = await tx.fetchone(Q.lock_receipt, (job_id,)) if receipt is not None else None
            seq = await self._append(tx, job_id, event, body, dedupe_key)
            if receipt is not None:
                await self._write_receipt(tx, job_id, receipt, last, Q.set_receipt, job_id)  # type: ignore[attr-defined]
            if standing_use is not None:  # the rule's use counted with its record, once
                rule_id, at = standing_use
                await tx.execute(Q.use_standing, (self._enc_dt(at), rule_id))
            return seq

        try:
            return await self._write(write)
        except DuplicateEvent as dup:  # the transaction rolled back: the counter is untouched
            return dup.seq

    def _enc_event(self, data: Any) -> EventBody:
        """``data`` encoded for an append (StoreError when it is not JSON)."""
        body = self._enc_json(data)
        return EventBody(body, canonical_json(json.loads(self._json_text(body))))

    async def _append(self, tx: Tx, job_id: str, event: str, body: EventBody, dedupe_key: str | None) -> int:
        # The counter row first: it is the per-job lock, so the duplicate check below sees any
        # append with the same key that committed before this one took the lock.
        row = await tx.fetchone(Q.next_seq, (job_id,))
        assert row is not None
        seq = int(row["last_seq"])
        if dedupe_key is not None:
            first = await tx.fetchone(Q.event_by_dedupe, (job_id, dedupe_key))
            if first is not None:
                raise DuplicateEvent(int(first["seq"]))
        await self._insert(tx, job_id, seq, event, body, dedupe_key)
        return seq

    async def _append_all(self, tx: Tx, job_id: str, events: list[tuple[str, EventBody, str]]) -> list[int]:
        """Append ``events`` ((name, encoded body, dedupe key)) in order; one whose key was used
        keeps its first event's seq and is not written. Raises DuplicateEvents when every key
        was used (nothing to write: the caller's transaction rolls back)."""
        row = await tx.fetchone(Q.next_seq, (job_id,))  # the per-job lock (see _append), one seq taken
        assert row is not None
        seq = int(row["last_seq"])
        found = []
        for _, _, key in events:
            first = await tx.fetchone(Q.event_by_dedupe, (job_id, key))
            found.append(int(first["seq"]) if first is not None else None)
        if all(f is not None for f in found):
            raise DuplicateEvents([f for f in found if f is not None])
        seqs: list[int] = []
        taken = False
        for (event, body, key), first in zip(events, found):
            if first is not None:
                seqs.append(first)
                continue
            if taken:  # the next seq (the counter row is ours until the commit)
                row = await tx.fetchone(Q.next_seq, (job_id,))
                assert row is not None
                seq = int(row["last_seq"])
            taken = True
            await self._insert(tx, job_id, seq, event, body, key)
            seqs.append(seq)
        return seqs

    async def _insert(self, tx: Tx, job_id: str, seq: int, event: str, body: EventBody, dedupe_key: str | None) -> None:
        """Write the event under the ``seq`` taken from the job's counter row, chained to the
        event before it (read under that row's lock: no append can come between), and tell
        the tails."""
        prev = None
        if seq > 1:
            # a statement of its own, after the counter row's: on PostgreSQL (read committed) it
            # sees the event of an append that held that row while this one waited for it, which
            # a subquery in the counter's upsert (its snapshot taken before the wait) would not
            row = await tx.fetchone(Q.event_sha, (job_id, seq - 1))
            prev = row["sha256"] if row is not None else None  # None: written before the chain
        at = utcnow()
        sha = chained_sha256(job_id, seq, event, body.canonical, at, prev)
        await tx.execute(Q.insert_event, (job_id, seq, event, body.body, self._enc_dt(at), dedupe_key, sha, prev))
        await self._tell(tx, job_id, seq, event)
        await self._charge_job(tx, job_id, self._json_octets(body.body))

    async def _note_access(self, tx: Tx, user_id: str) -> None:
        """An access note for ``user_id`` in ``tx`` (Store.tail_events): their open streams ask
        again once it commits, in every process."""
        await self._append(tx, ACCESS_NOTES + user_id, ACCESS_CHANGED, self._enc_event({}), None)

    async def _tell(self, tx: Tx, job_id: str, seq: int, event: str) -> None:
        """Tell the store's tails of this append when it commits (PostgreSQL: NOTIFY). SQLite's
        tail reads the table itself."""

    async def read_events(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[Event]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.read_events, (job_id, after_seq, limit))
        return [self._event(r) for r in rows]

    async def last_event_seq(self, job_id: str) -> int:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.last_event_seq, (job_id,))
        return int(row["last_seq"]) if row is not None else 0

    async def read_events_named(self, job_id: str, event: str) -> list[Event]:
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.read_events_named, (job_id, event))
        return [self._event(r) for r in rows]

    def _event(self, r: Any) -> Event:
        return Event(job_id=r["job_id"], seq=int(r["seq"]), event=r["event"], data=self._dec_json(r["data"]),
                     created_at=self._dec_dt(r["created_at"]), sha256=r["sha256"], prev_sha256=r["prev_sha256"])
