"""The store's part of inline runs (docs/inline.md), on SQLite and PostgreSQL: a job created
with a lease, its renewal, a durable stop request, and the sweep that fails a job whose lease
ran out — with its ``run_failed`` event in the same transaction, never twice, and never for a
job whose lease was renewed or that holds no lease (a Temporal run)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from signoff.engine.models import JobStatus, NewJob, utcnow
from signoff.engine.store import Store

ERROR = {"error": "the process running it stopped", "type": "LeaseExpired", "vertex_id": None}


async def _job(store: Store, *, lease: bool = True, seconds: float = 30) -> str:
    user = await store.create_user(f"user-{uuid.uuid4()}")
    job_id = str(uuid.uuid4())
    await store.create_job(NewJob(
        job_id=job_id, flow_id=f"flow-{uuid.uuid4()}", flow_version=1, user_id=user.id,
        request={"runner": "inline" if lease else "temporal"},
        lease_until=utcnow() + timedelta(seconds=seconds) if lease else None,
    ))
    return job_id


async def test_renew_lease_reports_running_cancel_requested_and_ended(store: Store) -> None:
    job_id = await _job(store)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "running"
    assert await store.set_status(job_id, JobStatus.in_progress, expect=[JobStatus.queued])
    assert await store.request_cancel(job_id)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "cancel_requested"
    assert await store.set_status(job_id, JobStatus.cancelled)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=30)) == "ended"
    assert not await store.request_cancel(job_id)


async def test_a_job_without_lease_is_never_renewed_nor_swept(store: Store) -> None:
    job_id = await _job(store, lease=False)
    assert await store.renew_lease(job_id, utcnow()) == "ended"
    assert not await store.request_cancel(job_id)
    assert job_id not in await store.fail_expired_leases(utcnow() + timedelta(days=1), ERROR)
    assert (await store.get_job(job_id)).status == JobStatus.queued


async def test_sweep_fails_expired_leases_once_with_the_event(store: Store) -> None:
    expired = await _job(store, seconds=-1)
    await store.set_status(expired, JobStatus.in_progress, expect=[JobStatus.queued])
    alive = await _job(store, seconds=60)
    ended = await store.fail_expired_leases(utcnow(), ERROR)
    assert expired in ended and alive not in ended
    job = await store.get_job(expired)
    assert job.status == JobStatus.failed and job.error == ERROR and job.finished_at is not None
    events = await store.read_events(expired)
    assert [(e.seq, e.event, e.data) for e in events] == [
        (1, "run_failed", {"error": "the process running it stopped", "type": "LeaseExpired", "vertex_id": None})
    ]
    # a second sweep finds nothing more to do; the live job is untouched
    assert expired not in await store.fail_expired_leases(utcnow(), ERROR)
    assert len(await store.read_events(expired)) == 1
    assert (await store.get_job(alive)).status == JobStatus.queued


async def test_a_renewal_before_the_sweep_wins(store: Store) -> None:
    job_id = await _job(store, seconds=-1)
    assert await store.renew_lease(job_id, utcnow() + timedelta(seconds=60)) == "running"
    assert job_id not in await store.fail_expired_leases(utcnow(), ERROR)
    assert (await store.get_job(job_id)).status == JobStatus.queued


async def test_concurrent_sweeps_end_a_job_once(store: Store, db_url: str) -> None:
    from signoff.engine.store import open_store

    job_id = await _job(store, seconds=-1)
    others = [open_store(db_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.fail_expired_leases(utcnow(), ERROR) for s in [store, *others]))
    finally:
        for s in others:
            await s.close()
    assert sum(job_id in r for r in results) == 1
    assert [e.event for e in await store.read_events(job_id)] == ["run_failed"]


async def test_list_unstarted_finds_old_queued_runs_for_temporal_only(store: Store) -> None:
    temporal = await _job(store, lease=False)  # queued, no lease: waits for its workflow
    inline = await _job(store, lease=True)  # leased: an inline run, never a workflow's
    started = await _job(store, lease=False)
    assert await store.set_status(started, JobStatus.in_progress)
    later = utcnow() + timedelta(seconds=1)
    found = {j.job_id for j in await store.list_unstarted(later, limit=100_000)}
    assert temporal in found and inline not in found and started not in found
    # created after the cut-off: not (yet) a candidate
    assert temporal not in {j.job_id for j in await store.list_unstarted(utcnow() - timedelta(hours=1), limit=100_000)}
