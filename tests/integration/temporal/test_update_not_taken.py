"""An Update the workflow could not take (issue 28): its workflow task failed (here a worker
interceptor raises in the resume handler, as a deadlock detector or a bug does). Temporal may
answer such an Update FAILED_PRECONDITION (WorkflowNotReadyFailure: service/temporal.py
``_not_ready``, its own unit test in tests/unit/test_temporal_errors.py) or, as this dev server
does, hold it while it retries the task until the API's wait ends
(SIGNOFF_RESUME_TIMEOUT_SECONDS, 5 s here). Either way nothing was applied: the API says 503
with Retry-After and code UNAVAILABLE, not 500, the job waits as it was, and once the task goes
through the decision is applied once: the held Update's or the same decision sent again."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import temporalio.worker

from signoff.api.app import create_app
from signoff.engine.models import JobStatus
from signoff.worker import build_worker
from tests.helpers import event_names, wait_status
from .test_surface import submit


class FailTheResumeTask(temporalio.worker.Interceptor):
    """While ``armed``, the resume Update's handler raises a non-Temporal error: the workflow
    task fails (and is retried by Temporal) instead of answering the Update."""

    def __init__(self) -> None:
        self.armed = True
        self.failed = 0

    def workflow_interceptor_class(self, input: Any) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        fault = self

        class Inbound(temporalio.worker.WorkflowInboundInterceptor):
            async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
                if input.update == "resume" and fault.armed:
                    fault.failed += 1
                    raise RuntimeError("test: the workflow task that took this Update fails")
                return await self.next.handle_update_handler(input)

        return Inbound


async def test_an_update_the_workflow_could_not_take_is_503_with_retry_after(client, store, settings, user,
                                                                            make_flow):
    settings = settings.model_copy(update={"resume_timeout_seconds": 5.0})
    fault = FailTheResumeTask()
    async with build_worker(client, store, settings, interceptors=[fault]):
        from signoff.service import RunService

        service = RunService(settings, store, client)
        app = create_app(settings, store=store, service=service)
        key = await store.create_api_key(user.id)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"x-api-key": key}) as c:
            job = await submit(service, user, await make_flow())
            job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
            assert job.status == JobStatus.suspended
            body = {"request_id": job.pending.request_id, "decision": {"action_id": "approve"}}
            r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json=body)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"].isdigit()
            assert r.json()["detail"]["code"] == "UNAVAILABLE" and fault.failed >= 1
            now = await store.get_job(job.job_id)
            assert now.status == JobStatus.suspended and now.pending.request_id == job.pending.request_id
            assert "human_input_decision" not in await event_names(store, job.job_id)

            fault.armed = False  # the task goes through on Temporal's next attempt: the client tries again
            for _ in range(60):  # as Retry-After says, until Temporal has retried the task
                r = await c.post(f"/api/v2/workflows/{job.job_id}/resume", json=body)
                if r.status_code != 503:
                    break
                await asyncio.sleep(1)
            # applied by this send (200), or by the held one on Temporal's retry of its task (the 503
            # said it may still be): then this one is told the run was already decided, by this user
            assert r.status_code == 200 or (r.status_code == 409 and r.json()["detail"]["code"] == "NOT_RESUMABLE"
                                            and r.json()["detail"]["decided_by"] == user.name), r.text
            await wait_status(store, job.job_id, JobStatus.completed)
            assert (await event_names(store, job.job_id)).count("human_input_decision") == 1
