"""Receipts in SQL (DESIGN §16, docs/audit.md): a run's signed receipts in chain order.

A receipt is written only inside the transaction of a decision's records (approvals.py:
record_decision, append_event_if_waiting), after the job row's lock is taken there: the run's
last receipt, read then by a statement of its own (under READ COMMITTED a new statement sees
what committed while it waited for the lock; the locking UPDATE's own snapshot would not), is
the last there is, so its chain never forks. An attempt run again writes nothing twice (its
events' dedupe already rolled it back), so ``receipt_id`` needs no unique index: each index is
one more write per decision.
"""

from __future__ import annotations

from datetime import datetime

from signoff.engine.models import ReceiptRecord
from signoff.engine.store.base import ReceiptMaker
from signoff.engine.store.sql.core import SQLCore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLReceipts"]

RECEIPTS_MAX_PAGE = 1000


class SQLReceipts(SQLCore):
    """Part of SQLStore: receipts."""

    async def _write_receipt(self, tx: Tx, job_id: str, maker: ReceiptMaker) -> None:
        last = await tx.fetchone(Q.last_receipt, (job_id,))
        receipt, sha256 = maker(None if last is None else str(last["sha256"]))
        seq = 1 if last is None else int(last["seq"]) + 1
        at = datetime.fromisoformat(str(receipt["at"]))
        await tx.execute(Q.insert_receipt, (job_id, seq, str(receipt["receipt_id"]), str(receipt["flow_id"]),
                                            self._enc_dt(at), sha256, self._enc_json(receipt)))

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
