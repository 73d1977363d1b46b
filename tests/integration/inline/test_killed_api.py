"""An API process SIGKILLed in the middle of an inline run (its HTTPRequest blocked on a local
server) leaves a job that is not ``in_progress`` forever: the next API process's sweep ends it
as ``failed`` with ``run_failed`` {error: "the process running it stopped"}, once its lease ran
out. Real ``signoff api`` subprocesses, a real database on each backend."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from signoff.engine.models import JobStatus
from signoff.devserver import free_port
from signoff.service.inline import PROCESS_STOPPED
from tests.helpers import eventually, wait_status

from .conftest import blocking_flow

ROOT = Path(__file__).resolve().parents[3]


class Api:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", "api", "--log-level", "warning"], cwd=ROOT,
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


@pytest.mark.both_stores
async def test_a_killed_api_leaves_a_job_the_sweep_fails(settings, store, user, make_flow, http_counter, tmp_path,
                                                         temporal_client):
    port = free_port()
    env = {**os.environ, "SIGNOFF_TEMPORAL_ADDRESS": settings.effective_temporal_address,
           "SIGNOFF_DATABASE_URL": settings.resolved_database_url, "SIGNOFF_EGRESS_ALLOW": settings.egress_allow, "SIGNOFF_TASK_QUEUE": settings.task_queue,
           "SIGNOFF_HOME": str(settings.home), "SIGNOFF_API_PORT": str(port),
           "SIGNOFF_INLINE_LEASE_SECONDS": "2", "SIGNOFF_INLINE_HEARTBEAT_SECONDS": "0.5",
           "SIGNOFF_INLINE_SWEEP_SECONDS": "0.5"}
    url = f"http://127.0.0.1:{port}"
    key = await store.create_api_key(user.id)
    flow = await make_flow(blocking_flow(f"{http_counter.url}/block/{uuid.uuid4()}"))
    session = f"s-{uuid.uuid4()}"

    async def healthy() -> bool:
        try:
            async with httpx.AsyncClient() as c:
                return (await c.get(f"{url}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    apis = [Api(env, tmp_path / "api0.log")]
    try:
        await eventually(healthy, timeout=60, what="the API to answer /health")
        async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=60) as c:
            # the sync call blocks with the run; it dies with the process
            call = asyncio.create_task(c.post("/api/v2/workflows", json={
                "flow_id": flow.id, "input_value": "hi", "session_id": session, "mode": "sync"}))
            await eventually(lambda: sum(http_counter.counts.values()) == 1, what="the HTTP call to block")
            (job,) = [j for j in [await _job_of(store, session)] if j is not None]
            assert job.status == JobStatus.in_progress and job.request["runner"] == "inline"
            apis[0].kill()
            with pytest.raises(httpx.HTTPError):
                await call

        apis.append(Api(env, tmp_path / "api1.log"))  # a new process: its sweep finds the expired lease
        ended = await wait_status(store, job.job_id, JobStatus.failed, timeout=60)
        assert ended.error == {"error": PROCESS_STOPPED, "type": "ProcessStopped", "vertex_id": None}
        events = await store.read_events(job.job_id)
        assert [(e.event, e.data["error"]) for e in events] == [("run_failed", PROCESS_STOPPED)]

        async def root_closed():  # the sweep closes the trace right after its claim won
            root = [s for s in await store.get_trace(job.run_id) if s.parent_id is None]
            return root and root[0].status == "error" and root[0].end_time is not None

        await eventually(root_closed, timeout=30, what="the trace to say the run ended")
        # the status the API serves tells what happened
        await eventually(healthy, timeout=60, what="the new API to answer /health")
        async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=30) as c:
            body = (await c.get(f"/api/v2/workflows/{job.job_id}")).json()
            assert body["status"] == "failed"
            stop = (await c.post("/api/v2/workflows/stop", json={"job_id": job.job_id})).json()
            assert stop["status"] == "failed"
    finally:
        for api in apis:
            api.kill()


async def _job_of(store, session: str):
    async def find():
        for job_id in await _session_jobs(store, session):
            return await store.get_job(job_id)
        return None

    return await eventually(find, timeout=30, what="the job row")


async def _session_jobs(store, session: str) -> list[str]:
    return [m.job_id for m in await store.list_messages(session) if m.job_id]
