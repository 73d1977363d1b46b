"""Store throughput on both backends; prints JSON.

    .venv/bin/python bench/store.py [--seconds 1.5] [--pg postgresql://postgres@127.0.0.1:5432/test]

For each backend: event appends per second and resume claims per second, with one writer and
with 8 concurrent writers (8 coroutines sharing one store, as in one API or worker process).
SQLite additionally reports 8 writers on 8 separate store instances (separate connections
contending for the file lock, as separate processes would). SQLite runs on a temp file with the
default synchronous=FULL, and appends once more with NORMAL for comparison. PostgreSQL runs in a fresh
database that is dropped afterwards. Runtime: about 30-40 s (most of it making the suspended jobs the claims consume).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.engine.models import JobStatus, NewJob, PendingRequest, utcnow  # noqa: E402
from signoff.engine.store import Store, open_store  # noqa: E402

WRITERS = 8


async def _job(store: Store, suspended: bool = False) -> tuple[str, str]:
    job_id = str(uuid.uuid4())
    status = JobStatus.in_progress if suspended else JobStatus.queued
    await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench", status=status))
    request_id = f"gate:{job_id}"
    if suspended:
        await store.mark_suspended(job_id, PendingRequest(request_id=request_id, paused_at=utcnow()))
    return job_id, request_id


async def _run_for(seconds: float, stores: list[Store], op) -> float:
    """Run op(store, writer_index) in len(stores) concurrent loops for ``seconds``; ops per second."""
    counts = [0] * len(stores)
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        while time.perf_counter() < deadline:
            if not await op(stores[i], i):
                return
            counts[i] += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(len(stores))))
    return sum(counts) / (time.perf_counter() - start)


async def _appends(stores: list[Store], seconds: float) -> float:
    jobs = [(await _job(stores[0]))[0] for _ in stores]
    return await _run_for(seconds, stores, lambda s, i: s.append_event(jobs[i], "progress", {"i": 1}))


async def _claims(stores: list[Store], seconds: float, expected_rate: float) -> float:
    # enough suspended jobs for the measured window, made before the clock starts
    pool_size = int(expected_rate * seconds * 1.3) + 50
    queues: list[list[tuple[str, str]]] = [[] for _ in stores]

    async def fill(i: int) -> None:
        for _ in range(pool_size // len(stores) + 1):
            queues[i].append(await _job(stores[i], suspended=True))

    await asyncio.gather(*(fill(i) for i in range(len(stores))))

    async def claim(store: Store, i: int) -> bool:
        if not queues[i]:
            return False
        job_id, request_id = queues[i].pop()
        assert await store.claim_suspended_for_resume(job_id, request_id)
        return True

    return await _run_for(seconds, stores, claim)


async def _measure(url: str, seconds: float, separate: bool, claims: bool = True, **options) -> dict:
    main = open_store(url, **options)
    await main.setup()
    extra: list[Store] = []
    try:
        result: dict = {}
        shared = [main] * WRITERS
        one_rate = await _appends([main], seconds)
        result["appends_per_s"] = {"1_writer": round(one_rate), f"{WRITERS}_writers": round(await _appends(shared, seconds))}
        if not claims:
            return result
        result["claims_per_s"] = {
            "1_writer": round(await _claims([main], seconds, one_rate)),
            f"{WRITERS}_writers": round(await _claims(shared, seconds, one_rate * 2)),
        }
        if separate:
            extra = [open_store(url, **options) for _ in range(WRITERS - 1)]
            for s in extra:
                await s.setup()
            instances = [main, *extra]
            result["appends_per_s"][f"{WRITERS}_writers_separate_connections"] = round(await _appends(instances, seconds))
            result["claims_per_s"][f"{WRITERS}_writers_separate_connections"] = round(
                await _claims(instances, seconds, one_rate)
            )
        return result
    finally:
        for s in extra:
            await s.close()
        await main.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="measured window per number")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="maintenance database URL")
    args = parser.parse_args()
    out: dict = {"benchmark": "store", "seconds_per_measurement": args.seconds, "python": platform.python_version(),
                 "cpus": os.cpu_count()}

    with tempfile.TemporaryDirectory() as tmp:
        out["sqlite"] = await _measure(f"sqlite:///{tmp}/bench.db", args.seconds, separate=True)
        out["sqlite"]["synchronous"] = "FULL"
    with tempfile.TemporaryDirectory() as tmp:
        normal = await _measure(f"sqlite:///{tmp}/bench.db?synchronous=normal", args.seconds, separate=False, claims=False)
        out["sqlite_synchronous_normal"] = normal

    import psycopg

    name = f"signoff_bench_{uuid.uuid4().hex[:8]}"
    server = args.pg.rsplit("/", 1)[0]
    with psycopg.connect(args.pg, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        out["postgres"] = await _measure(f"{server}/{name}", args.seconds, separate=False, max_size=WRITERS)
    finally:
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
