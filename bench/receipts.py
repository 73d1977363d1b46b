"""The cost of a decision's receipt (DESIGN §16, docs/audit.md); prints JSON.

    .venv/bin/python bench/receipts.py [--n 300] [--pg postgresql://postgres@127.0.0.1:5432/test]

Two measures, each alternating decisions with and without a receipt on the same store in the
same run, each decision on a run of its own made before the clock starts:

- ``attempt``: a decision as the worker makes it (engine/attempt.py: ``attempt_decision``: the
  claim, the paused state, the decision applied, the records written), with its receipt (the
  signing key read from the secret store once and kept, the receipt chained after the run's
  last, signed with Ed25519 and written in the record's transaction) or without (no keys);
- ``write``: the record's store write alone (``Store.record_decision``, the run claimed before
  the clock), with or without its receipt: the strictest view.

Also the signature alone. Backends: SQLite (a temp file, synchronous=FULL) and,
with ``--pg``, PostgreSQL (a fresh database, dropped afterwards). Medians in ms and the ratio
with/without (target: at most 1.1). Runtime: about 10-30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from cryptography.fernet import Fernet  # noqa: E402

from signoff.engine.attempt import DecisionAttempt, attempt_decision  # noqa: E402
from signoff.engine.audit.keys import ReceiptKeys  # noqa: E402
from signoff.engine.audit.receipts import ReceiptDraft, sign  # noqa: E402
from signoff.engine.graph import Graph  # noqa: E402
from signoff.engine.models import Decision  # noqa: E402
from signoff.engine.runner import InProcessRunner  # noqa: E402
from signoff.engine.secrets import SecretBox  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.models import AppliedDecision, JobStatus, NewJob, Option, PendingRequest, utcnow  # noqa: E402
from signoff.engine.store import Store, open_store  # noqa: E402

KEY = Ed25519PrivateKey.generate()


def _pending(request_id: str) -> PendingRequest:
    """A tool approval as an Agent asks it (its arguments shown)."""
    return PendingRequest(request_id=request_id, kind="tool_approval", paused_at=utcnow(),
                          prompt='The agent wants to call refund with {"amount": "40 EUR", "to": "ACME"}',
                          options=[Option(action_id=a, label=a.title()) for a in ("approve", "edit", "reject")],
                          allowed_decisions=["approve", "edit", "reject"],
                          tool={"name": "refund", "args": {"amount": "40 EUR", "to": "ACME"}, "call_id": "c1"})


async def _claimed(store: Store) -> tuple[str, PendingRequest]:
    job_id = str(uuid.uuid4())
    await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench",
                                  status=JobStatus.in_progress))
    pending = _pending(f"agent:{job_id}:1")
    assert await store.mark_suspended(job_id, pending)
    assert await store.claim_suspended_for_resume(job_id, pending.request_id, token="t") == "t"
    return job_id, pending


async def _decide(store: Store, job_id: str, pending: PendingRequest, receipt: bool) -> float:
    """One decision's write (what engine/attempt.py: _record does), timed."""
    start = time.perf_counter()
    applied = AppliedDecision(request_id=pending.request_id, requested_action="edit", action_id="edit",
                              values={"args": {"amount": "30 EUR", "to": "ACME"}, "reason": "capped"},
                              decided_by="bench", decided_at=utcnow())
    data = {"request_id": applied.request_id, "action_id": applied.action_id, "values": applied.values,
            "decided_by": "bench", "decided_at": applied.decided_at.isoformat(), "via": "api"}
    maker = None
    if receipt:
        draft = ReceiptDraft.of_decision(job_id=job_id, flow_id="bench", flow_version=1, pending=pending,
                                         key="t:decision", applied=applied, decided_by={"id": "bench", "name": "b"},
                                         authority="owner", via="api")
        maker = partial(draft.signed, key_id="bench", private=KEY)
    seqs = await store.record_decision(job_id, [("human_input_decision", data, "t:decision")], token="t",
                                       request_id=pending.request_id, action_id="edit", participants=["bench"],
                                       receipt=maker)
    assert seqs is not None
    return (time.perf_counter() - start) * 1000


