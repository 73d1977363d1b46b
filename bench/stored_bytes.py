"""What counting stored bytes per user costs the writes it counts (docs/security.md, "Budgets per
user: stored bytes"): event appends per second (one job, then 8 jobs of one user at once: the
usage rows they share) and span saves (batches of 10, each charged after its old size is read),
on SQLite (a temp file) and PostgreSQL (a fresh database, dropped). Run it with this checkout and
with one before the budget to compare:

    .venv/bin/python bench/stored_bytes.py [pg]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid

import psycopg

from signoff.engine.store import open_store
from signoff.engine.models import NewJob, SpanRecord, utcnow


async def bench(url: str) -> None:
    store = open_store(url)
    await store.setup()
    user = await store.create_user(f"u-{uuid.uuid4()}")
    jobs = []
    for _ in range(8):
        job, _ = await store.create_job(NewJob(job_id=str(uuid.uuid4()), flow_id="f", flow_version=1, user_id=user.id))
        jobs.append(job.job_id)
    data = {"output": "x" * 1000}
    n = 1000
    t = time.perf_counter()
    for i in range(n):
        await store.append_event(jobs[0], "e", data)
    seq = n / (time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(*(store.append_event(jobs[i % 8], "e", data) for i in range(n)))
    par = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(200):
        await store.save_spans([SpanRecord(trace_id=jobs[0], span_id=f"s{i}-{k}", name="n", type="t", start_time=utcnow(),
                                           run_id=jobs[0], outputs=data) for k in range(10)])
    spans = 2000 / (time.perf_counter() - t)
    print(f"{url.split(':')[0]}: appends {seq:.0f}/s sequential, {par:.0f}/s 8 jobs at once; spans {spans:.0f}/s (batches of 10)")
    await store.close()


async def main() -> None:
    if "pg" not in sys.argv: await bench(f"sqlite:///{tempfile.gettempdir()}/stored-bench-{uuid.uuid4().hex[:8]}.db")
    name = f"signoff_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        await bench(f"postgresql://postgres@127.0.0.1:5432/{name}")
    finally:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
