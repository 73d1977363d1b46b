"""A budget soak (issue 28): hostile users at their budgets while honest users run and decide
gate flows on one ``signoff dev``. Prints JSON.

The honest users (``--honest``, default 5) each loop: submit the refund flow (sync, it pauses),
approve it, and time the pair; a round every ``--pace`` seconds at most (default 2: a person
deciding, each round ~0.2 s of work quiet; ``--pace 0``: the next round at once, a client as fast
as it can, which does what the ``schema`` users do and so gets the share they get: the gates give
way first to whoever used them least lately, engine/fairgate.py). They run alone for ``--quiet``
seconds (the baseline of the same run), then beside the hostile users for ``--seconds``.

The hostile users (``--hostile``, default 20), one kind each in turn, each in a loop as fast as
signoff lets it:
- ``regex``: an If-Else whose pattern is catastrophic for a backtracking engine (``^(a+)+$``)
  against 40 characters that almost match;
- ``schema``: a gate whose ``fields`` ask for unique items, answered with as many distinct
  strings as the value caps allow (70 KB);
- ``output``: twelve Prompt nodes that each double a 0.5 MB input (the run's output budget);
- ``calls``: forty HTTP Request nodes to a local sink per run (the run's call budget);
- ``fanout``: webhooks registered until refused, then gate runs that name an honest user as
  approver (into their inbox) with the fastest reminders allowed;
- ``writes``: submits of a gate-less flow as fast as answers come (the write rate limit).

Reported: the honest users' p50/p95 quiet and under load and their ratio (target: p95 within 2x),
the answers by status per kind (target: no 5xx), the peak RSS of the signoff process and of the
Temporal dev server, the growth of signoff's database, and the store's work under load (write
transactions, read connections and some write methods' calls, from ``/metrics``).

Its phases go to stderr (``quiet: pid P, URL``, ``load``, ``done``), so a profiler or a scrape of
``/metrics`` beside it can take the load alone. On PostgreSQL: ``--set
SIGNOFF_DATABASE_URL=postgresql://...`` (a database of its own; the growth is then the database's).

Usage: python bench/budget_soak.py [--seconds 120] [--quiet 30] [--honest 5] [--pace 2] [--hostile 20] [--kinds regex,...]
       [--set SIGNOFF_X=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._proc import free_port, stop_group, summary  # noqa: E402

SIGNOFF = [sys.executable, "-m", "signoff.cli"]
MEMORY_BOUND_MB = 512  # each process's peak RSS under the soak (docs/security.md)
KINDS = ("regex", "schema", "output", "calls", "fanout", "writes")


def gate_flow(name: str, **gate: Any) -> dict[str, Any]:
    return {"name": name, "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"prompt": "Approve?", "decisions": ["Approve", "Reject"],
                                                        **gate}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "done"}},
        {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}},
    ], "edges": [{"from": "gate.branch_approve", "to": "ok.input_value"},
                 {"from": "gate.branch_reject", "to": "no.input_value"}]}


def regex_flow() -> dict[str, Any]:
    return {"name": "regex", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "if", "type": "ConditionalRouter", "params": {"operator": "regex", "match_text": "^(a+)+$"}},
        {"id": "yes", "type": "ChatOutput"}, {"id": "no", "type": "ChatOutput"},
    ], "edges": [{"from": "ask.message", "to": "if.input_text"}, {"from": "if.true_result", "to": "yes.input_value"},
                 {"from": "if.false_result", "to": "no.input_value"}]}


def output_flow(n: int = 12) -> dict[str, Any]:
    nodes = [{"id": "ask", "type": "ChatInput"}]
    edges = []
    prev = "ask.message"
    for i in range(n):
        nodes.append({"id": f"p{i}", "type": "Prompt", "params": {"template": "{x}{x}"}})
        edges.append({"from": prev, "to": f"p{i}.x"})
        prev = f"p{i}.prompt"
    nodes.append({"id": "out", "type": "ChatOutput"})
    edges.append({"from": prev, "to": "out.input_value"})
    return {"name": "output", "nodes": nodes, "edges": edges}


def calls_flow(url: str, n: int = 40) -> dict[str, Any]:
    nodes = [{"id": "ask", "type": "ChatInput"}]
    edges = []
    for i in range(n):
        nodes.append({"id": f"h{i}", "type": "HTTPRequest", "params": {"url": f"{url}/{i}", "method": "POST"}})
        edges.append({"from": "ask.message", "to": f"h{i}.body"})
    return {"name": "calls", "nodes": nodes, "edges": edges}


def plain_flow() -> dict[str, Any]:
    return {"name": "plain", "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "out", "type": "ChatOutput"}],
            "edges": [{"from": "ask.message", "to": "out.input_value"}]}


class Sink:
    """A local HTTP server that answers every request 204 and counts them."""

    def __init__(self) -> None:
        self.count = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.count += 1
                self.send_response(204)
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def db_bytes(home: Path, url: str | None = None) -> int:
    if url and url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    return sum(p.stat().st_size for p in home.glob("signoff.db*"))


class Soak:
    def __init__(self, api: str, keys: dict[str, str], sink: Sink, pace: float = 0.0) -> None:
        self.api = api
        self.pace = pace
        self.keys = keys
        self.sink = sink
        self.answers: dict[str, Counter] = defaultdict(Counter)
        self.honest: dict[str, list[float]] = {"quiet": [], "load": []}
        # each round's two halves apart: the submit (to its pause) and the decision (to its answer)
        self.halves: dict[str, list[tuple[float, float]]] = {"quiet": [], "load": []}
        self.phase = "quiet"
        self.until = 0.0
        self.flows: dict[str, dict[str, str]] = defaultdict(dict)

    def client(self, user: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.api, headers={"x-api-key": self.keys[user]}, timeout=120)

    async def call(self, kind: str, c: httpx.AsyncClient, method: str, path: str, **kw: Any) -> httpx.Response | None:
        try:
            r = await c.request(method, path, **kw)
        except httpx.HTTPError as e:
            self.answers[kind][type(e).__name__] += 1
            return None
        self.answers[kind][r.status_code] += 1
        if r.status_code == 429:
            await asyncio.sleep(min(float(r.headers.get("retry-after") or 1), 5))
        return r

    async def flow(self, kind: str, user: str, c: httpx.AsyncClient, spec: dict[str, Any]) -> str | None:
        if kind not in self.flows[user]:
            r = await self.call(kind, c, "POST", "/api/v1/flows", json=spec)
            if r is None or r.status_code != 201:
                return None
            self.flows[user][kind] = r.json()["id"]
        return self.flows[user][kind]

    async def honest_user(self, user: str) -> None:
        async with self.client(user) as c:
            flow = await self.flow("honest", user, c, gate_flow("refund"))
            assert flow, f"the honest flow was refused: {dict(self.answers['honest'])}"
            while time.monotonic() < self.until:
                t0 = time.monotonic()
                await self.honest_round(c, flow)
                if self.pace:  # a person's pace: a round starts every `pace` seconds at most
                    await asyncio.sleep(max(0.0, t0 + self.pace - time.monotonic()))

    async def honest_round(self, c: httpx.AsyncClient, flow: str) -> None:
        phase = self.phase
        t0 = time.monotonic()
        r = await self.call("honest", c, "POST", "/api/v2/workflows",
                            json={"flow_id": flow, "input_value": "refund 42", "mode": "sync"})
        if r is None or r.status_code != 200 or r.json().get("status") != "suspended":
            await asyncio.sleep(0.2)
            return
        job = r.json()["job_id"]
        t1 = time.monotonic()
        r = await self.call("honest", c, "POST", f"/api/v2/workflows/{job}/resume",
                            json={"request_id": f"gate:{job}", "decision": {"action_id": "approve"}})
        if r is not None and r.status_code == 200:
            self.honest[phase].append(time.monotonic() - t0)
            self.halves[phase].append((t1 - t0, time.monotonic() - t1))

    async def hostile_user(self, user: str, kind: str, victim: str) -> None:
        async with self.client(user) as c:
            while time.monotonic() < self.until:
                await getattr(self, f"_{kind}")(user, c, victim)

    async def _run(self, kind: str, user: str, c: httpx.AsyncClient, spec: dict[str, Any], text: str) -> dict | None:
        flow = await self.flow(kind, user, c, spec)
        if flow is None:
            await asyncio.sleep(1)
            return None
        r = await self.call(kind, c, "POST", "/api/v2/workflows", json={"flow_id": flow, "input_value": text,
                                                                       "mode": "sync"})
        return r.json() if r is not None and r.status_code == 200 else None

    async def _regex(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        await self._run("regex", user, c, regex_flow(), "a" * 40 + "!")

    async def _schema(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        fields = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True,
                                                            "items": {"type": "string"}}}}
        run = await self._run("schema", user, c, gate_flow("schema", fields=fields), "x")
        if run and run.get("status") == "suspended":
            job = run["job_id"]
            values = {"items": [f"{i:06d}" + "x" * 60 for i in range(1000)]}
            await self.call("schema", c, "POST", f"/api/v2/workflows/{job}/resume",
                            json={"request_id": f"gate:{job}", "decision": {"action_id": "approve", "values": values}})

    async def _output(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        await self._run("output", user, c, output_flow(), "y" * 500_000)

    async def _calls(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        await self._run("calls", user, c, calls_flow(f"http://127.0.0.1:{self.sink.port}/call"), "z")

    async def _fanout(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        if "hooks" not in self.flows[user]:
            for i in range(200):
                r = await self.call("fanout", c, "POST", "/api/v1/webhooks",
                                    json={"url": f"http://127.0.0.1:{self.sink.port}/hook/{i}",
                                          "secret": "a-long-shared-secret"})
                if r is None or r.status_code >= 400:
                    break
            self.flows[user]["hooks"] = "done"
        await self._run("fanout", user, c, gate_flow("fanout", approvers=[victim], remind_every=60), "spam")

    async def _writes(self, user: str, c: httpx.AsyncClient, victim: str) -> None:
        await self._run("writes", user, c, plain_flow(), "w")


WATCHED_OPS = ("log_deliveries", "renew_lease", "lease_state", "add_message", "save_spans", "set_status", "create_job")


async def store_counts(api: str) -> dict[str, float]:
    """The store's write transactions (commits), read connections and some methods' calls so far,
    from /metrics (engine/metrics.py)."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as c:
        text = (await c.get("/metrics")).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'signoff_store_transactions_total\{kind="(\w+)"\} (\S+)', line)
        if m:
            found[m[1]] = float(m[2])
        m = re.match(r'signoff_store_seconds_count\{op="(\w+)"\} (\S+)', line)
        if m and m[1] in WATCHED_OPS:
            found[m[1]] = float(m[2])
    return found


