"""The database goes away under load and comes back (issue 17): a PostgreSQL server of this
test's own, restarted (``pg_ctl stop -m fast``, as an operator does) and crashed (``-m
immediate``) while clients submit and decide runs through a real ``signoff api`` process, a real
``signoff worker`` process doing the work, on the session's Temporal dev server.

What a client sees: never a 500, never a 409 for a decision it sent once; 503 with Retry-After
while the database is away (it retries only those, a submit with its idempotency key); readiness
says the store is down, liveness that the process is up. What the store shows afterwards: every
run completed once, one decision each, gap-free events. And a layer whose writes come after its
HTTP call waits for the database instead of failing and sending the call again."""

from __future__ import annotations

import asyncio
import collections
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from signoff.devserver import free_port
from signoff.engine.models import JobStatus
from signoff.engine.store import open_store
from tests.fixtures.own_postgres import OwnPostgres
from tests.helpers import EgressAllow, Proc, eventually
from tests.integration.api.conftest import REFUND, BlockingHTTP

pytestmark = [pytest.mark.postgres, pytest.mark.temporal]


class Cluster:
    def __init__(self, pg: OwnPostgres, temporal_address: str, tmp: Path, egress: EgressAllow) -> None:
        self.pg, self.tmp = pg, tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "SIGNOFF_DATABASE_URL": pg.url, "SIGNOFF_TEMPORAL_ADDRESS": temporal_address,
                    "SIGNOFF_TASK_QUEUE": f"outage-{uuid.uuid4()}", "SIGNOFF_HOME": str(tmp),
                    "SIGNOFF_API_PORT": str(self.port), "SIGNOFF_EGRESS_ALLOW": egress.value}
        self.metrics_port, self.sdk_metrics_port = free_port(), free_port()
        self.procs: list[Proc] = []
        self.key = ""

    async def start(self) -> None:
        store = open_store(self.pg.url)
        await store.setup()
        user = await store.create_user(f"alice-{uuid.uuid4().hex[:6]}")
        self.key = await store.create_api_key(user.id)
        await store.close()
        worker_env = {**self.env, "SIGNOFF_METRICS_PORT": str(self.metrics_port),
                      "SIGNOFF_TEMPORAL_METRICS_PORT": str(self.sdk_metrics_port)}
        self.procs = [Proc(["worker"], worker_env, self.tmp / "worker.log"),
                      Proc(["api", "--log-level", "warning"], self.env, self.tmp / "api.log")]

        async def ready() -> bool:
            try:
                async with httpx.AsyncClient() as c:
                    return (await c.get(f"{self.url}/health/ready")).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(ready, timeout=60, what="the API to be ready")

    def close(self) -> None:
        for p in self.procs:
            p.close()


@pytest_asyncio.fixture
async def cluster(own_postgres, temporal_server, temporal_client, tmp_path, egress):
    c = Cluster(own_postgres, temporal_server.address, tmp_path, egress)
    try:
        yield c
    finally:
        c.close()


