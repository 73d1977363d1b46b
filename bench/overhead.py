"""Orchestration overhead of signoff's FlowRun next to a bare Temporal workflow, measured in the
same run on the same dev server. Prints JSON.

- per layer: a 50-layer flow of no-op components vs a bare workflow executing 50 no-op
  activities of the same kind (regular activities, as FlowRun uses: docs/temporal.md says why
  not local ones);
- gate latency: submit→suspended and resume→completed (p50, p95 over --runs runs) vs a bare
  workflow shaped like a gate flow (two activities, wait for an Update, one activity).

Usage: python bench/overhead.py [--runs 50] [--layers 50] [--reps 3] [--no-tuning] [--no-eager]
       [--database-url postgresql://...]   (default: a SQLite file in a temp folder)

--no-tuning starts the dev server with its defaults (the per-task dispatch throttle kept,
docs/temporal.md "Dev server tuning"), for before/after figures; --no-eager starts the
workflows (signoff's and the bare ones) without asking for eager workflow start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._bare import BareGate, BareLayers, mark_waiting, noop, waiting as _waiting  # noqa: E402
from bench._proc import summary  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from signoff.engine.models import Decision, JobStatus  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.service import RunService, TemporalBackend, with_converter  # noqa: E402
from signoff.worker import build_worker  # noqa: E402

# ---- flows -------------------------------------------------------------------------------


def chain_flow(layers: int) -> dict:
    nodes = [{"id": "n0", "type": "TextInput", "params": {"value": "x"}}]
    edges = []
    for i in range(1, layers):
        nodes.append({"id": f"n{i}", "type": "TextOutput"})
        edges.append({"from": f"n{i - 1}.text", "to": f"n{i}.input_value"})
    return {"name": f"chain{layers}", "nodes": nodes, "edges": edges}


GATE_FLOW = {
    "name": "gate",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "ok"}},
    ],
    "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"}],
}


async def poll(fn, timeout: float = 60.0):
    deadline = time.perf_counter() + timeout
    while True:
        v = fn()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.perf_counter() > deadline:
            raise TimeoutError("bench: condition not reached")
        await asyncio.sleep(0.002)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--no-tuning", action="store_true", help="dev server defaults (throttle kept)")
    ap.add_argument("--no-eager", action="store_true", help="no eager workflow start (signoff and bare)")
    args = ap.parse_args()
    eager = not args.no_eager
    TemporalBackend.eager_start = eager

    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log",
                       tuned=not args.no_tuning)
    server.start()
    try:
        client = with_converter(await server.wait_healthy())
        queue = f"bench-{uuid.uuid4()}"
        settings = Settings(home=tmp, database_url=args.database_url or f"sqlite:///{tmp / 'bench.db'}",
                            temporal_address=server.address, task_queue=queue)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        user = await store.create_user("bench")
        chain = await store.save_flow(user.id, "chain", chain_flow(args.layers))
        gate = await store.save_flow(user.id, "gate", GATE_FLOW)
        out: dict = {"database": settings.resolved_database_url.split(":", 1)[0], "layers": args.layers,
                     "runs": args.runs, "reps": args.reps, "tuned": server.tuned, "eager_start": eager,
                     "per_layer_ms": {}, "gate": {}}

        bare_worker = Worker(client, task_queue=queue + "-bare", workflows=[BareLayers, BareGate],
                             activities=[noop, mark_waiting])
        async with bare_worker, build_worker(client, store, settings):
            service = RunService(settings, store, client)
            kind, local = "regular", False
            bare, ours = [], []
            for _ in range(args.reps):
                t = time.perf_counter()
                await client.execute_workflow("BareLayers", args=[args.layers, local], id=str(uuid.uuid4()),
                                              task_queue=queue + "-bare", request_eager_start=eager)
                bare.append((time.perf_counter() - t) / args.layers)
                t = time.perf_counter()
                job, _ = await service.submit(user, chain, input_value="x", session_id=str(uuid.uuid4()),
                                              tweaks=None, idempotency_key=None, mode="background")
                await client.get_workflow_handle(job.job_id).result()
                ours.append((time.perf_counter() - t) / args.layers)
            b, o = statistics.median(bare), statistics.median(ours)
            out["per_layer_ms"][kind] = {"bare": round(b * 1000, 2), "signoff": round(o * 1000, 2),
                                         "ratio": round(o / b, 3), "target": 1.25}

            b_sub, b_res, o_sub, o_res = [], [], [], []
            for _ in range(args.runs):
                wf_id = str(uuid.uuid4())
                t = time.perf_counter()
                h = await client.start_workflow("BareGate", local, id=wf_id, task_queue=queue + "-bare",
                                                request_eager_start=eager)
                await poll(lambda: wf_id in _waiting)
                b_sub.append(_waiting.pop(wf_id) - t)
                t = time.perf_counter()
                await h.execute_update("resume", "approve")
                await h.result()
                b_res.append(time.perf_counter() - t)

                t = time.perf_counter()
                job, _ = await service.submit(user, gate, input_value="x", session_id=str(uuid.uuid4()),
                                              tweaks=None, idempotency_key=None, mode="background")
                job = await poll(lambda: _suspended(store, job.job_id))
                o_sub.append(time.perf_counter() - t)
                t = time.perf_counter()
                await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
                await poll(lambda: _completed(store, job.job_id))
                o_res.append(time.perf_counter() - t)
            bs, br, os_, or_ = summary(b_sub), summary(b_res), summary(o_sub), summary(o_res)
            out["gate"][kind] = {
                "bare": {"submit_to_waiting": bs, "resume_to_completed": br},
                "signoff": {"submit_to_suspended": os_, "resume_to_completed": or_},
                "ratio_p50": {"submit": round(os_["p50_ms"] / bs["p50_ms"], 3),
                              "resume": round(or_["p50_ms"] / br["p50_ms"], 3)},
                "target": 1.5,
            }
        await store.close()
        print(json.dumps(out, indent=2))
    finally:
        server.stop()


async def _suspended(store, job_id):
    job = await store.get_job(job_id)
    return job if job.status == JobStatus.suspended else None


async def _completed(store, job_id):
    job = await store.get_job(job_id)
    return job if job.status == JobStatus.completed else None


if __name__ == "__main__":
    asyncio.run(main())
