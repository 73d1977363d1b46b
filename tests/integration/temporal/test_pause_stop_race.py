"""A stop while a pause is persisted (the workflow's finish(cancelled) runs alongside the layer's
activity that persists it) leaves the job cancelled with no event after ``run_cancelled`` (SQLite
and PostgreSQL, real Temporal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from signoff.activities.flow import FlowActivities
from signoff.engine.models import JobStatus
from signoff.worker import build_worker
from tests.helpers import event_names
from tests.integration.temporal.test_stop_races import replayer

# ---- 1. no event after the terminal one ---------------------------------------------------------


class HoldBeforeSuspend:
    """The real store, whose ``mark_suspended`` is called only after ``release``: the activity
    persisting the pause read the job (in_progress) and decided to write while the job changes
    under it."""

    def __init__(self, store) -> None:
        self._store = store
        self.read = asyncio.Event()
        self.release = asyncio.Event()
        self.done = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def mark_suspended(self, *args: Any, **kwargs: Any) -> bool:
        self.read.set()
        await self.release.wait()
        try:
            return await self._store.mark_suspended(*args, **kwargs)
        finally:
            self.done.set()


@pytest.mark.both_stores
async def test_a_stop_while_the_pause_is_persisted_leaves_no_event_after_run_cancelled(
        client, service, store, settings, user, make_flow):
    held = HoldBeforeSuspend(store)
    acts = FlowActivities(held, settings).all()  # type: ignore[arg-type]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await asyncio.wait_for(held.read.wait(), 60)  # the layer read the job (in_progress), reached the pause
        assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled  # finish(cancelled) wrote
        held.release.set()  # the pause is now written as decided on
        await asyncio.wait_for(held.done.wait(), 60)
        history = await service.client.get_workflow_handle(job.job_id).fetch_history()
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    names = await event_names(store, job.job_id)
    assert names[-1] == "run_cancelled" and names.count("run_cancelled") == 1
    assert "human_input_required" not in names
    await replayer().replay_workflow(history)