class Client:
    """A client that retries only what the API tells it to retry: a 503 (after its
    Retry-After, shortened here); every answer is counted by status."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.statuses: collections.Counter[int] = collections.Counter()
        self.retried_409: list[str] = []  # 409s answered to a decision sent again after a 503

    async def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        while True:
            r = await self.http.request(method, path, **kw)
            self.statuses[r.status_code] += 1
            if r.status_code != 503:
                return r
            assert r.headers.get("retry-after"), r.text
            assert r.json()["detail"]["code"] in ("STORE_UNAVAILABLE", "UNAVAILABLE"), r.text
            await asyncio.sleep(0.3)

    async def status(self, job_id: str) -> str:
        r = await self.call("GET", f"/api/v2/workflows/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()["status"]

    async def until(self, job_id: str, status: str) -> None:
        async def reached() -> bool:
            return await self.status(job_id) == status

        await eventually(reached, timeout=120, what=f"{job_id} {status}")

    async def one_run(self, flow_id: str, n: int) -> str:
        key = f"run-{uuid.uuid4()}"
        r = await self.call("POST", "/api/v2/workflows", json={"flow_id": flow_id, "input_value": f"refund {n}",
                                                               "session_id": key, "mode": "background",
                                                               "idempotency_key": key})
        assert r.status_code in (200, 201, 202), r.text
        job_id = r.json()["job_id"]
        await self.until(job_id, "suspended")
        request_id = f"gate:{job_id}"
        unavailable = 0
        while True:
            r = await self.http.post(f"/api/v2/workflows/{job_id}/resume",
                                     json={"request_id": request_id, "decision": {"action_id": "approve"}})
            self.statuses[r.status_code] += 1
            if r.status_code == 503:
                unavailable += 1
                await asyncio.sleep(0.3)
                continue
            if r.status_code == 409 and unavailable:
                self.retried_409.append(job_id)  # the first one went through after all
                break
            assert r.status_code == 200, r.text
            break
        await self.until(job_id, "completed")
        return job_id


async def test_a_database_restart_and_crash_under_load_give_503_never_500_and_lose_nothing(cluster: Cluster):
    await cluster.start()
    async with httpx.AsyncClient(base_url=cluster.url, headers={"x-api-key": cluster.key},
                                 timeout=httpx.Timeout(120)) as http:
        client = Client(http)
        flow = await client.call("POST", "/api/v1/flows", json=REFUND)
        assert flow.status_code == 201, flow.text
        flow_id = flow.json()["id"]
        done: list[str] = []

        async def worker(w: int) -> None:
            for i in range(6):
                done.append(await client.one_run(flow_id, w * 100 + i))

        async def chaos() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            for mode in ("fast", "immediate"):
                await eventually(lambda: len(done) >= (4 if mode == "fast" else 14), timeout=120,
                                 what="runs before the outage")
                await asyncio.to_thread(cluster.pg.stop, mode)
                async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as probe:
                    ready = await probe.get("/health/ready")
                    seen[f"ready:{mode}"] = (ready.status_code, ready.json()["detail"].get("checks", {}))
                    seen[f"live:{mode}"] = (await probe.get("/health/live")).status_code
                await asyncio.sleep(3)  # an outage of a few seconds, with the load still on
                await asyncio.to_thread(cluster.pg.start)
            return seen

        results = await asyncio.gather(*(worker(w) for w in range(5)), chaos())
    seen = results[-1]
    for mode in ("fast", "immediate"):
        status, checks = seen[f"ready:{mode}"]
        assert status == 503 and checks["store"].startswith("down") and checks["temporal"] == "ok", seen
        assert seen[f"live:{mode}"] == 200
    assert set(client.statuses) <= {200, 201, 202, 409, 503}, client.statuses
    assert client.statuses[409] == len(client.retried_409), client.statuses  # no 409 for a first decision
    assert client.statuses[503] > 0, "the outage was not seen: the test did not test anything"
    assert len(done) == 30 and len(set(done)) == 30

    # the worker's metrics say what it went through; the Temporal SDK's are served beside them
    async with httpx.AsyncClient(timeout=30) as c:
        worker = (await c.get(f"http://127.0.0.1:{cluster.metrics_port}/metrics")).text
        sdk = (await c.get(f"http://127.0.0.1:{cluster.sdk_metrics_port}/metrics")).text
    from tests.integration.api.test_metrics import samples

    seen = samples(worker)
    assert seen[("signoff_decisions_total", (("outcome", "decided"), ("via", "api")))] == 30
    assert sum(v for (name, labels), v in seen.items()
               if name == "signoff_store_errors_total" and ("code", "STORE_UNAVAILABLE") in labels) > 0
    assert any(name.startswith("temporal_") for name, _ in samples(sdk))

    store = open_store(cluster.pg.url)
    await store.setup()
    try:
        for job_id in done:
            job = await store.get_job(job_id)
            assert job.status == JobStatus.completed
            events = await store.read_events(job_id)
            names = [e.event for e in events]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert names.count("human_input_required") == 1 and names.count("human_input_decision") == 1, names
            assert names[-1] == "end" and names.count("end") == 1, names
    finally:
        await store.close()


async def test_a_layer_whose_writes_meet_an_outage_waits_and_sends_its_call_once(cluster: Cluster, egress):
    blocking = BlockingHTTP()
    egress.add(blocking)
    cluster.env["SIGNOFF_EGRESS_ALLOW"] = egress.value
    try:
        await cluster.start()
        spec = {"name": "ship then ask", "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "ship", "type": "HTTPRequest", "params": {"url": f"{blocking.url}/block/ship", "method": "POST"}},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "ok", "type": "ChatOutput", "params": {"text": "done"}}],
            "edges": [{"from": "ask.message", "to": "ship.body"}, {"from": "ship.response", "to": "gate.prompt"},
                      {"from": "gate.branch_approve", "to": "ok.input_value"}]}
        async with httpx.AsyncClient(base_url=cluster.url, headers={"x-api-key": cluster.key},
                                     timeout=httpx.Timeout(120)) as http:
            client = Client(http)
            flow_id = (await client.call("POST", "/api/v1/flows", json=spec)).json()["id"]
            r = await client.call("POST", "/api/v2/workflows", json={"flow_id": flow_id, "input_value": "x",
                                                                    "mode": "background"})
            job_id = r.json()["job_id"]
            await eventually(lambda: "ship" in blocking.seen, timeout=60, what="the layer to send its call")
            await asyncio.to_thread(cluster.pg.stop, "fast")
            blocking.release("ship")  # the call returns while the database is away: its writes wait
            await asyncio.sleep(10)  # longer than a connection wait (5 s), the heartbeat timeout, the old retries
            await asyncio.to_thread(cluster.pg.start)
            await client.until(job_id, "suspended")
            assert blocking.seen == ["ship"]  # sent once
            r = await client.call("GET", f"/api/v2/workflows/{job_id}")
            assert r.json()["human_request"]["prompt"] == "answer from ship"
    finally:
        blocking.close()
