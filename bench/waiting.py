"""100,000 waiting runs on PostgreSQL (issue 33): resume latency against the 10-run case, the
inbox queries' plans, and what one waiting run stores. Prints JSON.

Real runs cannot be suspended 100,000 at a time on the 2-core box in a bench's time (about 20
a second through Temporal: well over an hour), so the many are **seeded** and the few are real:

1. a real `signoff worker` process, the Temporal dev server and a PostgreSQL store (as
   bench/suspended.py); ``--small`` (10) runs of the gate flow suspended through Temporal and
   resumed one at a time: the baseline (resume→completed, as a user sees it);
2. one more real run suspended: the **template**. Every store row of it (each table with a
   ``job_id``, ``run_id`` or ``trace_id`` column: the job, its event counter and events, its
   checkpoint, its chat messages, its spans, its approvers...) is copied ``--seed`` times by one
   ``INSERT ... SELECT ... CROSS JOIN generate_series`` per table, the ids suffixed, the seeded
   jobs spread over ``--users`` synthetic users (a user's own inbox stays a user's). These runs
   have no workflow in Temporal (the store side of 100,000 waiting runs; the Temporal side is
   measured per run below and by bench/suspended.py in the thousands);
3. ``--small`` new real runs suspended and resumed while the seeded ones wait: the ratio of
   p50 and p95 to the baseline (target: at most 1.5);
4. EXPLAIN of every statement the inbox count, the inbox page and ``/pending`` (list_pending)
   run for a seeded user and for the bench's own user, with the 100,000 present;
5. storage per waiting run: the database's size before and after the seed over the number
   seeded, the template's rows per table, and the Temporal history of a waiting run (its
   events and their bytes, as the server holds them).

Usage: python bench/waiting.py --database-url postgresql://... [--seed 100000] [--users 1000]
       [--small 10] [--cache 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._proc import stop_process  # noqa: E402
from bench.overhead import GATE_FLOW, summary  # noqa: E402
from bench.suspended import resume_latencies, suspend  # noqa: E402
import signoff.engine.store.postgres as pg  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.service import RunService, with_converter  # noqa: E402

ID_COLUMNS = ("job_id", "run_id", "trace_id")
# keys a run shares with no other run, though no row is found by them here: suffixed too, or the
# template's decision would stamp the card of each copy (card_request_id) and its session hold
# all the copies' messages and runs (a real run's are its own)
OWN_KEYS = ("card_request_id", "session_id")
SKIP = {"user_storage", "workflow_releases", "signoff_migrations"}


async def seed(store, template: str, n: int, users: int) -> dict[str, int]:
    """Copy every row of the run ``template`` ``n`` times (see the module docstring); returns
    the rows the template has per table."""
    per_table: dict[str, int] = {}
    async with store._tx(write=True) as tx:
        tables = await tx.fetchall(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY table_name, ordinal_position")
        columns: dict[str, list[str]] = {}
        for r in tables:
            columns.setdefault(r["table_name"], []).append(r["column_name"])
        for table, cols in columns.items():
            keys = [c for c in cols if c in ID_COLUMNS]
            if table in SKIP or not keys:
                continue
            where = " OR ".join(f"t.{k} = ?" for k in keys)
            row = await tx.fetchone(f"SELECT COUNT(*) AS n FROM {table} t WHERE {where}", [template] * len(keys))
            count = int(row["n"]) if row else 0
            if not count:
                continue
            per_table[table] = count
            picks = []
            for c in cols:
                if c in ID_COLUMNS:
                    picks.append(f"CASE WHEN t.{c} = ? THEN t.{c} || '-s' || g ELSE t.{c} END")
                elif c == "id" or c in OWN_KEYS:
                    picks.append(f"t.{c} || '-s' || g")
                elif c == "user_id" and table == "jobs":
                    picks.append(f"'seed-user-' || (g % {users})")
                else:
                    picks.append(f"t.{c}")
            await tx.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(picks)} FROM {table} t "
                             f"CROSS JOIN generate_series(1, ?::int) AS g WHERE {where}", _params(cols, keys, template, n))
    async with store._tx(write=True) as tx:
        await tx.execute("ANALYZE")
    return per_table


def _params(cols: list[str], keys: list[str], template: str, n: int) -> list:
    """The placeholders in order: the CASE of each id column, the series' end, the WHERE."""
    return [template] * sum(1 for c in cols if c in ID_COLUMNS) + [n] + [template] * len(keys)


