"""Live streams at scale (issue 17): what idle ``/events`` streams cost a ``signoff api``
process on PostgreSQL, beside the same process with none open. Prints JSON.

For each count of ``--streams`` (default 0, 200, 600): that many streams opened on jobs that are
queued and never run (the stream tails them, as a client following a run does), held open for
``--seconds``; measured: the API process's CPU (utime + stime, % of one core), PostgreSQL
transactions per second for that database (``pg_stat_database.xact_commit``), and the p50/p95 of
a status call (``GET /api/v2/workflows/{id}``) made meanwhile. The 0 row is the baseline of the
same run. With one tail of the store per process (service/feed.py) an idle stream reads nothing;
the earlier poll read each job's log ten times a second.

Usage: python bench/streams.py [--streams 0,200,600] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.latency import cpu_seconds  # noqa: E402
from bench.overhead import summary  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.engine.models import NewJob  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from tests.helpers import Proc  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
GATE = json.loads((ROOT / "examples/flows/refund.json").read_text())


async def commits(db: str) -> float:
    async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as c:
        await c.execute("SELECT pg_stat_force_next_flush()")
        row = await (await c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,))).fetchone()
    return float(row[0])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="0,200,600")
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    counts = [int(x) for x in args.streams.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="signoff-streams-"))
    db = f"streams_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as c:
        await c.execute(f'CREATE DATABASE "{db}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{db}"
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    api = None
    try:
        await server.wait_healthy()
        store = open_store(url)
        await store.setup()
        user = await store.create_user("streams")
        key = await store.create_api_key(user.id)
        flow = await store.save_flow(user.id, "refund", GATE)
        jobs = []
        for _ in range(max(counts) + 1):
            job, _ = await store.create_job(NewJob(job_id=str(uuid.uuid4()), flow_id=flow.id, flow_version=1,
                                                   user_id=user.id, request={"input_value": "q"}))
            jobs.append(job.job_id)
        await store.close()
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}, "SIGNOFF_DATABASE_URL": url,
               "SIGNOFF_TEMPORAL_ADDRESS": server.address, "SIGNOFF_HOME": str(tmp), "SIGNOFF_API_PORT": str(port),
               "SIGNOFF_MAX_STREAMS_PER_USER": str(max(counts) + 10),
               # the sweep would start these queued jobs' workflows: they must stay idle
               "SIGNOFF_START_GRACE_SECONDS": "86400"}
        api = Proc(["api", "--log-level", "warning"], env, tmp / "api.log")
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, headers={"x-api-key": key}, timeout=60,
                                     limits=httpx.Limits(max_connections=max(counts) + 20)) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/health/ready")).status_code == 200:
                        break
                await asyncio.sleep(0.2)
            rows = []
            for n in counts:
                async with contextlib.AsyncExitStack() as stack:
                    for job_id in jobs[1:n + 1]:
                        r = await stack.enter_async_context(http.stream("GET", f"/api/v2/workflows/{job_id}/events"))
                        assert r.status_code == 200
                    await asyncio.sleep(2)  # every stream's first reads done
                    c0, cpu0, t0 = await commits(db), cpu_seconds(api.proc.pid), time.monotonic()
                    latencies = []
                    while time.monotonic() - t0 < args.seconds:
                        s = time.perf_counter()
                        r = await http.get(f"/api/v2/workflows/{jobs[0]}")
                        latencies.append(time.perf_counter() - s)
                        assert r.status_code == 200
                        await asyncio.sleep(0.1)
                    elapsed = time.monotonic() - t0
                    rows.append({"streams": n, "api_cpu_percent": round((cpu_seconds(api.proc.pid) - cpu0) * 100 / elapsed, 1),
                                 "pg_transactions_per_s": round((await commits(db) - c0) / elapsed, 1),
                                 "status_call": summary(latencies)})
        print(json.dumps({"seconds": args.seconds, "database": "postgresql", "rows": rows}, indent=2))
    finally:
        if api is not None:
            api.close()
        server.stop()
        async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as c:
            await c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
