"""What one run costs, measured, for the capacity model (docs/scale.md; issue 17). Prints JSON.

Against real parts: a fresh PostgreSQL database on the machine's server, a Temporal dev server of
its own, a ``signoff api`` and a ``signoff worker`` process. The refund flow (ChatInput →
HumanInput → ChatOutput), ``--runs`` times:

- store, per run to its pause and per decision to its end: PostgreSQL transactions committed
  (``pg_stat_database.xact_commit``), rows written (inserted + updated + deleted) and WAL bytes
  (``pg_stat_wal``), all deltas for that database alone;
- store bytes held per waiting run (the database's size grown by ``--runs`` suspended runs) and
  per ended run (after their decisions: checkpoints go, events and spans stay);
- Temporal, per run: workflow tasks and history events (its history);
- API CPU per request (utime + stime of the ``signoff api`` process over the phase / requests):
  submits, resumes and status reads; the worker's CPU per run.

Usage: python bench/costs.py [--runs 200] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import asyncio
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
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bench.latency import cpu_seconds  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from tests.helpers import Proc  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
GATE = json.loads((ROOT / "examples/flows/refund.json").read_text())


async def pg_counters(url: str, db: str) -> dict[str, float]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
        await c.execute("SELECT pg_stat_force_next_flush()")
        row = await (await c.execute(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted AS rows, pg_database_size(%s) AS size "
            "FROM pg_stat_database WHERE datname = %s", (db, db))).fetchone()
        wal = await (await c.execute("SELECT wal_bytes FROM pg_stat_wal")).fetchone()
    return {"commits": float(row[0]), "rows": float(row[1]), "size": float(row[2]), "wal": float(wal[0])}


def per(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {k: round((after[k] - before[k]) / n, 1) for k in ("commits", "rows", "wal")}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=10)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="signoff-costs-"))
    db = f"costs_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as c:
        await c.execute(f'CREATE DATABASE "{db}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{db}"
    server = DevServer(port=free_port(), ui_port=None, db_file=tmp / "temporal.db", log_file=tmp / "temporal.log")
    server.start()
    procs: list[Proc] = []
    try:
        await server.wait_healthy()
        store = open_store(url)
        await store.setup()
        user = await store.create_user("costs")
        key = await store.create_api_key(user.id)
        await store.close()
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}, "SIGNOFF_DATABASE_URL": url,
               "SIGNOFF_TEMPORAL_ADDRESS": server.address, "SIGNOFF_HOME": str(tmp), "SIGNOFF_API_PORT": str(port),
               "SIGNOFF_TASK_QUEUE": f"costs-{uuid.uuid4()}",
               # its one user submits --runs runs at --concurrency: past the per-user write burst and
               # in-flight limit (docs/security.md), which a bench of costs does not measure
               "SIGNOFF_USER_MAX_RUNS_IN_FLIGHT": "0", "SIGNOFF_WRITE_RATE": "0", "SIGNOFF_WRITE_RATE_TOTAL": "0"}
        worker, api = Proc(["worker"], env, tmp / "worker.log"), Proc(["api", "--log-level", "warning"], env,
                                                                      tmp / "api.log")
        procs += [worker, api]
        limits = httpx.Limits(max_connections=args.concurrency + 5)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"x-api-key": key}, timeout=120,
                                     limits=limits) as http:
            for _ in range(300):
                try:
                    if (await http.get("/health/ready")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
            flow = (await http.post("/api/v1/flows", json=GATE)).json()["id"]
            gate = asyncio.Semaphore(args.concurrency)

            async def submit(i: int) -> dict:
                async with gate:
                    r = await http.post("/api/v2/workflows", json={"flow_id": flow, "input_value": f"refund {i}",
                                                                   "mode": "sync", "session_id": f"s{i}"})
                    body = r.json()
                    assert body["status"] == "suspended", body
                    return body

            async def resume(body: dict) -> None:
                async with gate:
                    job_id = body["job_id"]
                    r = await http.post(f"/api/v2/workflows/{job_id}/resume", json={
                        "request_id": body["human_request"]["request_id"], "decision": {"action_id": "approve"}})
                    assert r.status_code == 200, r.text
                    while (await http.get(f"/api/v2/workflows/{job_id}")).json()["status"] != "completed":
                        await asyncio.sleep(0.05)

            await asyncio.gather(*(resume(b) for b in await asyncio.gather(*(submit(-i - 1) for i in range(20)))))
            n = args.runs
            c0, api0, w0 = await pg_counters(url, db), cpu_seconds(api.proc.pid), cpu_seconds(worker.proc.pid)
            waiting = await asyncio.gather(*(submit(i) for i in range(n)))
            c1, api1, w1 = await pg_counters(url, db), cpu_seconds(api.proc.pid), cpu_seconds(worker.proc.pid)
            statuses_t = time.perf_counter()
            for b in waiting[:100]:
                await http.get(f"/api/v2/workflows/{b['job_id']}")
            status_cpu = (cpu_seconds(api.proc.pid) - api1) / 100
            statuses_ms = (time.perf_counter() - statuses_t) * 1000 / 100
            c1b, api1b, w1b = await pg_counters(url, db), cpu_seconds(api.proc.pid), cpu_seconds(worker.proc.pid)
            await asyncio.gather(*(resume(b) for b in waiting))
            c2, api2, w2 = await pg_counters(url, db), cpu_seconds(api.proc.pid), cpu_seconds(worker.proc.pid)
            client = await Client.connect(server.address)
            tasks, events = [], []
            for b in waiting[:50]:
                history = await client.get_workflow_handle(b["job_id"]).fetch_history()
                events.append(len(history.events))
                tasks.append(sum(1 for e in history.events
                                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED))
        out = {
            "runs": n, "concurrency": args.concurrency,
            "store_per_run": {"to_the_pause": per(c0, c1, n), "decision_to_the_end": per(c1b, c2, n)},
            "store_bytes": {"per_waiting_run": round((c1["size"] - c0["size"]) / n),
                            "per_ended_run": round((c2["size"] - c0["size"]) / n)},
            "temporal_per_run": {"workflow_tasks": sorted(tasks)[len(tasks) // 2],
                                 "history_events": sorted(events)[len(events) // 2]},
            "cpu_ms": {"api_per_submit": round((api1 - api0) * 1000 / n, 2),
                       "api_per_resume_and_its_status_polls": round((api2 - api1b) * 1000 / n, 2),
                       "api_per_status_read": round(status_cpu * 1000, 2), "status_read_ms": round(statuses_ms, 2),
                       "worker_per_run": round(((w1 - w0) + (w2 - w1b)) * 1000 / n, 2)},
        }
        print(json.dumps(out, indent=2))
    finally:
        for p in procs:
            p.close()
        server.stop()
        async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as c:
            await c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
