"""The stop of a job with no running workflow (RunService.stop ends it itself) closes the
run's root span with the status it ended with (SQLite and PostgreSQL, real Temporal)."""

from __future__ import annotations


from signoff.engine.models import JobStatus
from tests.helpers import eventually
from tests.integration.temporal.test_replay import held_http_flow
from tests.integration.temporal.test_stop_races import queued_without_workflow

# ---- 3. the trace of a job stopped without a workflow -----------------------------------------


async def test_the_stop_of_a_job_whose_workflow_was_terminated_closes_its_trace(
        worker, service, store, user, make_flow, http_counter):
    flow = await make_flow(held_http_flow(f"{http_counter.url}/block/trace"))
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    await eventually(lambda: http_counter.counts["/block/trace"] == 1, what="the held call")

    async def root():
        spans = [s for s in await store.get_trace(job.run_id) if s.parent_id is None]
        return spans[0] if spans else None

    assert (await eventually(root, what="the provisional root span")).end_time is None
    await service.client.get_workflow_handle(job.job_id).terminate("an operator ended it in the Web UI")
    assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled
    # the layer is still held: only the stop can have closed the root span
    span = await root()
    assert span.end_time is not None and span.attributes.get("signoff.status") == "cancelled"
    http_counter.release.set()


async def test_the_stop_of_a_queued_job_without_workflow_writes_its_closed_trace(worker, service, store, user,
                                                                                 make_flow):
    job_id = await queued_without_workflow(store, user, await make_flow())
    assert (await service.stop(user, job_id)).status == JobStatus.cancelled
    job = await store.get_job(job_id)
    roots = [s for s in await store.get_trace(job.run_id) if s.parent_id is None]
    assert len(roots) == 1 and roots[0].end_time is not None
    assert roots[0].attributes.get("signoff.status") == "cancelled"
