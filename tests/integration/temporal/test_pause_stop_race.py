"""A stop while ``persist_pause`` runs (the workflow's finish(cancelled) runs alongside it) leaves
the job cancelled with no event after ``run_cancelled`` (SQLite and PostgreSQL, real Temporal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity

from signoff.activities.flow import FlowActivities
from signoff.engine.models import JobStatus
from signoff.worker import build_worker
from tests.fixtures.world import BACKENDS
from tests.helpers import event_names
from tests.integration.temporal.test_stop_races import replayer
from signoff.activities.types import PersistPauseInput

# ---- 1. no event after the terminal one ---------------------------------------------------------


class ReadThenHold:
    """The real store, whose ``get_job`` answers and then holds the caller until ``release``: the
    activity using it decides on what it read while the job changes under it."""

    def __init__(self, store) -> None:
        self._store = store
        self.read = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_job(self, job_id: str) -> Any:
        job = await self._store.get_job(job_id)
        self.read.set()
        await self.release.wait()
        return job


class HeldPause:
    """The real ``persist_pause`` on a store that holds it between its read of the job and its
    writes."""

    def __init__(self, store, settings) -> None:
        self.store = ReadThenHold(store)
        self.real = FlowActivities(self.store, settings)  # type: ignore[arg-type]
        self.done = asyncio.Event()

    @activity.defn(name="persist_pause")
    async def persist_pause(self, inp: PersistPauseInput) -> None:
        try:
            await self.real.persist_pause(inp)
        finally:
            self.done.set()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_a_stop_while_the_pause_is_persisted_leaves_no_event_after_run_cancelled(
        client, service, store, settings, user, make_flow):
    held = HeldPause(store, settings)
    acts = [held.persist_pause if a.__name__ == "persist_pause" else a for a in FlowActivities(store, settings).all()]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await asyncio.wait_for(held.store.read.wait(), 60)  # persist_pause read the job: in_progress
        assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled  # finish(cancelled) wrote
        held.store.release.set()  # persist_pause now writes what it decided on
        await asyncio.wait_for(held.done.wait(), 60)
        history = await service.client.get_workflow_handle(job.job_id).fetch_history()
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    names = await event_names(store, job.job_id)
    assert names[-1] == "run_cancelled" and names.count("run_cancelled") == 1
    assert "human_input_required" not in names
    await replayer().replay_workflow(history)  # with its patch marker (cancel-during-bookkeeping)
