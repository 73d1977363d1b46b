"""The cost of the event log's hash chain on appends (docs/audit.md); prints JSON.

    .venv/bin/python bench/event_chain.py [--seconds 1.0] [--rounds 5] [--pg postgresql://postgres@127.0.0.1:5432/test]

Event appends per second with the chain (as shipped: the previous event's hash read under the
counter row's lock, the new event's hash computed and written) and without it (the append as it
was before migration 14: no read, no hash, NULL columns), in the same run, on the same database,
rounds alternating (with, without, with, ...) so that a machine shared with other work weighs on
both alike. Per backend: the median of each over the rounds and the ratio without/with (1.10 =
the chain costs 10% of the append rate). One writer, and 8 coroutines sharing the store, each
appending to its own run; an event's data is a decision-sized document (~400 bytes of JSON).
SQLite on a temp file (synchronous=FULL, the default); PostgreSQL in a fresh database dropped
afterwards; the in-memory store too (no I/O: there the hash is most of an append). Also the
CPU the chain adds to one append (``chain_cpu_us``: reading the stored JSON back and hashing),
the part that does not depend on the disk; the data's part is done before the transaction, only
the chained hash (and the read of the previous one) holds the lock.
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


async def _rate(store: Store, writers: int, seconds: float) -> float:
    jobs = []
    for _ in range(writers):
        job_id = str(uuid.uuid4())
        await store.create_job(NewJob(job_id=job_id, flow_id="bench", flow_version=1, user_id="bench",
                                      status=JobStatus.in_progress))
        jobs.append(job_id)
    counts = [0] * writers
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        while time.perf_counter() < deadline:
            await store.append_event(jobs[i], "human_input_decision", DATA)
            counts[i] += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(writers)))
    return sum(counts) / (time.perf_counter() - start)


async def _measure(url: str, seconds: float, rounds: int) -> dict:
    store = open_store(url)
    await store.setup()
    out: dict[str, Any] = {}
    try:
        await _rate(store, 1, min(seconds, 0.3))  # warm up
        for writers in (1, WRITERS):
            runs: dict[str, list[float]] = {"with": [], "without": []}
            for _ in range(rounds):
                for label, on in (("with", True), ("without", False)):
                    with chain(on):
                        runs[label].append(await _rate(store, writers, seconds))
            with_, without = statistics.median(runs["with"]), statistics.median(runs["without"])
            out[f"{writers}_writer{'s' if writers > 1 else ''}"] = {
                "appends_per_s_with_chain": round(with_), "appends_per_s_without_chain": round(without),
                "ratio_without_over_with": round(without / with_, 3),
                "rounds_with": [round(r) for r in runs["with"]], "rounds_without": [round(r) for r in runs["without"]]}
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
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg", default=os.environ.get("SIGNOFF_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    result: dict[str, Any] = {"python": platform.python_version(), "seconds": args.seconds, "rounds": args.rounds,
                              "data_bytes": len(json.dumps(DATA))}
    result["chain_cpu_us"] = _chain_cpu_us()
    result["memory"] = await _measure("memory://", args.seconds, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite"] = await _measure(f"sqlite:///{tmp}/bench.db", args.seconds, args.rounds)
    try:
        import psycopg

        name = f"bench_chain_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        try:
            base = args.pg.rsplit("/", 1)[0]
            result["postgres"] = await _measure(f"{base}/{name}", args.seconds, args.rounds)
        finally:
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    except Exception as err:  # noqa: BLE001 - no PostgreSQL here: the others still count
        result["postgres"] = {"skipped": f"{type(err).__name__}: {err}"[:300]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
