"""Where a resume's CPU goes (issue 33): `signoff dev` as bench/latency.py starts it, the refund
gate flow, a warm-up of 30 gate runs, then N runs submitted to their pause and resumed one after
another over HTTP while ``py-spy record`` samples the `signoff dev` process (API and worker in
one). Prints JSON: wall time and p50 per resume, the process's CPU per resume from /proc and
that of its threads by name (``signoff``: the Python threads; ``tokio-rt-worker``: Temporal's
core), and the Temporal dev server's; writes py-spy's raw stacks to --out.

py-spy is not a dependency of signoff: ``.venv/bin/pip install py-spy`` first (it needs ptrace:
root, or ``kernel.yama.ptrace_scope=0``). ``--gil`` samples only the thread holding the GIL;
``--blocking`` pauses the process for each sample (whole stacks, at a cost: keep --rate low).

``--rate 0``: no profile (no py-spy needed): the CPU per resume, and per submit before it, as they
run unsampled (the capacity model's figures, docs/scale.md).

Usage: python bench/resume_cpu.py [--runs 300] [--rate 100 | 0] [--gil] [--blocking] [--out stacks.txt]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from latency import GATE, Dev, children, submit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._proc import cpu_seconds  # noqa: E402


def threads(pid: int) -> dict[str, tuple[str, float]]:
    out = {}
    for d in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            out[d.name] = ((d / "comm").read_text().strip(),
                           (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        except OSError:
            pass
    return out


def by_name(before: dict, after: dict, n: int) -> dict[str, float]:
    spent: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        spent[name] = spent.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    return {k: round(v * 1000 / n, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--gil", action="store_true")
    ap.add_argument("--blocking", action="store_true")
    ap.add_argument("--out", default="resume-stacks.txt")
    args = ap.parse_args()
    spy_bin = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy_bin is None and args.rate > 0:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy (or --rate 0: no profile)")
    dev = Dev(None)
    try:
        async with httpx.AsyncClient(base_url=dev.url, headers={"x-api-key": dev.key}, timeout=60) as http:
            await dev.ready(http)
            gate = (await http.post("/api/v1/flows", json=GATE)).json()["id"]

            async def resume(body: dict) -> dict:
                r = await http.post(f"/api/v2/workflows/{body['job_id']}/resume", json={
                    "request_id": body["human_request"]["request_id"], "decision": {"action_id": "approve"}})
                r.raise_for_status()
                return r.json()

            for _ in range(30):
                await resume(await submit(http, gate, "refund 42"))
            pid, server = dev.proc.pid, children(dev.proc.pid)
            sc0, ss0 = cpu_seconds(pid), {p: cpu_seconds(p) for p in server}
            jobs = [await submit(http, gate, "refund 42") for _ in range(args.runs)]  # sync, each to its pause
            submits = (cpu_seconds(pid) - sc0, sum(cpu_seconds(p) - ss0[p] for p in server))
            spy = None
            if args.rate > 0:
                spy = subprocess.Popen([spy_bin, "record", "-p", str(pid), "-r", str(args.rate), "-f", "raw", "-o",
                                        args.out, *([] if args.blocking else ["--nonblocking"]),
                                        *(["--gil"] if args.gil else [])],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await asyncio.sleep(2)
            t0, c0, s0 = threads(pid), cpu_seconds(pid), {p: cpu_seconds(p) for p in server}
            took, each = time.perf_counter(), []
            for body in jobs:
                t = time.perf_counter()
                answer = await resume(body)
                each.append(time.perf_counter() - t)
                assert (answer.get("run") or {}).get("status") == "completed", answer
            took = time.perf_counter() - took
            t1, c1, s1 = threads(pid), cpu_seconds(pid), {p: cpu_seconds(p) for p in server}
            await asyncio.sleep(0.5)
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
    finally:
        dev.stop()
    n = args.runs
    print(json.dumps({"runs": n, "wall_ms_per_resume": round(took * 1000 / n, 2),
                      "p50_ms": round(sorted(each)[n // 2] * 1000, 2),
                      "signoff_cpu_ms_per_resume": round((c1 - c0) * 1000 / n, 2),
                      "signoff_threads_ms_per_resume": by_name(t0, t1, n),
                      "temporal_server_cpu_ms_per_resume": round(sum(s1[p] - s0[p] for p in server) * 1000 / n, 2),
                      # the submits before (sync, each to its pause; never profiled)
                      "signoff_cpu_ms_per_submit": round(submits[0] * 1000 / n, 2),
                      "temporal_server_cpu_ms_per_submit": round(submits[1] * 1000 / n, 2),
                      "stacks": args.out if args.rate > 0 else None}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
