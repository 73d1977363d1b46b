"""Crashes with real processes killed by SIGKILL: the worker while a run is suspended, the
worker in the middle of a long layer, and the Temporal dev server while runs are suspended.
Every run completes and no vertex built before the crash is built again (counted as HTTP
requests to a local server)."""

from __future__ import annotations

import os

import pytest_asyncio

from signoff.engine.models import Decision, JobStatus
from signoff.engine.settings import Settings
from signoff.devserver import DevServer, free_port
from signoff.service import RunService, with_converter
from signoff.worker import build_worker

from tests.helpers import Proc, eventually, wait_status

def counted_gate_flow(url: str) -> dict:
    return {
        "name": "counted gate",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "call", "type": "HTTPRequest", "params": {"url": f"{url}/count/before", "method": "POST"}},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "ok", "type": "ChatOutput", "params": {"text": "done"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "call.body"},
            {"from": "call.response", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "ok.input_value"},
        ],
    }


def worker_env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "SIGNOFF_TEMPORAL_ADDRESS": settings.effective_temporal_address,
            "SIGNOFF_DATABASE_URL": settings.resolved_database_url, "SIGNOFF_EGRESS_ALLOW": settings.egress_allow,
            "SIGNOFF_TASK_QUEUE": settings.task_queue, "SIGNOFF_HOME": str(settings.home)}


@pytest_asyncio.fixture
async def workers(settings, tmp_path):
    started: list[Proc] = []

    def start() -> Proc:
        w = Proc(["worker"], worker_env(settings), tmp_path / f"worker{len(started)}.log")
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


async def test_worker_killed_while_suspended(workers, service, store, user, make_flow, http_counter):
    first = workers()
    flow = await make_flow(counted_gate_flow(http_counter.url))
    job, _ = await service.submit(user, flow, input_value="hi", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    job = await service.wait_for_pause_or_end(job.job_id, timeout=60)
    assert job.status == JobStatus.suspended
    first.kill()
    second = workers()
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed, timeout=60)
    assert done.result["output"]["text"] == "done"
    assert http_counter.counts["/count/before"] == 1
    assert second.terminate() == 0  # SIGTERM: graceful


async def test_worker_killed_mid_layer(workers, service, store, user, make_flow, http_counter):
    url = http_counter.url
    flow = await make_flow({
        "name": "long layer",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "a", "type": "HTTPRequest", "params": {"url": f"{url}/count/a", "method": "POST"}},
            {"id": "b", "type": "HTTPRequest", "params": {"url": f"{url}/block/b", "method": "POST"}},
            {"id": "out", "type": "TextOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "a.body"},
            {"from": "a.response", "to": "b.body"},
            {"from": "b.response", "to": "out.input_value"},
        ],
    })
    first = workers()
    job, _ = await service.submit(user, flow, input_value="hi", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    await eventually(lambda: http_counter.counts["/block/b"] >= 1, timeout=60, what="the long layer to start")
    first.kill()
    workers()
    # the lost layer is retried on the new worker once its heartbeat times out
    await eventually(lambda: http_counter.counts["/block/b"] >= 2, timeout=60, what="the layer retried")
    http_counter.release.set()
    done = await wait_status(store, job.job_id, JobStatus.completed, timeout=60)
    assert done.result["output"]["text"] == "seen /block/b"
    assert http_counter.counts["/count/a"] == 1  # the earlier layer was not rebuilt


async def test_dev_server_killed_while_suspended(settings, store, user, make_flow, http_counter, tmp_path):
    server = DevServer(port=free_port(), ui_port=None, db_file=tmp_path / "t.db", log_file=tmp_path / "t.log")
    server.start()
    try:
        settings = settings.model_copy(update={"temporal_address": server.address})
        client = with_converter(await server.wait_healthy())
        service = RunService(settings, store, client)
        flow = await make_flow(counted_gate_flow(http_counter.url))
        async with build_worker(client, store, settings):
            jobs = []
            for i in range(3):
                job, _ = await service.submit(user, flow, input_value=f"r{i}", session_id=f"s{i}", tweaks=None,
                                              idempotency_key=None, mode="background")
                jobs.append(job)
            jobs = [await service.wait_for_pause_or_end(j.job_id, timeout=60) for j in jobs]
            assert all(j.status == JobStatus.suspended for j in jobs)
        server.kill()
        server.start()  # same port, same SQLite file
        client = with_converter(await server.wait_healthy())
        service = RunService(settings, store, client)
        async with build_worker(client, store, settings):
            for j in jobs:
                await service.resume(user, j.job_id, j.pending.request_id, Decision(action_id="approve"))
            for j in jobs:
                done = await wait_status(store, j.job_id, JobStatus.completed, timeout=60)
                assert done.result["output"]["text"] == "done"
        assert http_counter.counts["/count/before"] == 3
    finally:
        server.stop()

