"""How long a write transaction holds the SQLite writer (issue 28's budget soak); prints JSON.

    .venv/bin/python bench/writer_hold.py [--seconds 3] [--writers 8]

``writers`` coroutines on one SQLiteStore (as in one API or worker process) append events and
renew leases, each a write transaction (append_event: 2 statements and the COMMIT; set_status with
an event: 4). The hold is measured on the writer's thread from BEGIN IMMEDIATE to the end of the
COMMIT (engine/store/counters.py: HOLD, ``signoff_store_writer_hold_seconds`` on /metrics), with
the part spent inside SQLite's calls beside it. Two ways of running a transaction, in the same run:

- ``hops``: ``_tx(write=True)``, a hop to the writer's thread and back to the event loop per
  statement (every write before this change);
- ``one_hop``: ``_write(body)``, the whole transaction on the writer's thread in one hop.

each quiet and under load: the event loop kept busy (a task running 2 ms of Python between
yields, as the soak's component builds do) and one thread holding the GIL (a CPU-bound check run
off the loop, as the soak's schema checks are). Runtime: about 4 x ``seconds`` plus set-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.engine.models import JobStatus, NewJob  # noqa: E402
from signoff.engine.store import counters  # noqa: E402
from signoff.engine.store.sql.core import SQLCore  # noqa: E402
from signoff.engine.store.sqlite import SQLiteStore  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _phase(store: SQLiteStore, jobs: list[str], seconds: float, loaded: bool) -> dict[str, float]:
    holds: list[tuple[float, float]] = []
    observe = counters.HOLD.observe
    counters.HOLD.observe = lambda held, work: holds.append((held, work))  # type: ignore[method-assign]
    stop = threading.Event()
    hog = None
    busy = None
    if loaded:
        def spin() -> None:  # a CPU-bound check off the loop: holds the GIL but for switches
            while not stop.is_set():
                sum(i * i for i in range(2000))

        hog = threading.Thread(target=spin, daemon=True)
        hog.start()

        async def loop_work() -> None:  # the loop busy with other requests' Python
            while not stop.is_set():  # ~2/3 busy, as py-spy found the soak's loop (65 %)
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
                await asyncio.sleep(0.001)

        busy = asyncio.create_task(loop_work())
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def writer(i: int) -> None:
        job_id = jobs[i]
        n = 0
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            if n % 2:
                await store.append_event(job_id, "bench", {"n": n})
            else:
                await store.set_status(job_id, JobStatus.in_progress, event=("bench_status", {"n": n}))
            latencies.append(time.perf_counter() - start)
            n += 1

    try:
        await asyncio.gather(*(writer(i) for i in range(len(jobs))))
    finally:
        stop.set()
        if busy is not None:
            await busy
        if hog is not None:
            hog.join()
        counters.HOLD.observe = observe  # type: ignore[method-assign]
    held = [h for h, _ in holds]
    work = [w for _, w in holds]
    return {
        "transactions": len(holds),
        "per_second": round(len(holds) / seconds, 1),
        "hold_p50_ms": round(statistics.median(held) * 1000, 3),
        "hold_p95_ms": round(_pct(held, 0.95) * 1000, 3),
        "sqlite_work_p50_ms": round(statistics.median(work) * 1000, 3),
        "write_call_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "write_call_p95_ms": round(_pct(latencies, 0.95) * 1000, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--switch-ms", type=float, default=0.0,
                        help="sys.setswitchinterval for the run, in ms (default: Python's 5 ms)")
    args = parser.parse_args()
    if args.switch_ms:
        sys.setswitchinterval(args.switch_ms / 1000)
    out: dict[str, object] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "writers": args.writers, "seconds": args.seconds,
                              "switch_interval_ms": sys.getswitchinterval() * 1000}
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        await store.setup()
        jobs = []
        for _ in range(args.writers):
            job_id = str(uuid.uuid4())
            await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench",
                                          status=JobStatus.in_progress))
            jobs.append(job_id)
        one_hop = store._write
        hops = SQLCore._write.__get__(store)
        for loaded in (False, True):
            for mode, write in (("hops", hops), ("one_hop", one_hop)):
                store._write = write  # type: ignore[method-assign]
                out[f"{mode}_{'loaded' if loaded else 'quiet'}"] = await _phase(store, jobs, args.seconds, loaded)
        for phase in ("quiet", "loaded"):
            before, after = out[f"hops_{phase}"], out[f"one_hop_{phase}"]
            out[f"hold_p50_ratio_{phase}"] = round(before["hold_p50_ms"] / after["hold_p50_ms"], 2)  # type: ignore[index]
        await store.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
