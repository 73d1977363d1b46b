"""The in-process peer, Langflow's `lfx` 1.13 (`lfx serve` in its durable mode), measured the way
bench/latency.py measures signoff: client-observed over HTTP with httpx, same warmup, runs,
concurrency and reps, so that the two can be compared in one run (this machine's speed drifts ~3x
from day to day: figures from another day are useless). Prints JSON.

How lfx is started: a venv outside the repo (--venv, default /tmp/signoff-bench-lfx; made with
`python3.11 -m venv` + `pip install lfx==1.13.0` when missing), two flows generated there from lfx's
own component classes (Graph(...).dump(), Langflow's export JSON), then, in a temp folder,
`lfx serve <flows dir> --host 127.0.0.1 --port <free>` with LANGFLOW_API_KEY=<random> (sent as
x-api-key) and LFX_SERVE_DURABLE_DB=<temp>/durable.db. That variable is the whole switch: without it
serve is stateless and mode=background answers 422; with it the v2 router gets a durable host
(lfx/cli/serve_durable.py) on one SQLite file (WAL; jobs, a per-job event log, signals and graph
checkpoints), with the job routes GET /api/v2/workflows?job_id=, POST /api/v2/workflows/stop,
GET .../{job_id}/pending, GET .../{job_id}/events (SSE) and POST .../{job_id}/resume.

What differs from signoff's contract, and so how each row is taken:

- lfx pauses only in mode=background. A mode=sync run of the gate flow does not stop at the
  HumanInput: the pause request is ignored (checkpointing is off on that path), the node answers
  an empty message and the run completes with output "" and human_request null. So:
- submit→suspended: POST mode=background (answers "queued" at once), then GET status every 2 ms
  until `suspended`, p50/p95. `submit_to_request` adds the GET .../pending that hands the client the
  request_id it must resume with (signoff's sync answer carries it), p50/p95.
- resume→completed: POST .../resume {request_id, decision: {action_id: approve}} (answers
  "resuming" and nothing of the run), then GET status every 2 ms until `completed`, p50/p95, as
  bench/latency.py does for signoff when its resume's answer (`run`) does not say `completed`.
- throughput: --concurrency background submits at once, then one client sweep (one GET in flight,
  2 ms apart, in submit order) until every job is `suspended`; jobs/s over the wall time, median of
  --reps rounds. Each job gets its own copy of the gate flow: lfx keeps one pause per flow (a
  background submit cancels the flow's runs already suspended), so 50 submits of one flow would
  not leave 50 pauses. Each round's jobs are stopped afterwards, untimed.
- sync run, no gate: ChatInput → ChatOutput, POST mode=sync, p50/p95.

Everything is warmed up first (--warmup gate runs and no-gate runs). The flows: ChatInput →
HumanInput (Approve/Reject) → ChatOutput on the approve branch, and ChatInput → ChatOutput.

Usage: python3.11 bench/peer.py [--runs 50] [--warmup 30] [--concurrency 50] [--reps 3]
       [--venv /tmp/signoff-bench-lfx]
One run takes about a minute (~20 s of it to start lfx), plus ~1.5 min the first time for the venv.
Any python3.11 will do: without httpx it re-runs itself in the lfx venv. From bench/latency.py,
`await measure_peer(...)` gives the same dict, or `async with Peer(...) as peer:` with its
gate_once / echo_once / concurrent_round to interleave with signoff's runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._proc import cpu_seconds, free_port, stop_group, summary, wait_healthy  # noqa: E402

LFX_VERSION = "1.13.0"
DEFAULT_VENV = "/tmp/signoff-bench-lfx"
POLL_S = 0.002  # as bench/latency.py
DEADLINE_S = 60.0  # no poll loop runs longer than this

# Run in the lfx venv: the two flows from lfx's own component classes, as Langflow export JSON
# ({"data": {"nodes", "edges"}}), the gate flow once per concurrent job (argv[2] copies, own ids).
GEN = r'''
import json, sys, uuid
from pathlib import Path
from lfx.components.flow_controls.human_input import HumanInput
from lfx.components.input_output import ChatInput, ChatOutput
from lfx.graph import Graph

out, copies = Path(sys.argv[1]), int(sys.argv[2])
ask = ChatInput(_id="ChatInput-ask")
gate = HumanInput(_id="HumanInput-gate")
gate.set(prompt=ask.message_response, decisions=["Approve", "Reject"])
ok = ChatOutput(_id="ChatOutput-ok")
ok.set(input_value=gate.route_branch)  # route_branch backs every branch; this binds the first, approve
gate_flow = Graph(ask, ok).dump(name="Refund approval")
handles = {e["data"]["sourceHandle"]["name"] for e in gate_flow["data"]["edges"] if e["source"] == "HumanInput-gate"}
assert handles == {"branch_approve"}, handles
ask2, out2 = ChatInput(_id="ChatInput-ask"), ChatOutput(_id="ChatOutput-out")
out2.set(input_value=ask2.message_response)
echo_flow = Graph(ask2, out2).dump(name="Echo")
ids = {"gate": [], "echo": str(uuid.uuid5(uuid.NAMESPACE_URL, "signoff-bench/echo"))}
for i in range(copies):
    ids["gate"].append(str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff-bench/gate/{i}")))
    (out / f"gate-{i:03d}.json").write_text(json.dumps({**gate_flow, "id": ids["gate"][-1]}))
(out / "echo.json").write_text(json.dumps({**echo_flow, "id": ids["echo"]}))
print(json.dumps(ids))
'''


def ensure_venv(venv: str | Path) -> Path:
    """The venv with lfx==LFX_VERSION, made with `python3.11 -m venv` + pip when missing. Its python."""
    venv = Path(venv)
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import importlib.metadata as m; print(m.version('lfx'))"]
    if python.exists() and subprocess.run(check, capture_output=True, text=True).stdout.strip() == LFX_VERSION:
        return python
    base = shutil.which("python3.11") or (sys.executable if sys.version_info[:2] == (3, 11) else None)
    if base is None:
        raise SystemExit("bench/peer.py needs python3.11 to make the lfx venv")
    print(f"peer: installing lfx=={LFX_VERSION} into {venv}", file=sys.stderr)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"lfx=={LFX_VERSION}"], check=True)
    return python


class Peer:
    """`lfx serve` in durable mode, as a user starts it, on a free port in a temp folder."""

    def __init__(self, venv: str | Path = DEFAULT_VENV, concurrency: int = 50) -> None:
        self.python = ensure_venv(venv)
        self.home = Path(tempfile.mkdtemp(prefix="signoff-peer-"))
        flows = self.home / "flows"
        flows.mkdir()
        gen = subprocess.run([str(self.python), "-c", GEN, str(flows), str(max(concurrency, 1))],
                             capture_output=True, text=True, cwd=self.home)
        if gen.returncode:
            raise SystemExit("peer: flow generation failed: " + gen.stderr[-2000:])
        ids = json.loads(gen.stdout.strip().splitlines()[-1])
        self.gates, self.echo, self.flow_count = ids["gate"], ids["echo"], len(ids["gate"]) + 1
        self.port, self.key = free_port(), "sk-bench-" + uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env.update({"LANGFLOW_API_KEY": self.key, "LFX_SERVE_DURABLE_DB": str(self.home / "durable.db"),
                    "DO_NOT_TRACK": "true"})  # no telemetry attempts: the machine has no network
        self.log = self.home / "serve.log"
        self.proc = subprocess.Popen(
            [str(self.python.parent / "lfx"), "serve", str(flows), "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning"],
            env=env, cwd=self.home, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = None

    async def __aenter__(self) -> Peer:
        import httpx

        limits = httpx.Limits(max_connections=len(self.gates) + 10, max_keepalive_connections=len(self.gates) + 10,
                              keepalive_expiry=2.0)  # before the server closes an idle one
        self.http = httpx.AsyncClient(base_url=self.url, headers={"x-api-key": self.key}, timeout=120, limits=limits)
        await self.ready()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()
        self.stop()

    async def ready(self) -> None:
        async def healthy() -> bool:
            r = await self.http.get("/health")
            return r.status_code == 200 and r.json().get("flow_count") == self.flow_count

        await wait_healthy(self.proc, healthy, "lfx serve", self.log, timeout=180)

    def stop(self) -> None:
        stop_group(self.proc)
        shutil.rmtree(self.home, ignore_errors=True)

    async def submit(self, flow_id: str, text: str, mode: str) -> dict:
        r = await self.http.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": text, "mode": mode,
                                                            "session_id": str(uuid.uuid4())})
        r.raise_for_status()
        return r.json()

    async def status(self, job_id: str) -> dict:
        r = await self.http.get("/api/v2/workflows", params={"job_id": job_id})
        r.raise_for_status()
        return r.json()

    async def until(self, job_id: str, want: str) -> None:
        """GET status every POLL_S until `want` (a failed or cancelled run is an error)."""
        deadline = time.perf_counter() + DEADLINE_S
        while (body := await self.status(job_id))["status"] != want:
            if body["status"] in ("failed", "error", "cancelled", "timed_out") or time.perf_counter() > deadline:
                raise RuntimeError(f"peer: job {job_id} is {body['status']}, waiting for {want}: {body}")
            await asyncio.sleep(POLL_S)

    async def gate_once(self, flow_id: str | None = None) -> tuple[float, float, float]:
        """One gate run: (submit→suspended, submit→request id in hand, resume→completed), seconds."""
        t = time.perf_counter()
        job_id = (await self.submit(flow_id or self.gates[0], "refund 42", "background"))["job_id"]
        await self.until(job_id, "suspended")
        sub = time.perf_counter() - t
        r = await self.http.get(f"/api/v2/workflows/{job_id}/pending")
        r.raise_for_status()
        req = time.perf_counter() - t
        t = time.perf_counter()
        r = await self.http.post(f"/api/v2/workflows/{job_id}/resume",
                                 json={"request_id": r.json()["request_id"], "decision": {"action_id": "approve"}})
        r.raise_for_status()
        await self.until(job_id, "completed")
        return sub, req, time.perf_counter() - t

    async def echo_once(self) -> float:
        """One sync run of the no-gate flow, seconds."""
        t = time.perf_counter()
        body = await self.submit(self.echo, "hi", "sync")
        took = time.perf_counter() - t
        assert body.get("status") == "completed" and body["output"]["text"] == "hi", body
        return took

    async def concurrent_round(self, n: int) -> tuple[float, list[str]]:
        """n background submits at once (one gate flow copy each), swept until all suspended: wall seconds, jobs."""
        t = time.perf_counter()
        bodies = await asyncio.gather(*(self.submit(self.gates[i], f"refund {i}", "background") for i in range(n)))
        for body in bodies:  # one GET in flight at a time: the poll load stays that of one client
            await self.until(body["job_id"], "suspended")
        return time.perf_counter() - t, [body["job_id"] for body in bodies]

    async def concurrent_resumes(self, job_ids: list[str]) -> float:
        """Every suspended job of ``job_ids`` (a concurrent_round's, each its own run) resumed at
        once, swept until all completed (one GET in flight at a time, as concurrent_round):
        wall seconds (issue 33: decisions/s)."""
        async def pending(job_id: str) -> str:
            r = await self.http.get(f"/api/v2/workflows/{job_id}/pending")
            r.raise_for_status()
            return r.json()["request_id"]

        requests = [await pending(j) for j in job_ids]  # untimed: the decider has them in hand
        t = time.perf_counter()
        answers = await asyncio.gather(*(self.http.post(f"/api/v2/workflows/{j}/resume", json={
            "request_id": q, "decision": {"action_id": "approve"}}) for j, q in zip(job_ids, requests)))
        for r in answers:
            r.raise_for_status()
        for job_id in job_ids:
            await self.until(job_id, "completed")
        return time.perf_counter() - t

    async def stop_jobs(self, job_ids: list[str]) -> None:
        """Cancel suspended jobs, so the next round's submits have no pause to supersede."""
        for job_id in job_ids:
            (await self.http.post("/api/v2/workflows/stop", json={"job_id": job_id})).raise_for_status()

    async def sync_gate_status(self) -> dict:
        """What a mode=sync submit of the gate flow answers (lfx does not pause there)."""
        body = await self.submit(self.gates[0], "refund 42", "sync")
        return {"status": body.get("status"), "output_text": (body.get("output") or {}).get("text"),
                "human_request": body.get("human_request")}


async def measure_peer(runs: int = 50, warmup: int = 30, concurrency: int = 50, reps: int = 3,
                       venv: str | Path = DEFAULT_VENV) -> dict:
    """The peer's four rows (bench/latency.py's table), one fresh `lfx serve`, as a dict."""
    started = time.perf_counter()
    async with Peer(venv, concurrency) as peer:
        up = time.perf_counter() - started
        for _ in range(warmup):
            await peer.gate_once()
            await peer.echo_once()
        sub, req, res, sync = [], [], [], []
        for _ in range(runs):  # interleaved, as bench/latency.py
            s, q, r = await peer.gate_once()
            sub.append(s)
            req.append(q)
            res.append(r)
            sync.append(await peer.echo_once())
        walls, cpu = [], {"lfx": 0.0, "bench_client": 0.0}
        for _ in range(reps):
            before = cpu_seconds(peer.proc.pid), time.process_time()
            took, jobs = await peer.concurrent_round(concurrency)
            cpu["lfx"] += cpu_seconds(peer.proc.pid) - before[0]
            cpu["bench_client"] += time.process_time() - before[1]
            walls.append(took)
            await peer.stop_jobs(jobs)  # untimed
        sync_gate = await peer.sync_gate_status()
    return {
        "peer": f"lfx {LFX_VERSION} serve (durable)",
        "runs": runs, "warmup": warmup, "concurrency": concurrency, "reps": reps,
        "submit_to_suspended": summary(sub),
        "submit_to_request": summary(req),
        "resume_to_completed": summary(res),
        "jobs_per_s": round(concurrency / statistics.median(walls), 2),
        "sync_no_gate": summary(sync),
        # CPU per run during the concurrent rounds: what limits throughput on 2 cores, as bench/latency.py
        "cpu_ms_per_run": {k: round(v * 1000 / (concurrency * reps), 2) for k, v in cpu.items()},
        "sync_submit_of_gate_flow": sync_gate,
        "startup_s": round(up, 1),  # venv check, flow generation, `lfx serve` to healthy
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--venv", default=DEFAULT_VENV)
    args = ap.parse_args()
    try:
        import httpx  # noqa: F401
    except ImportError:  # a bare python3.11: run again in the lfx venv, which has httpx
        python = ensure_venv(args.venv)
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
    out = asyncio.run(measure_peer(args.runs, args.warmup, args.concurrency, args.reps, args.venv))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
