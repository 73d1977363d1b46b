"""Receipts in SQL (DESIGN §16, docs/audit.md): a run's signed receipts in chain order.

A receipt is written only inside the transaction of a decision's records (approvals.py:
record_decision, append_event_if_waiting) or of a standing approval's use (events.py:
append_event), after the job row's lock is taken there. The run's last receipt (its seq and
sha256) is kept on the job row (migration 17): the UPDATE that takes the lock returns it (under
READ COMMITTED an UPDATE sees the row's latest committed version once it holds the lock), so it
is the last there is and the chain never forks; the new receipt's seq and sha256 go back on the
row in an UPDATE the transaction makes anyway (record_decision's, clearing the request) or one
of its own. A decision's receipt so costs one INSERT, and on PostgreSQL not even a statement of
its own: the INSERT is a WITH of that UPDATE, one round trip for both. The receipt's body is
stored as the canonical JSON it was signed and hashed as (engine/audit/receipts.py:
ReceiptDraft.signed), not encoded again; rows stored before, as json.dumps wrote them, read back
the same. An attempt run again writes nothing twice
(its events' dedupe already rolled it back), so ``receipt_id`` needs no unique index: each index
is one more write per decision.
"""

from __future__ import annotations

from datetime import datetime

from signoff.engine.models import ReceiptRecord
from signoff.engine.store.base import ReceiptMaker, StoreError
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLReceipts"]

RECEIPTS_MAX_PAGE = 1000


class SQLReceipts(SQLCore):
    """Part of SQLStore: receipts."""

    # PostgreSQL takes the receipt's INSERT inside the job row's UPDATE (a data-modifying WITH):
    # one statement, so one round trip, for both; SQLite has no such WITH (nor round trips)
    _receipt_in_update = False

    async def _write_receipt(self, tx: Tx, job_id: str, maker: ReceiptMaker, last: dict | None,
                             update: str, *params: object) -> None:
        """The receipt ``maker`` makes, chained after the run's last one (``last``: the job row's
        ``receipt_seq`` and ``receipt_sha256`` as the lock returned them), inserted; and the job
        row's ``update`` (its first two parameters the receipt's seq and sha256, then
        ``params``), which says it is the run's last, in the same transaction (on PostgreSQL in
        the same statement)."""
        prev = None if last is None else last["receipt_sha256"]
        seq = (int(last["receipt_seq"] or 0) if last is not None else 0) + 1
        try:
            receipt, sha256, text = maker(None if prev is None else str(prev))
        except ValueError as exc:  # NaN or ±Infinity: as _enc_json says of them (dumps)
            raise StoreError(f"value is not JSON-serialisable: {exc}") from exc
        at = datetime.fromisoformat(str(receipt["at"]))
        # its canonical JSON as the maker made it (signed, hashed): stored as it is, not encoded again
        row = (job_id, seq, str(receipt["receipt_id"]), str(receipt["flow_id"]), self._enc_dt(at), sha256,
               self._enc_json_text(receipt, text))
        if self._receipt_in_update:
            await tx.execute(f"WITH receipt AS ({Q.insert_receipt}) {update}", (*row, seq, sha256, *params))
        else:
            await tx.execute(Q.insert_receipt, row)
            await tx.execute(update, (seq, sha256, *params))

    def _receipt(self, row: dict) -> ReceiptRecord:
        return ReceiptRecord(job_id=row["job_id"], seq=int(row["seq"]), receipt_id=row["receipt_id"],
                             flow_id=row["flow_id"], at=self._dec_dt(row["at"]), sha256=row["sha256"],
                             body=self._dec_json(row["body"]))

    async def read_receipts(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[ReceiptRecord]:
        """See Store.read_receipts."""
        limit = max(0, min(int(limit), RECEIPTS_MAX_PAGE))
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(Q.read_receipts, (job_id, int(after_seq), limit))
        return [self._receipt(r) for r in rows]

    async def list_receipts(self, *, since: datetime, until: datetime | None = None, flow_id: str | None = None,
                            after: tuple[datetime, str, int] | None = None, limit: int = 500) -> list[ReceiptRecord]:
        """See Store.list_receipts: by the index on (at, job_id, seq) (with the flow first when
        asked for one); a page goes on after the previous one's last key."""
        where, params = ["at >= ?"], [self._enc_dt(since)]
        if until is not None:
            where.append("at < ?")
            params.append(self._enc_dt(until))
        if flow_id is not None:
            where.append("flow_id = ?")
            params.append(flow_id)
        if after is not None:
            at, job_id, seq = after
            where.append("(at > ? OR (at = ? AND (job_id > ? OR (job_id = ? AND seq > ?))))")
            params += [self._enc_dt(at), self._enc_dt(at), job_id, job_id, int(seq)]
        params.append(max(0, min(int(limit), RECEIPTS_MAX_PAGE)))
        sql = f"SELECT * FROM receipts WHERE {' AND '.join(where)} ORDER BY at, job_id, seq LIMIT ?"
        async with self._tx(write=False) as tx:
            rows = await tx.fetchall(sql, params)
        return [self._receipt(r) for r in rows]
