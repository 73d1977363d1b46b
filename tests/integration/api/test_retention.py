"""SIGNOFF_RUN_RETENTION_DAYS through the real app (its sweep running as in production), worker and
Temporal dev server, on SQLite and PostgreSQL: a run that ended longer ago than the retention is
deleted with everything of it and its bytes given back; a run that waits at its gate is never
taken, however old, and still takes its decision (then goes once it has ended). The retention
here is three seconds and the sweep runs every quarter second, so a test waits for what the sweep
does rather than for a clock."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import pytest_asyncio

from signoff.engine.models import JobStatus
from tests.integration.api.conftest import Harness, _tick, harness, submit_suspended

pytestmark = pytest.mark.both_stores

RETENTION_SECONDS = 3.0


@pytest_asyncio.fixture(scope="module")
async def kept(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("retention"), temporal_client,
                       run_retention_days=RETENTION_SECONDS / 86400, inline_sweep_seconds=0.25) as h:
        yield h


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"the sweep never got there: {what}"
        await _tick()


async def used(c: httpx.AsyncClient) -> int:
    r = await c.get("/api/v1/users/me")
    assert r.status_code == 200, r.text
    return r.json()["stored_bytes"]


async def test_the_sweep_deletes_runs_ended_past_the_retention_and_never_one_that_waits(kept: Harness) -> None:
    h = kept
    async with h.client("alice") as alice:
        before = await used(alice)
        waiting = await submit_suspended(h, session_id="waits")  # sessions apart: no supersede
        with_waiting = await used(alice)
        assert with_waiting > before

        done = await submit_suspended(h, session_id="ends")
        r = await alice.post(f"/api/v2/workflows/{done['job_id']}/resume",
                             json={"request_id": done["human_request"]["request_id"], "decision": {"action_id": "reject"}})
        assert r.status_code == 200, r.text
        await h.wait_status(done["job_id"], JobStatus.completed)

        async def done_is_gone() -> bool:
            return await h.store.get_job(done["job_id"]) is None

        await until(done_is_gone, "the ended run deleted")
        assert await h.store.read_events(done["job_id"]) == [] and await h.store.get_trace(done["job_id"]) == []
        assert await used(alice) == with_waiting  # every byte of the deleted run given back
        assert (await alice.get(f"/api/v2/workflows/{done['job_id']}")).status_code == 404

        # the waiting run is older than the retention by now, and was swept past many times: kept
        job = await h.store.get_job(waiting["job_id"])
        assert job.status == JobStatus.suspended
        assert (time.time() - job.created_at.timestamp()) > RETENTION_SECONDS
        r = await alice.post(f"/api/v2/workflows/{waiting['job_id']}/resume",
                             json={"request_id": waiting["human_request"]["request_id"],
                                   "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await h.wait_status(waiting["job_id"], JobStatus.completed)  # kept RETENTION_SECONDS past its end
        assert [e for e in await h.store.read_events(waiting["job_id"]) if e.event == "human_input_decision"]

        async def waiting_is_gone() -> bool:
            return await h.store.get_job(waiting["job_id"]) is None

        await until(waiting_is_gone, "the run deleted once it ended")
        assert await used(alice) == before
