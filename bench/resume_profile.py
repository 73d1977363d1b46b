"""Where a resume's store time goes (issue 14): `signoff dev` as bench/latency.py starts it, the
refund gate flow, N sequential HTTP resumes after a warm-up round; `signoff_store_seconds{op}`
scraped from `/metrics` before and after the timed round gives each store call's count and time
per resume, and `signoff_store_transactions_total{kind}` / `signoff_store_statements_total`
(engine/store/counters.py) the commits, read connections and statements each resume and each
submit (to its pause) cost the database (issue 33). The submits are timed too, sequentially.
Prints JSON (a profile, not a comparison: bench/latency.py measures against the peer).

Issue 33's counts per resume (docs/temporal.md, "A resume in four store calls"): 4 store calls
(user_for_api_key, get_job_with_flow, record_decision, set_status) and 2 commits, plus a
fraction for the service's sweeps that fall in the window; a submit to its pause 10 and 3
(docs/temporal.md, "A submit's pause in one write": 18 and 7 before).

Usage: python bench/resume_profile.py [--runs 50] [--warmup 40] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

import httpx

from latency import GATE, Dev, submit

_SERIES = re.compile(r'signoff_store_seconds_(sum|count)\{op="([^"]+)"\} ([0-9.e+-]+)')
_TX = re.compile(r'signoff_store_transactions_total\{kind="([^"]+)"\} ([0-9.e+-]+)')
_STATEMENTS = re.compile(r'signoff_store_statements_total ([0-9.e+-]+)')


def store_seconds(text: str) -> dict[str, dict[str, float]]:
    """Each store call's count and seconds, and the database's side (engine/store/counters.py):
    under the op names ``:commit`` (write transactions), ``:read`` (read connections) and
    ``:statements``."""
    out: dict[str, dict[str, float]] = {}
    for kind, op, value in _SERIES.findall(text):
        out.setdefault(op, {})[kind] = float(value)
    for kind, value in _TX.findall(text):
        out[f":{kind}"] = {"count": float(value)}
    for value in _STATEMENTS.findall(text):
        out[":statements"] = {"count": float(value)}
    return out


def per(before: dict, after: dict, n: int) -> dict:
    """What happened between two scrapes, per one of ``n``: each store call's count and ms, and
    the totals (store calls = round trips from the caller; commits; statements sent)."""
    ops, db = {}, {}
    for op, v in after.items():
        calls = v.get("count", 0) - before.get(op, {}).get("count", 0)
        secs = v.get("sum", 0) - before.get(op, {}).get("sum", 0)
        if op.startswith(":"):
            db[op[1:]] = round(calls / n, 2)
        elif calls:
            ops[op] = {"calls": round(calls / n, 2), "ms": round(secs * 1000 / n, 2)}
    ops = dict(sorted(ops.items(), key=lambda kv: -kv[1]["ms"]))
    return {"store_calls": round(sum(o["calls"] for o in ops.values()), 2),
            "store_ms": round(sum(o["ms"] for o in ops.values()), 2),
            "commits": db.get("commit"), "read_connections": db.get("read"), "statements": db.get("statements"),
            "ops": ops}


async def metrics(http: httpx.AsyncClient) -> dict:
    return store_seconds((await http.get("/metrics")).text)


async def resumes(http: httpx.AsyncClient, flow_id: str, n: int) -> tuple[float, dict, float, dict]:
    """n runs submitted to their pause one after another, then resumed one after another:
    (resume seconds, per resume, submit seconds, per submit)."""
    before = await metrics(http)
    t = time.perf_counter()
    jobs = [await submit(http, flow_id, "refund 42") for _ in range(n)]
    submitted = time.perf_counter() - t
    middle = await metrics(http)
    t = time.perf_counter()
    for body in jobs:
        r = await http.post(f"/api/v2/workflows/{body['job_id']}/resume", json={
            "request_id": body["human_request"]["request_id"], "decision": {"action_id": "approve"}})
        r.raise_for_status()
    took = time.perf_counter() - t
    return took, per(middle, await metrics(http), n), submitted, per(before, middle, n)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()
    dev = Dev(args.database_url)
    try:
        async with httpx.AsyncClient(base_url=dev.url, headers={"x-api-key": dev.key}, timeout=60) as http:
            await dev.ready(http)
            gate = (await http.post("/api/v1/flows", json=GATE)).json()["id"]
            await resumes(http, gate, args.warmup)
            took, resume, submitted, sub = await resumes(http, gate, args.runs)
    finally:
        dev.stop()
    print(json.dumps({
        "database": (args.database_url or "sqlite").split(":", 1)[0], "runs": args.runs,
        "resume_ms_mean": round(took * 1000 / args.runs, 2),
        "submit_ms_mean": round(submitted * 1000 / args.runs, 2),
        "per_resume": resume, "per_submit": sub}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
