"""A sync run of a flow with no gate next to the in-process engine running the same flow (DESIGN
§8: within 1.2×), measured in the same run, same store. Prints JSON.

Flow: Chat Input → Prompt → Chat Output (three layers, no gate). Over --runs runs each:

- (a) the in-process engine: ``InProcessRunner`` on the same store, with the same tracing (spans
  written to the store, as ``signoff run`` does) — the baseline; (a0) the same without tracing,
  for information;
- (b) ``RunService.submit(mode="sync")``: the job row, the run inline, status + events, chat
  history, trace (docs/inline.md);
- (c) the same through HTTP to a real ``signoff api`` process, for information;
- (d) the same sync submit forced onto Temporal (``SIGNOFF_INLINE_SYNC=false``, an in-process
  worker): what every sync run cost before, for information.

Usage: python bench/sync.py [--runs 50] [--database-url URL]   (SQLite file by default)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.overhead import pct, summary  # noqa: E402

from signoff.engine.runner import InProcessRunner  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.engine.tracing import RunTracing  # noqa: E402
from signoff.engine.tracing import sdk as telemetry  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.service import RunService, with_converter  # noqa: E402
from signoff.worker import build_worker  # noqa: E402

FLOW = {
    "name": "Greeting",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "p", "type": "Prompt", "params": {"template": "You said: {q}"}},
        {"id": "out", "type": "ChatOutput"},
    ],
    "edges": [{"from": "ask.message", "to": "p.q"}, {"from": "p.prompt", "to": "out.input_value"}],
}


async def timed(n: int, fn) -> list[float]:
    for _ in range(3):  # warm-up
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def interleaved(n: int, *fns) -> list[list[float]]:
    for fn in fns:  # warm-up
        for _ in range(3):
            await fn()
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            await fn()
            out[i].append(time.perf_counter() - t)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--temporal-runs", type=int, default=20, help="runs of (d), the Temporal path")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-sync-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    api_proc = None
    try:
        client = with_converter(await server.wait_healthy())
        url = args.database_url or f"sqlite:///{tmp / 'bench.db'}"
        settings = Settings(home=tmp, database_url=url, temporal_address=server.address,
                            task_queue=f"bench-{uuid.uuid4()}")
        telemetry.install(settings)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        user = await store.get_or_create_user(f"bench-{uuid.uuid4().hex[:8]}")
        flow = await store.save_flow(user.id, FLOW["name"], FLOW)
        service = RunService(settings, store, client)
        results: dict = {"flow": "ChatInput -> Prompt -> ChatOutput", "database": url.split(":")[0], "runs": args.runs}

        async def loader(flow_id: str):
            f = await store.get_flow(flow_id)
            return f.spec if f else None

        # (a) the in-process engine, same store, same tracing (spans to the store)
        async def engine_run(traced: bool = True) -> None:
            run_id = str(uuid.uuid4())
            runner = InProcessRunner(store, store, loader, settings=settings,
                                     tracing=RunTracing(store, name=flow.name) if traced else None)
            async with telemetry.collect_spans(store):
                out = await runner.start(FLOW, run_id=run_id, input_value="hello", flow_id=flow.id, user_id=user.id,
                                         session_id=f"bench-a-{run_id}")
            assert out.status == "completed", out

        # (b) the service's sync submit (inline)
        async def service_run() -> None:
            job, _ = await service.submit(user, flow, input_value="hello", session_id=f"bench-b-{uuid.uuid4()}",
                                          tweaks=None, idempotency_key=None, mode="sync")
            assert job.status.value == "completed" and job.request["runner"] == "inline", job

        # interleaved, so that the load of the shared machine weighs on (a) and (b) alike
        a, a0, b = await interleaved(args.runs, engine_run, lambda: engine_run(False), service_run)
        results["a_engine"] = summary(a)
        results["a0_engine_untraced"] = summary(a0)
        results["b_service_sync"] = summary(b)
        results["ratio_b_over_a"] = {
            "p50": round(pct(b, 0.5) / pct(a, 0.5), 3), "p95": round(pct(b, 0.95) / pct(a, 0.95), 3), "target": 1.2}

        # (c) through HTTP to a real `signoff api`
        key = await store.create_api_key(user.id)
        port = free_port()
        env = {**os.environ, "SIGNOFF_TEMPORAL_ADDRESS": server.address, "SIGNOFF_DATABASE_URL": url,
               "SIGNOFF_TASK_QUEUE": settings.task_queue, "SIGNOFF_HOME": str(tmp), "SIGNOFF_API_PORT": str(port),
               "SIGNOFF_WRITE_RATE": "0"}  # back-to-back submits of one user measure latency, not the rate limit
        api_proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", "api", "--log-level", "warning"], cwd=ROOT,
                                    env=env, stdout=open(tmp / "api.log", "ab"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"x-api-key": key},
                                     timeout=60) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await c.get("/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("bench: signoff api did not start")
                await asyncio.sleep(0.1)

            async def http_run() -> None:
                r = await c.post("/api/v2/workflows", json={"flow_id": flow.id, "input_value": "hello",
                                                            "session_id": f"bench-c-{uuid.uuid4()}", "mode": "sync"})
                assert r.status_code == 200 and r.json()["status"] == "completed", r.text

            results["c_http_sync"] = summary(await timed(args.runs, http_run))

        # (d) the same sync submit on Temporal (how every sync run went before)
        temporal = RunService(settings.model_copy(update={"inline_sync": False}), store, client)
        async with build_worker(client, store, settings):
            async def temporal_run() -> None:
                job, _ = await temporal.submit(user, flow, input_value="hello", session_id=f"bench-d-{uuid.uuid4()}",
                                               tweaks=None, idempotency_key=None, mode="sync")
                job = await temporal.wait_for_pause_or_end(job.job_id, 60)
                assert job.status.value == "completed", job

            results["d_temporal_sync"] = summary(await timed(args.temporal_runs, temporal_run))
        await store.close()
        print(json.dumps(results, indent=2))
    finally:
        if api_proc is not None and api_proc.poll() is None:
            os.killpg(api_proc.pid, signal.SIGKILL)
            api_proc.wait()
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
