"""Receipts in memory (DESIGN §16): a run's signed receipts in chain order, written with the
decision's records (events.py), deleted with the run (retention.py)."""

from __future__ import annotations

import json
from datetime import datetime

from signoff.engine.models import ReceiptRecord
from signoff.engine.store.base import ReceiptMaker, StoreError
from signoff.engine.store.encoding import as_utc
from signoff.engine.store.memory.core import MemoryCore, _Tables

RECEIPTS_MAX_PAGE = 1000


class MemoryReceipts(MemoryCore):
    """Part of MemoryStore: receipts."""

    @staticmethod
    def _next_receipt(t: _Tables, job_id: str, maker: ReceiptMaker) -> ReceiptRecord:
        """The run's next receipt, made and encoded (not written: the caller appends it once
        nothing else can fail)."""
        kept = t.receipts.get(job_id, [])
        try:
            receipt, sha256, text = maker(kept[-1].sha256 if kept else None)
        except ValueError as exc:  # NaN or ±Infinity: as _enc_json says of them (dumps)
            raise StoreError(f"value is not JSON-serialisable: {exc}") from exc
        return ReceiptRecord(job_id=job_id, seq=len(kept) + 1, receipt_id=str(receipt["receipt_id"]),
                             flow_id=str(receipt["flow_id"]), at=as_utc(datetime.fromisoformat(str(receipt["at"]))),
                             sha256=sha256, body=json.loads(text))  # as the SQL stores keep and read it

    @staticmethod
    def _keep_receipt(t: _Tables, record: ReceiptRecord) -> None:
        t.receipts.setdefault(record.job_id, []).append(record)

    async def read_receipts(self, job_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[ReceiptRecord]:
        limit = max(0, min(int(limit), RECEIPTS_MAX_PAGE))
        found = [r for r in self._tables().receipts.get(job_id, ()) if r.seq > after_seq][:limit]
        return [r.model_copy(deep=True) for r in found]

    async def list_receipts(self, *, since: datetime, until: datetime | None = None, flow_id: str | None = None,
                            after: tuple[datetime, str, int] | None = None, limit: int = 500) -> list[ReceiptRecord]:
        since = as_utc(since)
        found = [r for rows in self._tables().receipts.values() for r in rows
                 if r.at >= since and (until is None or r.at < as_utc(until))
                 and (flow_id is None or r.flow_id == flow_id)]
        found.sort(key=lambda r: (r.at, r.job_id, r.seq))
        if after is not None:
            key = (as_utc(after[0]), after[1], int(after[2]))
            found = [r for r in found if (r.at, r.job_id, r.seq) > key]
        return [r.model_copy(deep=True) for r in found[:max(0, min(int(limit), RECEIPTS_MAX_PAGE))]]
