"""The cost of the event log's hash chain on appends (docs/audit.md); prints JSON.

    .venv/bin/python bench/event_chain.py [--rounds 60] [--pg postgresql://postgres@127.0.0.1:5432/test]

Event appends per second with the chain (as shipped: the data's canonical JSON made before the
transaction, the previous event's hash read under the counter row's lock, the new hash made and
written) and without it (the append as it was before migration 14: no read, no hash, NULL
columns), in the same run, on the same database: small batches of 40 appends, with and without
in turn (the order swapped every pair), ``--rounds`` pairs, so that a machine shared with other
work weighs on both alike. Per backend and writer count: the median batch rate of each, the
ratio without/with (1.10 = the chain costs 10% of the append rate), and the quartiles (how
noisy the machine was). One writer, and 8 coroutines sharing the store, each appending to its
own run; an event's data is a decision-sized document (~430 bytes of JSON). SQLite on a temp
file (synchronous=FULL, the default); PostgreSQL in a fresh database dropped afterwards; the
in-memory store too (no I/O: there the hash is most of an append). Also the CPU of the chain's
two parts per append (``chain_cpu_us``) beside the JSON encoding every append did before it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.engine.audit.events import canonical_json, chained_sha256  # noqa: E402
from signoff.engine.models import JobStatus, NewJob, utcnow  # noqa: E402
from signoff.engine.store.encoding import dumps  # noqa: E402
from signoff.engine.store import Store, open_store  # noqa: E402
from signoff.engine.store.memory import events as memory_events  # noqa: E402
from signoff.engine.store.sql.events import EventBody, SQLEvents  # noqa: E402
from signoff.engine.store.sql.queries import Q  # noqa: E402

WRITERS = 8
DATA = {"action_id": "approve", "request_id": "gate:0123456789abcdef", "decided_by": "user-0123456789",
        "values": {"reason": "within the refund policy, customer since 2019", "amount": 42.5},
        "via": "api", "update_id": str(uuid.uuid4()), "decided_at": "2026-12-03T12:00:00.000000+00:00",
        "note": "x" * 120}

_CHAINED_INSERT = SQLEvents._insert


async def _unchained_insert(self: Any, tx: Any, job_id: str, seq: int, event: str, body: Any,
                            dedupe_key: str | None) -> None:
    """The append before the chain: no read of the previous event, no hash."""
    await tx.execute(Q.insert_event, (job_id, seq, event, body.body, self._enc_dt(utcnow()), dedupe_key, None, None))
    await self._tell(tx, job_id, seq, event)
    await self._charge_job(tx, job_id, self._json_octets(body.body))


_CHAINED_ENC = SQLEvents._enc_event


def _unchained_enc(self: Any, data: Any) -> Any:
    """The encoding before the chain: no canonical JSON of the data."""
    return EventBody(self._enc_json(data), "")


@contextlib.contextmanager
def chain(on: bool):
    SQLEvents._insert = _CHAINED_INSERT if on else _unchained_insert  # type: ignore[method-assign]
    SQLEvents._enc_event = _CHAINED_ENC if on else _unchained_enc  # type: ignore[method-assign]
    hashed = memory_events.event_sha256
    if not on:
        memory_events.event_sha256 = lambda *a: None  # type: ignore[assignment]
    try:
        yield
    finally:
        SQLEvents._insert = _CHAINED_INSERT  # type: ignore[method-assign]
        SQLEvents._enc_event = _CHAINED_ENC  # type: ignore[method-assign]
        memory_events.event_sha256 = hashed


async def _jobs(store: Store, n: int) -> list[str]:
    jobs = []
    for _ in range(n):
        job_id = str(uuid.uuid4())
        await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench",
                                      status=JobStatus.in_progress))
        jobs.append(job_id)
    return jobs


async def _batch(store: Store, jobs: list[str], per_writer: int) -> float:
    """Appends per second of one batch: each writer appends ``per_writer`` events to its run."""
    async def loop(job_id: str) -> None:
        for _ in range(per_writer):
            await store.append_event(job_id, "human_input_decision", DATA)

    start = time.perf_counter()
    await asyncio.gather(*(loop(j) for j in jobs))
    return len(jobs) * per_writer / (time.perf_counter() - start)


async def _measure(url: str, rounds: int) -> dict:
    """Small batches, with and without the chain in turn, ``rounds`` pairs of batches per writer
    count: the median batch rate of each (a machine whose load changes from second to second
    weighs on neighbouring batches alike), and their ratio."""
    store = open_store(url)
    await store.setup()
    out: dict[str, Any] = {}
    try:
        for writers in (1, WRITERS):
            jobs = await _jobs(store, writers)
            per_writer = max(1, 40 // writers)
            await _batch(store, jobs, per_writer)  # warm up
            runs: dict[str, list[float]] = {"with": [], "without": []}
            for i in range(rounds):
                order = (("with", True), ("without", False)) if i % 2 == 0 else (("without", False), ("with", True))
                for label, on in order:
                    with chain(on):
                        runs[label].append(await _batch(store, jobs, per_writer))
            with_, without = statistics.median(runs["with"]), statistics.median(runs["without"])
            q = statistics.quantiles
            out[f"{writers}_writer{'s' if writers > 1 else ''}"] = {
                "appends_per_s_with_chain": round(with_), "appends_per_s_without_chain": round(without),
                "ratio_without_over_with": round(without / with_, 3),
                "quartiles_with": [round(x) for x in q(runs["with"], n=4)],
                "quartiles_without": [round(x) for x in q(runs["without"], n=4)],
                "batches": rounds, "appends_per_batch": per_writer * writers}
    finally:
        await store.close()
    return out


def _chain_cpu_us(n: int = 5000) -> dict[str, float]:
    """Microseconds of chain work per append (the median of 5 batches of ``n``): the data's
    canonical JSON (before the transaction) and the chained hash (inside it, under the lock),
    beside the encoding every append did before the chain."""
    body, at, prev = dumps(DATA), utcnow(), "0" * 64
    canonical = canonical_json(json.loads(body))

    def timed(fn: Any) -> float:
        batches = []
        for _ in range(5):
            start = time.perf_counter()
            for seq in range(n):
                fn(seq)
            batches.append((time.perf_counter() - start) / n * 1e6)
        return round(statistics.median(batches), 2)

    return {"encode_before_the_chain": timed(lambda seq: dumps(DATA)),
            "canonical_data_outside_the_lock": timed(lambda seq: canonical_json(json.loads(body))),
            "chained_hash_under_the_lock": timed(lambda seq: chained_sha256("job", seq, "human_input_decision",
                                                                             canonical, at, prev))}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="pairs of batches (with, without) per writer count")
    parser.add_argument("--pg", default=os.environ.get("SIGNOFF_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    result: dict[str, Any] = {"python": platform.python_version(), "rounds": args.rounds,
                              "data_bytes": len(json.dumps(DATA))}
    result["chain_cpu_us"] = _chain_cpu_us()
    result["memory"] = await _measure("memory://", args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite"] = await _measure(f"sqlite:///{tmp}/bench.db", args.rounds)
    try:
        import psycopg

        name = f"bench_chain_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        try:
            base = args.pg.rsplit("/", 1)[0]
            result["postgres"] = await _measure(f"{base}/{name}", args.rounds)
        finally:
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    except Exception as err:  # noqa: BLE001 - no PostgreSQL here: the others still count
        result["postgres"] = {"skipped": f"{type(err).__name__}: {err}"[:300]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
