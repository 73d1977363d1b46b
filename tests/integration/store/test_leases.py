"""Leases of inline runs (docs/inline.md) across store instances, on SQLite and PostgreSQL: the
sweep that fails a job whose lease ran out, run by several processes at once, ends it once,
with one ``run_failed``. The rest of the leases' contract (renewal, stop request, the sweep
and its event, ``list_unstarted``) is in tests/store_conformance.py, on every backend."""

from __future__ import annotations

import asyncio

from signoff.engine.models import utcnow
from signoff.engine.store import Store
from tests.store_conformance import ERROR, run_job


async def test_concurrent_sweeps_end_a_job_once(store: Store, db_url: str) -> None:
    from signoff.engine.store import open_store

    job_id = await run_job(store, seconds=-1)
    others = [open_store(db_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.fail_expired_leases(utcnow(), ERROR) for s in [store, *others]))
    finally:
        for s in others:
            await s.close()
    assert sum(job_id in r for r in results) == 1
    assert [e.event for e in await store.read_events(job_id)] == ["run_failed"]
