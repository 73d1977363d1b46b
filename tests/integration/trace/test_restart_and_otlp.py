"""A run paused and resumed, with the worker and the API killed (SIGKILL) and started again in
between, as separate processes: one trace per run in the store, served by the API, and the
same spans, with Temporal's own, at a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import httpx
import pytest_asyncio

from signoff.engine.models import JobStatus
from signoff.devserver import free_port

from tests.helpers import Proc

from .conftest import EXPECTED, OTLPReceiver, eventually, gate_flow

ROOT = Path(__file__).resolve().parents[3]


@pytest_asyncio.fixture
async def cluster(settings, tmp_path, otlp: OTLPReceiver, temporal_client):
    """Start worker and API processes (as many generations as asked) sharing store and queue.

    ``temporal_client`` is here for its wait: the session's dev server fixture only starts the
    process, and it is ``temporal_client`` that waits until the frontend answers (and the
    search attributes exist). Without it, a test run alone (``-k``) starts the worker before
    the server listens, and the worker dies with "connection refused"."""
    port = free_port()
    env = {**os.environ, "SIGNOFF_TEMPORAL_ADDRESS": settings.effective_temporal_address,
           "SIGNOFF_DATABASE_URL": settings.resolved_database_url, "SIGNOFF_EGRESS_ALLOW": settings.egress_allow, "SIGNOFF_TASK_QUEUE": settings.task_queue,
           "SIGNOFF_HOME": str(settings.home), "SIGNOFF_API_PORT": str(port),
           "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    started: list[Proc] = []

    async def start() -> tuple[Proc, Proc]:
        n = len(started)
        worker = Proc(["worker"], env, tmp_path / f"worker{n}.log")
        api = Proc(["api", "--log-level", "warning"], env, tmp_path / f"api{n}.log")
        started.extend([worker, api])

        async def healthy() -> bool:
            try:
                async with httpx.AsyncClient() as c:
                    return (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(healthy, timeout=60, what="the API to answer /health")
        return worker, api

    start.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield start
    for p in started:
        p.close()


async def test_paused_and_resumed_across_killed_processes_is_one_trace(cluster, store, user, otlp):
    key = await store.create_api_key(user.id)
    h = {"x-api-key": key}
    worker, api = await cluster()
    async with httpx.AsyncClient(base_url=cluster.url, headers=h, timeout=30) as c:
        flow = (await c.post("/api/v1/flows", json=gate_flow())).json()
        jobs = {}
        for action in EXPECTED:
            r = await c.post("/api/v2/workflows", json={"flow_id": flow["id"], "input_value": "order 42",
                                                        "session_id": f"s-{action}", "mode": "background"})
            assert r.status_code in (200, 201, 202), r.text
            jobs[action] = r.json()["job_id"]

        async def all_suspended():
            out = {}
            for action, job_id in jobs.items():
                body = (await c.get(f"/api/v2/workflows/{job_id}")).json()
                if body["status"] != "suspended":
                    return None
                out[action] = body["human_request"]["request_id"]
            return out

        requests = await eventually(all_suspended, timeout=60, what="three suspended runs")

    def exported_layers():  # the layer's activity span, batched every 200 ms, left before the kill
        return all(any(s["name"] == "RunActivity:run_layer" for s in otlp.of_trace(j.replace("-", "")))
                   for j in jobs.values())

    await eventually(exported_layers, timeout=30, what="the first worker's activity spans at the OTLP receiver")
    worker.kill()
    api.kill()

    worker, api = await cluster()  # new processes, nothing in memory
    async with httpx.AsyncClient(base_url=cluster.url, headers=h, timeout=30) as c:
        for action, job_id in jobs.items():
            r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": requests[action], "decision": {"action_id": action}})
            assert r.status_code == 200, r.text

        async def all_completed():
            for job_id in jobs.values():
                if (await store.get_job(job_id)).status != JobStatus.completed:
                    return False
            return True

        await eventually(all_completed, timeout=60, what="three completed runs")
        for action, job_id in jobs.items():
            trace = (await c.get(f"/api/v1/monitor/traces/{job_id}")).json()
            assert trace["trace_id"] == job_id
            (root,) = trace["spans"]
            assert root["type"] == "flow" and root["status"] == "ok" and root["end_time"]
            names = [ch["name"] for ch in root["children"]]
            assert names == EXPECTED[action], (action, names)
            vertices = collections.Counter(ch["attributes"].get("signoff.vertex_id") for ch in root["children"])
            assert all(n == 1 for n in vertices.values())
        listed = (await c.get("/api/v1/monitor/traces", params={"flow_id": flow["id"]})).json()
        assert sorted(t["trace_id"] for t in listed) == sorted(jobs.values())
        assert all(t["status"] == "ok" and t["run_status"] == "completed" and t["duration_ms"] > 0 for t in listed)

    # graceful stops push what the OTLP batches still hold (Temporal's client and activity spans)
    assert worker.terminate() == 0
    api.terminate()
    for action, job_id in jobs.items():
        stored = {s.span_id for s in await store.get_trace(job_id)}
        trace_hex = job_id.replace("-", "")

        def received():
            got = otlp.of_trace(trace_hex)
            ours = {s["span_id"] for s in got if s["scope"] == "signoff"}
            return got if stored <= ours else None

        got = await eventually(received, timeout=30, what=f"the spans of {action} at the OTLP receiver")
        ours = [s for s in got if s["scope"] == "signoff"]
        assert {s["span_id"] for s in ours} == stored
        gate = next(s for s in ours if s["name"].startswith("Human In The Loop — "))
        assert gate["attributes"]["signoff.action_id"] == action
        names = {s["name"] for s in got if s["scope"] != "signoff"}
        # Temporal's spans are in the same trace: the workflow, its activities, the resume Update
        assert {"RunActivity:run_layer", "RunActivity:resume_run", "StartWorkflowUpdate:resume"} <= names, names
