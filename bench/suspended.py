"""Many suspended runs at once: resume latency and worker memory. Prints JSON.

N runs of a gate flow are suspended at the same time (default 1,000; ``--long`` 10,000). The
worker runs in its own process (``python -m signoff.cli worker``) with a bounded workflow cache
(``SIGNOFF_MAX_CACHED_WORKFLOWS``, ``--cache``, default 100), so most suspended runs are not in
its memory and a decision replays the run from its (small) history. Measured in the same run:

- resume→completed p50/p95 for ``--sample`` runs picked across the N, vs the same with only 10
  runs suspended (ratio of p50s; target DESIGN §8: within 1.5×);
- the worker's RSS (``/proc/PID/status`` VmRSS) with 10 and with N runs suspended: bounded by
  the cache, not by N.

Usage: python bench/suspended.py [--runs 1000 | --long] [--cache 100] [--sample 50]
       [--database-url postgresql://...]   (default: a SQLite file in a temp folder)
Default mode takes ~2-3 minutes on the 2-core box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._proc import stop_process  # noqa: E402
from bench.overhead import GATE_FLOW, poll, summary  # noqa: E402
from signoff.engine.models import Decision, JobStatus  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.service import RunService, with_converter  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


async def suspend(service, store, user, flow, n: int, concurrency: int) -> list:
    """Submit n runs (``concurrency`` submissions in flight) and wait until all are suspended."""
    sem = asyncio.Semaphore(concurrency)
    session = str(uuid.uuid4())  # distinct sessions: a new run must not supersede the others

    async def one(i: int):
        async with sem:
            job, _ = await service.submit(user, flow, input_value=f"run {i}", session_id=f"{session}-{i}",
                                          tweaks=None, idempotency_key=None, mode="background")
            return job.job_id

    ids = await asyncio.gather(*(one(i) for i in range(n)))

    async def all_suspended():
        pending = {j.job_id: j for j in await store.list_pending(user.id, flow_id=flow.id)}
        return pending if all(i in pending for i in ids) else None

    pending = await poll(all_suspended, timeout=max(120.0, n * 0.5))
    return [pending[i] for i in ids]


async def resume_latencies(service, store, user, jobs) -> list[float]:
    """One decision at a time (nothing else running): resume→completed, as a user sees it."""
    out = []
    for job in jobs:
        t = time.perf_counter()
        await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
        await poll(lambda: _completed(store, job.job_id), timeout=60)
        out.append(time.perf_counter() - t)
    return out


async def _completed(store, job_id):
    job = await store.get_job(job_id)
    return job.status == JobStatus.completed


async def settle_rss(pid: int, seconds: float = 2.0) -> float:
    """The worker's RSS once it has been idle a moment (the last tasks drained)."""
    await asyncio.sleep(seconds)
    return rss_mb(pid)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--long", action="store_true", help="10,000 suspended runs")
    ap.add_argument("--cache", type=int, default=100, help="the worker's max_cached_workflows")
    ap.add_argument("--sample", type=int, default=50, help="runs resumed (and timed) out of the N")
    ap.add_argument("--small", type=int, default=10, help="the baseline: runs suspended at once")
    ap.add_argument("--concurrency", type=int, default=32, help="submissions in flight")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()
    n = 10_000 if args.long else args.runs

    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-suspended-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    worker = None
    started = time.perf_counter()
    try:
        client = with_converter(await server.wait_healthy())
        settings = Settings(home=tmp, database_url=args.database_url or f"sqlite:///{tmp / 'bench.db'}",
                            temporal_address=server.address, task_queue=f"bench-{uuid.uuid4()}",
                            max_cached_workflows=args.cache)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        env = {**os.environ, "SIGNOFF_HOME": str(tmp), "SIGNOFF_DATABASE_URL": settings.resolved_database_url,
               "SIGNOFF_TEMPORAL_ADDRESS": server.address, "SIGNOFF_TASK_QUEUE": settings.task_queue,
               "SIGNOFF_MAX_CACHED_WORKFLOWS": str(args.cache), "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen([sys.executable, "-m", "signoff.cli", "worker"], cwd=ROOT, env=env,
                                  stdout=open(tmp / "worker.log", "ab"), stderr=subprocess.STDOUT)
        service = RunService(settings, store, client)
        user = await store.create_user(f"bench-{uuid.uuid4()}")
        flow = await store.save_flow(user.id, "gate", GATE_FLOW)
        rss_idle = await settle_rss(worker.pid, 3.0)

        # warm-up (imports, first workflow, connections), not measured
        await resume_latencies(service, store, user, await suspend(service, store, user, flow, 3, 3))

        # the baseline: 10 suspended runs, each resumed alone
        small = await suspend(service, store, user, flow, args.small, args.small)
        rss_small = await settle_rss(worker.pid)
        lat_small = await resume_latencies(service, store, user, small)

        # N suspended at once; a sample spread across them (mostly evicted from the cache)
        # (in two halves: RSS at N/2 and at N shows the plateau once the cache is full)
        t = time.perf_counter()
        many = await suspend(service, store, user, flow, n // 2, args.concurrency)
        suspend_seconds = time.perf_counter() - t
        rss_half = await settle_rss(worker.pid)
        t = time.perf_counter()
        many += await suspend(service, store, user, flow, n - n // 2, args.concurrency)
        suspend_seconds += time.perf_counter() - t
        rss_many = await settle_rss(worker.pid)
        sample = random.Random(7).sample(many, min(args.sample, len(many)))
        lat_many = await resume_latencies(service, store, user, sample)
        rss_after = rss_mb(worker.pid)
        # 10 runs suspended just now, while the other N are still suspended: tells a cost of N
        # itself (server, store) from a cost of resuming a run that waited (evicted, cold)
        fresh = await suspend(service, store, user, flow, args.small, args.small)
        lat_fresh = await resume_latencies(service, store, user, fresh)

        s_small, s_many, s_fresh = summary(lat_small), summary(lat_many), summary(lat_fresh)
        out = {
            "suspended_runs": n,
            "max_cached_workflows": args.cache,
            "database": settings.resolved_database_url.split(":", 1)[0],
            "suspend_all_seconds": round(suspend_seconds, 1),
            "suspend_rate_per_s": round(n / suspend_seconds, 1),
            "resume_to_completed": {
                f"{args.small}_suspended": s_small,
                f"{n}_suspended_sample": s_many,
                f"{args.small}_new_while_{n}_suspended": s_fresh,
                "ratio_p50": round(s_many["p50_ms"] / s_small["p50_ms"], 3),
                "ratio_p95": round(s_many["p95_ms"] / s_small["p95_ms"], 3),
                "target": 1.5,
            },
            "worker_rss_mb": {
                "idle": rss_idle,
                f"{args.small}_suspended": rss_small,
                f"{n // 2}_suspended": rss_half,
                f"{n}_suspended": rss_many,
                "after_sample_resumed": rss_after,
                "growth_10_to_n_mb": round(rss_many - rss_small, 1),
                # the second half of the runs: the cache is full by then, so ~0 when memory is
                # bounded by the cache and not by the number of runs
                "growth_second_half_per_1000_runs_mb": round((rss_many - rss_half) / (n - n // 2) * 1000, 2),
            },
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
        await store.close()
        print(json.dumps(out, indent=2))
    finally:
        stop_process(worker)
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
