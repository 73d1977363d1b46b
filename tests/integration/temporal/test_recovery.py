"""Runs that lost their way between two processes: a submit that died between the job insert
and the workflow start (the idempotent retry and the API's sweep both finish it), and a resume
sent while no worker runs (503 UNAVAILABLE after the bound, and the decision is then applied
once a worker runs, exactly once)."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta

import pytest

from signoff.engine.errors import NotResumable, Unavailable
from signoff.engine.models import Decision, JobStatus, utcnow
from signoff.service import RunService
from signoff.worker import build_worker
from tests.helpers import event_names, queued_without_workflow, settle_leftovers, wait_status


async def test_a_retried_submit_starts_the_workflow_the_first_one_never_started(worker, service, store, user, make_flow):
    flow = await make_flow()
    job_id = await queued_without_workflow(store, user, flow, idempotency_key="k-1")
    job, created = await service.submit(user, flow, input_value="refund 42", session_id=None, tweaks=None,
                                        idempotency_key="k-1", mode="background")
    assert not created and job.job_id == job_id
    assert (await wait_status(store, job_id, JobStatus.suspended)).pending is not None


async def test_the_sweep_starts_runs_left_queued_and_only_once(worker, service, store, user, make_flow):
    flow = await make_flow()
    job_id = await queued_without_workflow(store, user, flow)
    assert job_id in await service.start_unstarted(older_than=0)
    await wait_status(store, job_id, JobStatus.suspended)
    assert job_id not in await service.start_unstarted(older_than=0)  # no longer queued
    await service.resume(user, job_id, f"gate:{job_id}", Decision(action_id="approve"))
    await wait_status(store, job_id, JobStatus.completed)
    assert (await event_names(store, job_id)).count("human_input_required") == 1


async def test_a_resume_while_no_worker_runs_is_503_then_applied_once(client, store, settings, user, make_flow):
    service = RunService(settings.model_copy(update={"resume_timeout_seconds": 1.0}), store, client)
    async with build_worker(client, store, settings):
        job, _ = await service.submit(user, await make_flow(), input_value="refund 42", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await wait_status(store, job.job_id, JobStatus.suspended)
    # every worker is gone
    with pytest.raises(Unavailable) as err:
        await service.resume(user, job.job_id, f"gate:{job.job_id}", Decision(action_id="approve"))
    assert "worker" in err.value.message
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended  # nothing applied yet
    async with build_worker(client, store, settings):
        # The Update admitted while no worker ran is normally applied once a worker runs. Temporal
        # keeps an admitted, not yet accepted Update in memory only, so it can also be dropped (the
        # 503 says "may still be applied"): then the job still waits, and sending the decision
        # again works. Either way exactly one decision is applied.
        try:
            done = await wait_status(store, job.job_id, JobStatus.completed, timeout=8)
        except AssertionError:
            assert (await store.get_job(job.job_id)).status in (JobStatus.suspended, JobStatus.in_progress,
                                                                 JobStatus.completed)
            with contextlib.suppress(NotResumable):  # the first Update may win meanwhile
                await service.resume(user, job.job_id, f"gate:{job.job_id}", Decision(action_id="approve"))
            done = await wait_status(store, job.job_id, JobStatus.completed)
        assert done.result["output"]["text"] == "Refund sent"
        with pytest.raises(NotResumable):
            await service.resume(user, job.job_id, f"gate:{job.job_id}", Decision(action_id="reject"))
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 1


@pytest.mark.both_stores
async def test_the_sweep_deletes_checkpoints_past_their_time_to_live(worker, service, store, user, make_flow,
                                                                    settings):
    """A paused run's checkpoint carries ``expires_at`` = pause + SIGNOFF_CHECKPOINT_TTL_SECONDS;
    the API's sweep (``recover``) deletes the expired ones and keeps the rest."""
    flow = await make_flow()
    job, _ = await service.submit(user, flow, input_value="refund 42", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    paused = await wait_status(store, job.job_id, JobStatus.suspended)
    live = await store.load_latest_checkpoint(paused.run_id)
    assert live is not None and live.expires_at is not None
    ttl = (live.expires_at - paused.pending.paused_at).total_seconds()
    assert abs(ttl - settings.checkpoint_ttl_seconds) < 60
    run = f"expired-{uuid.uuid4()}"
    expired = await store.save_checkpoint(run, {"x": 1}, expires_at=utcnow() - timedelta(seconds=1))
    forever = await store.save_checkpoint(f"forever-{uuid.uuid4()}", {"x": 2}, expires_at=None)
    await settle_leftovers(store)  # the sweep starts queued runs too: none of earlier tests'
    await service.recover()
    assert await store.load_checkpoint(expired) is None and await store.load_latest_checkpoint(run) is None
    assert await store.load_checkpoint(forever) is not None
    assert await store.load_checkpoint(live.id) is not None  # the waiting run keeps its own
    await service.resume(user, job.job_id, paused.pending.request_id, Decision(action_id="approve"))
    await wait_status(store, job.job_id, JobStatus.completed)
