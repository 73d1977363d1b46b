"""Where a sync inline run spends its store time: every store call of N runs counted and timed,
for the in-process engine and for ``RunService.submit(mode="sync")``, on the same SQLite
store (docs/inline.md, "Where the difference goes"). Prints JSON.

    .venv/bin/python bench/sync_calls.py [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.engine.runner import InProcessRunner  # noqa: E402
from signoff.engine.settings import Settings  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from signoff.engine.tracing import RunTracing  # noqa: E402
from signoff.engine.tracing import sdk as telemetry  # noqa: E402
from signoff.devserver import DevServer, free_port  # noqa: E402
from signoff.service import RunService, with_converter  # noqa: E402

FLOW = {
    "name": "bench sync",
    "nodes": [{"id": "in", "type": "ChatInput"},
              {"id": "p", "type": "Prompt", "params": {"template": "Echo: {text}"}},
              {"id": "out", "type": "ChatOutput"}],
    "edges": [{"from": "in.message", "to": "p.text"}, {"from": "p.prompt", "to": "out.input_value"}],
}


def count_calls(store) -> tuple[collections.Counter, dict[str, float]]:
    """Wrap every public coroutine method of the store instance with a counter and a timer."""
    calls: collections.Counter = collections.Counter()
    times: dict[str, float] = collections.defaultdict(float)
    for name in dir(type(store)):
        fn = getattr(store, name, None)
        if name.startswith("_") or not asyncio.iscoroutinefunction(fn):
            continue

        def wrap(fn=fn, name=name):
            async def timed(*args, **kwargs):
                calls[name] += 1
                t = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    times[name] += time.perf_counter() - t
            return timed

        setattr(store, name, wrap())
    return calls, times


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    n = ap.parse_args().runs
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-calls-"))
    server = DevServer(port=free_port(), ui_port=None, db_file=None, log_file=tmp / "temporal.log")
    server.start()
    try:
        client = with_converter(await server.wait_healthy())
        settings = Settings(home=tmp, database_url=f"sqlite:///{tmp / 'bench.db'}", temporal_address=server.address)
        telemetry.install(settings)
        store = open_store(settings.resolved_database_url)
        await store.setup()
        calls, times = count_calls(store)
        user = await store.get_or_create_user("bench")
        flow = await store.save_flow(user.id, FLOW["name"], FLOW)
        service = RunService(settings, store, client)

        async def loader(flow_id: str):
            f = await store.get_flow(flow_id)
            return f.spec if f else None

        async def service_run() -> None:
            await service.submit(user, flow, input_value="hi", session_id=str(uuid.uuid4()), tweaks=None,
                                 idempotency_key=None, mode="sync")

        async def engine_run() -> None:
            runner = InProcessRunner(store, store, loader, settings=settings, tracing=RunTracing(store, name=flow.name))
            async with telemetry.collect_spans(store):
                await runner.start(FLOW, run_id=str(uuid.uuid4()), input_value="hi", flow_id=flow.id,
                                   user_id=user.id, session_id=str(uuid.uuid4()))

        out = {"runs": n, "database": "sqlite"}
        for label, run in (("engine", engine_run), ("service_sync", service_run)):
            for _ in range(5):
                await run()
            calls.clear()
            times.clear()
            t = time.perf_counter()
            for _ in range(n):
                await run()
            total = time.perf_counter() - t
            out[label] = {
                "per_run_ms": round(total / n * 1000, 3),
                "store_calls": {k: {"calls": round(v / n, 2), "ms": round(times[k] / n * 1000, 3)}
                                for k, v in calls.most_common()},
            }
        await store.close()
        print(json.dumps(out, indent=2))
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