FLOW = {"name": "bench", "nodes": [
    {"id": "ask", "type": "ChatInput"},
    {"id": "gate", "type": "HumanInput", "params": {"prompt": "Approve this refund?", "decisions": ["Approve", "Reject"]}},
    {"id": "ok", "type": "TextOutput", "params": {"text": "sent"}},
    {"id": "no", "type": "TextOutput", "params": {"text": "refused"}},
], "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"},
             {"from": "gate.branch_reject", "to": "no.input_value"}]}


async def _paused(store: Store) -> tuple[str, str, object]:
    """A job paused at its gate as the worker leaves one (its checkpoint, its pending request)."""
    job_id = str(uuid.uuid4())
    await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench",
                                  status=JobStatus.in_progress))
    outcome = await InProcessRunner(store, store).start(FLOW, run_id=job_id, job_id=job_id)
    assert outcome.status == "paused" and outcome.pending is not None
    assert await store.mark_suspended(job_id, outcome.pending)
    return job_id, outcome.pending.request_id, outcome.state


async def _attempt(store: Store, keys: ReceiptKeys | None, job_id: str, request_id: str, state) -> float:
    async def paused_state(job):
        return state, Graph.from_spec(state.flow)

    start = time.perf_counter()
    done = await attempt_decision(store, DecisionAttempt(
        job_id, request_id, "t", Decision(action_id="approve", values={"reason": "fine"}), utcnow(), "bench",
        sent={"via": "api"}, participants=["bench"], values_checked=True, decider_name="bench"), paused_state, keys)
    assert done.outcome == "applied"
    return (time.perf_counter() - start) * 1000


def _summary(without: list[float], with_: list[float]) -> dict:
    a, b = statistics.median(without), statistics.median(with_)
    return {"n": len(without), "without_ms": round(a, 3), "with_ms": round(b, 3), "ratio": round(b / a, 3),
            "p90_without_ms": round(statistics.quantiles(without, n=10)[-1], 3),
            "p90_with_ms": round(statistics.quantiles(with_, n=10)[-1], 3)}


async def _backend(url: str, n: int) -> dict:
    store = open_store(url)
    await store.setup()
    keys = ReceiptKeys(store, Settings(audit_key_cache_seconds=3600), box=SecretBox(Fernet.generate_key()))
    try:
        out = {}
        paused = [await _paused(store) for _ in range(2 * n + 20)]
        for i, (job_id, request_id, state) in enumerate(paused[:20]):  # warm-up, both kinds
            await _attempt(store, keys if i % 2 else None, job_id, request_id, state)
        without, with_ = [], []
        for i, (job_id, request_id, state) in enumerate(paused[20:]):
            (with_ if i % 2 else without).append(await _attempt(store, keys if i % 2 else None, job_id, request_id,
                                                                state))
        out["attempt"] = _summary(without, with_)
        runs = [await _claimed(store) for _ in range(2 * n + 20)]
        for job_id, pending in runs[:20]:
            await _decide(store, job_id, pending, receipt=len(job_id) % 2 == 0)
        without, with_ = [], []
        for i, (job_id, pending) in enumerate(runs[20:]):
            (with_ if i % 2 else without).append(await _decide(store, job_id, pending, receipt=bool(i % 2)))
        out["write"] = _summary(without, with_)
        return out
    finally:
        await store.close()


def _signature_us(n: int = 2000) -> float:
    body = ReceiptDraft.of(job_id="j", flow_id="f", flow_version=1, pending=_pending("r"), key="k",
                           action_id="approve", values=None, decided_by={"id": "u", "name": "u"},
                           authority="owner", via="api", at=utcnow().isoformat()).body
    times = []
    for _ in range(n):
        start = time.perf_counter()
        sign(KEY, body)
        times.append((time.perf_counter() - start) * 1e6)
    return round(statistics.median(times), 1)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300, help="decisions of each kind per backend")
    parser.add_argument("--pg", help="a PostgreSQL admin URL: a fresh database is made there and dropped")
    args = parser.parse_args()
    out: dict = {"python": platform.python_version(), "signature_median_us": _signature_us(), "target_ratio": 1.1}
    with tempfile.TemporaryDirectory() as tmp:
        out["sqlite"] = await _backend(f"sqlite:///{tmp}/bench.db", args.n)
    if args.pg:
        import psycopg

        name = f"bench_receipts_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            out["postgresql"] = await _backend(args.pg.rsplit("/", 1)[0] + f"/{name}", args.n)
        finally:
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
