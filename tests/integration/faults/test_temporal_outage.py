"""Temporal goes away and comes back (issue 17): the service reaches the frontend through a proxy
the test cuts and mends (tests/fixtures/tls_proxy.py, plain TCP); the worker keeps its own
connection, as a worker elsewhere would. A submit while Temporal is away is 503 with the job
left queued, started when the submit is sent again with its idempotency key; a stop while it
is away answers what the job really is (cancelled) and the workflow is cancelled once Temporal
is back, not left Running as if it waited."""

from __future__ import annotations

import pytest
import temporalio.client

from signoff.engine.errors import Unavailable
from signoff.engine.models import JobStatus
from signoff.service import RunService, connect_client
from tests.fixtures.tls_proxy import TLSProxy
from tests.helpers import eventually, wait_status

pytestmark = pytest.mark.temporal


@pytest.mark.both_stores
async def test_submit_and_stop_while_temporal_is_away(temporal_server, temporal_client, settings, store, user,
                                                      make_flow, worker):
    flow = await make_flow()
    async with TLSProxy(None, temporal_server.address) as frontend:
        away = settings.model_copy(update={"temporal_address": frontend.address})
        service = RunService(away, store, await connect_client(away))
        waiting, _ = await service.submit(user, flow, input_value="before", session_id="s1", tweaks=None,
                                          idempotency_key=None, mode="background")
        waiting = await wait_status(store, waiting.job_id, JobStatus.suspended)

        await frontend.cut()
        with pytest.raises(Unavailable, match="queued"):
            await service.submit(user, flow, input_value="while away", session_id="s2", tweaks=None,
                                 idempotency_key="k-away", mode="background")
        (queued,) = [j for j in await store.list_unstarted(waiting.created_at.replace(year=2100))
                     if j.request.get("input_value") == "while away"]
        assert queued.status == JobStatus.queued
        stopped = await service.stop(user, waiting.job_id)
        assert stopped.status == JobStatus.cancelled  # what the job really is: the stop holds
        handle = temporal_client.get_workflow_handle(waiting.job_id)
        assert (await handle.describe()).status == temporalio.client.WorkflowExecutionStatus.RUNNING

        await frontend.mend()

        async def closed() -> bool:
            return (await handle.describe()).status != temporalio.client.WorkflowExecutionStatus.RUNNING

        await eventually(closed, timeout=60, what="the stopped run's workflow to be cancelled once Temporal is back")
        assert (await store.get_job(waiting.job_id)).status == JobStatus.cancelled  # and stays so
        again, created = await service.submit(user, flow, input_value="while away", session_id="s2", tweaks=None,
                                              idempotency_key="k-away", mode="background")
        assert again.job_id == queued.job_id and not created
        await wait_status(store, queued.job_id, JobStatus.suspended)  # started now


@pytest.mark.both_stores
async def test_a_run_ended_by_a_process_that_died_before_cancelling_its_workflow_is_released_by_the_sweep(
        temporal_client, settings, store, user, make_flow, worker, service):
    """The stop's cancel claim is written, then the API process dies before it cancels the
    workflow (the soak met it: SIGKILL between the two): the outbox row it wrote first lets the
    next sweep of any replica cancel the workflow, not leave it Running until its max-suspension
    timer."""
    from signoff.engine.lifecycle import RunEnd, end_run

    job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="background")
    job = await wait_status(store, job.job_id, JobStatus.suspended)
    await store.want_release(job.job_id)  # what _end_suspended writes first ...
    assert (await end_run(store, job.job_id, RunEnd(JobStatus.cancelled), from_suspended=True)).won  # ... the end
    handle = temporal_client.get_workflow_handle(job.job_id)  # ... and here the process died
    assert (await handle.describe()).status == temporalio.client.WorkflowExecutionStatus.RUNNING
    assert await service.release_due(older_than=0) == [job.job_id]

    async def closed() -> bool:
        return (await handle.describe()).status != temporalio.client.WorkflowExecutionStatus.RUNNING

    await eventually(closed, timeout=60, what="the workflow to be cancelled by the sweep")
    assert (await store.get_job(job.job_id)).status == JobStatus.cancelled
    assert job.job_id not in await service.store.releases_due(job.created_at.replace(year=2100))
    assert await service.release_due(older_than=0) == []