def create_user(env: dict[str, str], name: str) -> str:
    made = subprocess.run([*SIGNOFF, "users", "create", name], env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    return made.stdout.strip().splitlines()[-1]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--quiet", type=float, default=30)
    ap.add_argument("--honest", type=int, default=5)
    ap.add_argument("--pace", type=float, default=2.0,
                    help="an honest user starts a round every PACE seconds at most (0: the next at once)")
    ap.add_argument("--hostile", type=int, default=20)
    ap.add_argument("--kinds", default=",".join(KINDS), help="the hostile kinds, comma-separated")
    ap.add_argument("--set", action="append", default=[], metavar="SIGNOFF_X=VALUE",
                    help="a setting of the signoff dev under test (again for more); the defaults otherwise")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    assert set(kinds) <= set(KINDS), f"kinds are {KINDS}"

    sink = Sink()
    home = Path(tempfile.mkdtemp(prefix="budget-soak-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "OTEL_"))}
    env.update(SIGNOFF_HOME=str(home), SIGNOFF_API_PORT=str(free_port()),
               SIGNOFF_DEV_TEMPORAL_PORT=str(free_port()), SIGNOFF_DEV_UI_PORT=str(free_port()),
               SIGNOFF_EGRESS_ALLOW=f"127.0.0.1:{sink.port}")
    env.update(dict(kv.split("=", 1) for kv in args.set))
    log = home / "dev.log"
    with log.open("w") as out:
        dev = subprocess.Popen([*SIGNOFF, "dev"], env=env, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not re.search(r"^API key: ", log.read_text(), re.M):
            assert dev.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            await asyncio.sleep(0.2)
        api = f"http://127.0.0.1:{env['SIGNOFF_API_PORT']}"
        honest = [f"honest{i}" for i in range(args.honest)]
        hostile = [f"hostile{i}" for i in range(args.hostile)]
        with ThreadPoolExecutor(4) as pool:  # a CLI process each: four at a time
            keys = dict(zip(honest + hostile, pool.map(lambda name: create_user(env, name), honest + hostile)))
        soak = Soak(api, keys, sink, pace=args.pace)
        db_before = db_bytes(home, env.get("SIGNOFF_DATABASE_URL"))
        peaks: dict[str, float] = defaultdict(float)

        async def sample() -> None:
            while True:
                peaks["signoff_mb"] = max(peaks["signoff_mb"], rss_mb(dev.pid))
                for child in children(dev.pid):
                    peaks["temporal_mb"] = max(peaks["temporal_mb"], rss_mb(child))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        soak.until = time.monotonic() + args.quiet + args.seconds
        started = time.monotonic()
        tasks = [asyncio.create_task(soak.honest_user(u)) for u in honest]
        # the phases on stderr, so a profiler run beside the soak can take the load alone
        print(f"quiet: pid {dev.pid}, {api}", file=sys.stderr, flush=True)
        await asyncio.sleep(args.quiet)
        quiet_peak = dict(peaks)
        soak.phase = "load"
        counts_before = await store_counts(api)
        print("load", file=sys.stderr, flush=True)
        tasks += [asyncio.create_task(soak.hostile_user(u, kinds[i % len(kinds)], honest[i % len(honest)]))
                  for i, u in enumerate(hostile)]
        await asyncio.gather(*tasks)
        counts_after = await store_counts(api)
        print("done", file=sys.stderr, flush=True)
        sampler.cancel()
        quiet, load = summary(soak.honest["quiet"]), summary(soak.honest["load"])
        fives = {k: sum(n for s, n in v.items() if isinstance(s, int) and s >= 500) for k, v in soak.answers.items()}
        print(json.dumps({
            "seconds": round(time.monotonic() - started, 1),
            "honest_quiet": quiet, "honest_under_load": load,
            "honest_halves_under_load": {
                "submit": summary([a for a, _ in soak.halves["load"]]),
                "decision": summary([b for _, b in soak.halves["load"]]),
                "slowest_ms": sorted((round(a * 1000), round(b * 1000)) for a, b in soak.halves["load"])[-5:]},
            "ratio_p95": round(load["p95_ms"] / quiet["p95_ms"], 2), "target_ratio_p95": 2.0,
            "answers": {k: {str(s): n for s, n in v.items()} for k, v in soak.answers.items()},
            "server_errors": fives, "server_errors_total": sum(fives.values()),
            "outbound_calls_seen": sink.count,
            # the store's work under load (/metrics before and after): write transactions (commit),
            # read connections (read) and some write methods' calls
            "store_under_load": {k: int(counts_after.get(k, 0) - counts_before.get(k, 0))
                                 for k in sorted(set(counts_after) | set(counts_before))},
            "peak_rss_mb": {k: round(v, 1) for k, v in peaks.items()},
            "quiet_peak_rss_mb": {k: round(v, 1) for k, v in quiet_peak.items()},
            "db_growth_mb": round((db_bytes(home, env.get("SIGNOFF_DATABASE_URL")) - db_before) / 2**20, 1),
            # the bounds docs/security.md states for the soak: each process under 512 MB, the
            # database's growth within the users' stored-bytes budgets together
            "memory_bound_mb": MEMORY_BOUND_MB,
            "within_memory_bound": all(v < MEMORY_BOUND_MB for v in peaks.values()),
            "stored_bytes_budgets_mb": round((args.honest + args.hostile) * int(env.get(
                "SIGNOFF_USER_MAX_STORED_BYTES", 1 << 30)) / 2**20),
        }, indent=2))
    finally:
        stop_group(dev)
        sink.server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
