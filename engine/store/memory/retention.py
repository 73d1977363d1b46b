"""Deleting ended runs, in memory: one run in one step, everything of it, its bytes given back."""

from __future__ import annotations

from datetime import datetime

from signoff.engine.store.encoding import as_utc, octets
from signoff.engine.store.memory.blobs import MemoryBlobs
from signoff.engine.store.memory.core import _first, _Job, _Tables


class MemoryRetention(MemoryBlobs):
    """Part of MemoryStore: deleting ended runs (Store.delete_run, Store.delete_runs_ended_before)."""

    @staticmethod
    def _deletable(t: _Tables, row: _Job | None) -> bool:
        """Ended, and its workflow let go of (no want_release left), as SQL's delete_ended_job."""
        return row is not None and row.status.terminal and row.job_id not in t.releases

    async def delete_run(self, job_id: str) -> bool:
        """See Store.delete_run."""
        t = self._tables()
        row = t.jobs.get(job_id)
        if row is None or not self._deletable(t, row):
            return False
        # what the job's own rows counted to its user: request, result, error, events, messages
        counted = octets(row.request) + octets(row.result) + octets(row.error)
        counted += sum(octets(e.data) for e in t.events.pop(job_id, ()))
        for message in [m for m in t.messages.values() if m.job_id == job_id]:
            counted += octets(message.text) + octets(message.card)
            del t.messages[message.id]
        del t.jobs[job_id]
        if row.idempotency_key is not None:  # SQL's key lives on the job's row: it goes with it
            t.idempotency.pop((row.user_id, row.idempotency_key), None)
        self._charge(t, row.user_id, -counted)
        for checkpoint in [c for c in t.checkpoints.values() if job_id in (c.run_id, c.job_id)]:
            del t.checkpoints[checkpoint.id]
            self._charge(t, checkpoint.charged_to, -checkpoint.size)
        for key in [k for k, s in t.spans.items() if job_id in (s.trace_id, s.run_id)]:
            span = t.spans.pop(key)
            self._charge(t, span.charged_to, -span.size)
        for key in [k for k in t.blobs if k.startswith(f"runs/{job_id}/")]:
            self._drop_blob(t, key)
        for key in [k for k in t.approvers if k[0] == job_id]:
            del t.approvers[key]
        t.participants = {p for p in t.participants if p[1] != job_id}
        for token_hash in [k for k, link in t.links.items() if link.job_id == job_id]:
            del t.links[token_hash]
        t.notifications = [n for n in t.notifications if n.job_id != job_id]
        t.receipts.pop(job_id, None)
        return True

    async def delete_runs_ended_before(self, before: datetime, *, limit: int = 500) -> list[str]:
        """See Store.delete_runs_ended_before."""
        if limit < 0:
            raise ValueError("delete_runs_ended_before needs a limit of 0 or more")
        t = self._tables()
        before = as_utc(before)
        ended = sorted((r.finished_at, r.job_id) for r in t.jobs.values()
                       if self._deletable(t, r) and r.finished_at is not None and r.finished_at < before)
        return [job_id for _, job_id in _first(ended, limit) if await self.delete_run(job_id)]
