"""Who may decide a pending request (approver references), who took part in a run, and the
requests assigned to a person, in memory."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from signoff.engine.models import InboxEntry, Job, JobStatus, PendingAges, utcnow
from signoff.engine.store.encoding import approver_ref, ApproverRef, as_utc, unique_strings
from signoff.engine.store.memory.core import _ACTIVE, _Job, MemoryCore, _Tables


class MemoryApprovals(MemoryCore):
    """Part of MemoryStore: approvals."""

    @staticmethod
    def _drop_approvers(t: _Tables, job_id: str) -> None:
        """An ended job waits for nobody: its references go with its terminal status."""
        for key in [k for k in t.approvers if k[0] == job_id]:
            del t.approvers[key]

    @staticmethod
    def _parse_refs(refs: Iterable[str]) -> dict[str, ApproverRef]:
        return {ref: approver_ref(ref) for ref in unique_strings(refs, "refs")}

    async def set_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> None:
        parsed = self._parse_refs(refs)
        t = self._tables()
        if parsed:
            t.approvers[(job_id, request_id)] = parsed
        else:
            t.approvers.pop((job_id, request_id), None)

    async def add_request_approvers(self, job_id: str, request_id: str, refs: Iterable[str]) -> list[str]:
        parsed = self._parse_refs(refs)
        t = self._tables()
        kept = t.approvers.get((job_id, request_id), {})
        kept = {**kept, **{r: p for r, p in parsed.items() if r not in kept}}
        if kept:
            t.approvers[(job_id, request_id)] = kept
        return list(kept)

    async def request_approvers(self, job_id: str, request_id: str) -> list[str]:
        return list(self._tables().approvers.get((job_id, request_id), ()))

    async def add_participants(self, job_id: str, user_ids: Iterable[str]) -> None:
        ids = unique_strings(user_ids, "user_ids")
        self._tables().participants.update((u, job_id) for u in ids)

    async def participated_jobs(self, user_id: str, *, limit: int = 200) -> list[Job]:
        t = self._tables()
        rows = [t.jobs[j] for u, j in t.participants if u == user_id and j in t.jobs]
        rows.sort(key=lambda r: (r.created_at, r.job_id), reverse=True)
        return [self._job(r) for r in rows[:limit]]

    async def took_part(self, job_id: str, user_id: str) -> bool:
        return (user_id, job_id) in self._tables().participants

    def _inbox(self, user_id: str, flow_id: str | None, session_id: str | None, kind: str | None) -> list[Job]:
        """Store.inbox's set, newest first (every waiting job read: the memory store is for tests)."""
        t = self._tables()
        groups = {k for k, row in t.groups.items() if user_id in row.members}
        muted = {m for (u, m) in t.mutes if u == user_id}

        def names_user(ref: ApproverRef) -> bool:
            user, owner, name = ref
            return user == user_id if user is not None else (owner, name) in groups

        found = []
        for r in t.jobs.values():
            if r.status != JobStatus.suspended or r.pending is None or r.pending_request_id is None:
                continue
            job = self._job(r)
            pending = job.pending
            assert pending is not None
            if (flow_id is not None and r.flow_id != flow_id) or (session_id is not None and (r.session_id or "") != session_id) \
                    or (kind is not None and pending.kind != kind):
                continue
            own = r.user_id == user_id and not (pending.approvers or pending.approver_refs)
            named = any(names_user(p) for p in t.approvers.get((r.job_id, r.pending_request_id), {}).values()) \
                and (r.user_id == user_id or r.user_id not in muted)
            if own or named:
                found.append(job)
        found.sort(key=lambda j: (j.pending.paused_at if j.pending else j.updated_at, j.job_id), reverse=True)
        return found

    async def inbox(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                    kind: str | None = None, limit: int = 25, offset: int = 0, oldest: bool = False) -> list[Job]:
        """See Store.inbox."""
        start = max(0, int(offset))
        found = self._inbox(user_id, flow_id, session_id, kind)
        return (found[::-1] if oldest else found)[start:start + max(0, int(limit))]

    async def inbox_entries(self, user_id: str, *, limit: int) -> list[InboxEntry]:
        """See Store.inbox_entries."""
        return [InboxEntry(job_id=j.job_id, request_id=j.pending.request_id, paused_at=j.pending.paused_at,
                           flow_id=j.flow_id, session_id=j.session_id, kind=j.pending.kind)
                for j in self._inbox(user_id, None, None, None)[:max(0, int(limit))] if j.pending is not None]

    async def inbox_count(self, user_id: str, *, flow_id: str | None = None, session_id: str | None = None,
                          kind: str | None = None, cap: int = 1000) -> int:
        """See Store.inbox_count."""
        return min(len(self._inbox(user_id, flow_id, session_id, kind)), max(0, int(cap)))

    async def inbox_flows(self, user_id: str) -> list[str]:
        """See Store.inbox_flows."""
        return sorted({j.flow_id for j in self._inbox(user_id, None, None, None)})

    async def waiting_on_others(self, user_id: str, *, limit: int) -> list[str]:
        """See Store.waiting_on_others."""
        t = self._tables()

        def others(ref: ApproverRef) -> bool:
            user, owner, _ = ref
            return owner is not None or (user is not None and user != user_id)

        found = [r.job_id for r in t.jobs.values()
                 if r.user_id == user_id and r.status == JobStatus.suspended and r.pending_request_id is not None
                 and any(others(p) for p in t.approvers.get((r.job_id, r.pending_request_id), {}).values())]
        return found[:limit]

    async def list_assigned_pending(self, user_id: str, *, flow_id: str | None = None) -> list[Job]:
        """See Store.list_assigned_pending: memberships read now, the job's current request only."""
        t = self._tables()
        groups = {k for k, row in t.groups.items() if user_id in row.members}

        def names_user(ref: ApproverRef) -> bool:
            user, owner, name = ref
            return user == user_id if user is not None else (owner, name) in groups

        found = [
            r
            for r in t.jobs.values()
            if r.status == JobStatus.suspended
            and r.pending_request_id is not None
            and (flow_id is None or r.flow_id == flow_id)
            and any(names_user(p) for p in t.approvers.get((r.job_id, r.pending_request_id), {}).values())
        ]
        found.sort(key=lambda r: (r.updated_at, r.job_id), reverse=True)
        return [self._job(r) for r in found]

    def _active(self, keep: Callable[[_Job], bool]) -> list[Job]:
        found = [r for r in self._tables().jobs.values() if r.status in _ACTIVE and keep(r)]
        return [self._job(r) for r in sorted(found, key=lambda r: (r.created_at, r.job_id))]

    async def list_active_jobs(self, flow_id: str) -> list[Job]:
        """See Store.list_active_jobs."""
        return self._active(lambda r: r.flow_id == flow_id)

    async def want_release(self, job_id: str) -> None:
        self._tables().releases.setdefault(job_id, utcnow())

    async def releases_due(self, before: datetime, *, limit: int = 100) -> list[str]:
        due = sorted((at, j) for j, at in self._tables().releases.items() if at < as_utc(before))
        return [j for _, j in due[:limit]]

    async def released(self, job_id: str) -> None:
        self._tables().releases.pop(job_id, None)

    async def pending_ages(self, now: datetime, bounds: Sequence[float]) -> list[PendingAges]:
        cutoffs = [now - timedelta(seconds=b) for b in bounds]
        flows: dict[str, list[Any]] = {}  # flow id -> [count, within..., oldest]
        for row in self._tables().jobs.values():
            if row.status != JobStatus.suspended:
                continue
            paused = json.loads(row.pending).get("paused_at") if row.pending else None
            at = as_utc(datetime.fromisoformat(paused)) if isinstance(paused, str) else row.updated_at
            entry = flows.setdefault(row.flow_id, [0, [0] * len(cutoffs), None, 0.0])
            entry[0] += 1
            entry[3] += (now - at).total_seconds()
            for i, cutoff in enumerate(cutoffs):
                entry[1][i] += at >= cutoff
            entry[2] = at if entry[2] is None or at < entry[2] else entry[2]
        found = [PendingAges(flow_id=f, count=n, within=tuple(w), oldest=o, seconds=max(0.0, s))
                 for f, (n, w, o, s) in flows.items()]
        return sorted(found, key=lambda p: (-p.count, p.flow_id))

    async def count_jobs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self._tables().jobs.values():
            counts[row.status.value] = counts.get(row.status.value, 0) + 1
        return counts

    async def list_user_active_jobs(self, user_id: str) -> list[Job]:
        """See Store.list_user_active_jobs."""
        return self._active(lambda r: r.user_id == user_id)