async def db_bytes(store) -> int:
    async with store._tx(write=False) as tx:
        row = await tx.fetchone("SELECT pg_database_size(current_database()) AS b")
    return int(row["b"])


async def explained(store, call) -> list[dict]:
    """Run ``call()`` with each of its SELECTs EXPLAINed first (the plan PostgreSQL picks)."""
    plans: list[dict] = []
    originals = pg._PgTx.fetchall, pg._PgTx.fetchone

    async def explain(self, sql: str, params) -> None:
        cur = await self._conn.execute("EXPLAIN " + pg._pg(sql), tuple(params) if params else None)
        plans.append({"sql": " ".join(sql.split())[:400], "plan": [r["QUERY PLAN"] for r in await cur.fetchall()]})

    async def fetchall(self, sql, params=()):
        await explain(self, sql, params)
        return await originals[0](self, sql, params)

    async def fetchone(self, sql, params=()):
        await explain(self, sql, params)
        return await originals[1](self, sql, params)

    pg._PgTx.fetchall, pg._PgTx.fetchone = fetchall, fetchone
    try:
        await call()
    finally:
        pg._PgTx.fetchall, pg._PgTx.fetchone = originals
    return plans


async def history_bytes(client, job_id: str) -> dict:
    history = await client.get_workflow_handle(job_id).fetch_history()
    return {"events": len(history.events), "bytes": sum(e.ByteSize() for e in history.events)}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--cache", type=int, default=100)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-waiting-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    worker = None
    started = time.perf_counter()
    try:
        client = with_converter(await server.wait_healthy())
        settings = Settings(home=tmp, database_url=args.database_url, temporal_address=server.address,
                            task_queue=f"bench-{uuid.uuid4()}", max_cached_workflows=args.cache,
                            # the bench's one user submits --small runs at once (the per-user limits lifted)
                            user_max_runs_in_flight=0, write_rate=0, write_rate_total=0)
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
        await resume_latencies(service, store, user, await suspend(service, store, user, flow, 3, 3))  # warm-up

        small = await suspend(service, store, user, flow, args.small, args.small)
        lat_small = await resume_latencies(service, store, user, small)
        (template,) = await suspend(service, store, user, flow, 1, 1)
        history = await history_bytes(client, template.job_id)

        before = await db_bytes(store)
        t = time.perf_counter()
        rows = await seed(store, template.job_id, args.seed, args.users)
        seed_seconds = time.perf_counter() - t
        after = await db_bytes(store)
        async with store._tx(write=False) as tx:
            waiting = (await tx.fetchone("SELECT COUNT(*) AS n FROM jobs WHERE status = 'suspended'"))["n"]

        fresh = await suspend(service, store, user, flow, args.small, args.small)
        lat_many = await resume_latencies(service, store, user, fresh)
        lat_template = await resume_latencies(service, store, user, [template])  # waited through the seed

        seeded_user = await store.get_user("seed-user-7") or type(user)(id="seed-user-7", name="seed-user-7",
                                                                        created_at=user.created_at)
        plans = {}
        for who, u in (("seeded_user", seeded_user), ("bench_user", user)):
            plans[who] = {
                "inbox_count": await explained(store, lambda u=u: service.inbox_count(u)),
                "inbox_page": await explained(store, lambda u=u: service.inbox_page(u, limit=25)),
                "pending": await explained(store, lambda u=u: service.pending_for(u)),
                "list_pending": await explained(store, lambda u=u: store.list_pending(u.id)),
            }
        s_small, s_many = summary(lat_small), summary(lat_many)
        out = {
            "database": "postgresql",
            "seeded_waiting_runs": args.seed, "seeded_users": args.users, "suspended_jobs_in_store": waiting,
            "seed_seconds": round(seed_seconds, 1),
            "resume_to_completed": {
                f"{args.small}_waiting": s_small,
                f"{args.small}_new_while_{args.seed}_waiting": s_many,
                "template_resumed_after_the_seed_ms": round(lat_template[0] * 1000, 1),
                "ratio_p50": round(s_many["p50_ms"] / s_small["p50_ms"], 3),
                "ratio_p95": round(s_many["p95_ms"] / s_small["p95_ms"], 3),
                "target": 1.5,
            },
            "storage_per_waiting_run": {
                "database_bytes": round((after - before) / args.seed),
                "store_rows": rows,
                "temporal_history": history,
            },
            "plans": plans,
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
        await store.close()
        print(json.dumps(out, indent=2))
    finally:
        stop_process(worker)
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
