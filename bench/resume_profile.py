"""Where a resume's store time goes (issue 14): `signoff dev` as bench/latency.py starts it, the
refund gate flow, N sequential HTTP resumes after a warm-up round; `signoff_store_seconds{op}`
scraped from `/metrics` before and after the timed round gives each store call's count and time
per resume. Prints JSON (a profile, not a comparison: bench/latency.py measures against the peer).

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


def store_seconds(text: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind, op, value in _SERIES.findall(text):
        out.setdefault(op, {})[kind] = float(value)
    return out


async def resumes(http: httpx.AsyncClient, flow_id: str, n: int) -> tuple[float, dict, dict]:
    """n runs submitted to their pause, then resumed one after another: (seconds, metrics before, after)."""
    jobs = [await submit(http, flow_id, "refund 42") for _ in range(n)]
    before = store_seconds((await http.get("/metrics")).text)
    t = time.perf_counter()
    for body in jobs:
        r = await http.post(f"/api/v2/workflows/{body['job_id']}/resume", json={
            "request_id": body["human_request"]["request_id"], "decision": {"action_id": "approve"}})
        r.raise_for_status()
    took = time.perf_counter() - t
    return took, before, store_seconds((await http.get("/metrics")).text)


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
            took, before, after = await resumes(http, gate, args.runs)
    finally:
        dev.stop()
    ops = {}
    for op, v in after.items():
        calls = v.get("count", 0) - before.get(op, {}).get("count", 0)
        secs = v.get("sum", 0) - before.get(op, {}).get("sum", 0)
        if calls:
            ops[op] = {"calls_per_resume": round(calls / args.runs, 2), "ms_per_resume": round(secs * 1000 / args.runs, 2)}
    ops = dict(sorted(ops.items(), key=lambda kv: -kv[1]["ms_per_resume"]))
    print(json.dumps({
        "database": (args.database_url or "sqlite").split(":", 1)[0], "runs": args.runs,
        "resume_ms_mean": round(took * 1000 / args.runs, 2),
        "store_ms_per_resume": round(sum(o["ms_per_resume"] for o in ops.values()), 2),
        "store_calls_per_resume": round(sum(o["calls_per_resume"] for o in ops.values()), 2),
        "ops": ops}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
