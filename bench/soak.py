"""A soak with chaos (issue 17): signoff as a cluster runs it, a mixed load, processes killed all
along, and an auditor that reads the store and Temporal at the end. Prints JSON.

The cluster: a PostgreSQL server of its own (initdb in a temp folder), one Temporal dev server
(its database in a file), two ``signoff api`` and two ``signoff worker`` processes.

The load, from several clients at once, each through either API at random:
- gate runs: submit (background, with an idempotency key), wait for the pause, decide it through
  an API or through the real ``temporal`` CLI (``workflow update execute``), wait for the end;
- stops: submit, wait for the pause, stop;
- supersedes: two runs in one session, the second cancels the first;
- sync runs of a flow with no gate (they run in the API process);
- agent tool approvals: an Agent whose model (a fake OpenAI server answering by the request, so
  any number of runs interleave) asks for a Calculator call that a person approves.

The chaos, meanwhile: every ``--kill-every`` seconds a random API or worker is SIGKILLed and
started again a second later; PostgreSQL is restarted once (a third of the way) and the Temporal
dev server once (two thirds of the way, same database file).

Clients retry only what signoff tells them to retry (503, after Retry-After); a connection that
broke (the API it talked to was killed) is not an answer: the same request goes to the other
API (a submit with its idempotency key; a decision, which then may meet 409 because the first
one went through: the audit settles it from the store).

The auditor, once the load is over and the runs are settled: every job has exactly one terminal
status, or is suspended awaiting a decision that was never sent; every decision answered 200 was
applied once (one ``human_input_decision`` per request); no event follows a terminal one; ``seq``
is gap-free; every ended run has one closed trace and no checkpoint left; every ended run's
workflow is closed. ``lost`` and ``duplicated`` must be 0.

Usage: python bench/soak.py [--seconds 300] [--clients 6] [--kill-every 5]
       (tests/integration/faults/test_soak.py runs a short one in the suite)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from signoff.devserver import DevServer, free_port, temporal_binary  # noqa: E402
from signoff.engine.store import open_store  # noqa: E402
from tests.fixtures.fake_openai import FakeOpenAI, call, say  # noqa: E402
from tests.fixtures.own_postgres import OwnPostgres  # noqa: E402
from tests.helpers import Proc, eventually  # noqa: E402

GATE = json.loads((ROOT / "examples/flows/refund.json").read_text())
ECHO = {"name": "echo", "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "out.input_value"}]}
TERMINAL_EVENTS = {"end", "run_cancelled", "run_failed", "run_timed_out"}


T0 = time.monotonic()


def say_progress(what: str) -> None:
    print(f"[soak {time.monotonic() - T0:7.1f}s] {what}", file=sys.stderr, flush=True)


def agent_flow(model_url: str) -> dict[str, Any]:
    return {"name": "agent", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "agent", "type": "Agent", "params": {"model": "fake", "base_url": model_url,
                                                    "system_prompt": "You add numbers.", "retry_backoff": 0.01}},
        {"id": "calc", "type": "Calculator", "params": {"tool_name": "calc", "tool_description": "Add numbers",
                                                        "approval_actions": ["approve", "reject"]}},
        {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "agent.input_value"}, {"from": "calc.tool", "to": "agent.tools"},
                  {"from": "agent.response", "to": "out.input_value"}]}


def model_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model: ask for the tool until its result is in the conversation, then answer."""
    results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
    if results:
        return say(f"The sum is {results[-1].get('content')}.")
    return call("calc", {"expression": "2 + 2"})


@dataclass
class Expect:
    job_id: str
    kind: str  # gate | stop | superseded | sync | agent
    end: str  # the status the run must end with (suspended: nothing was sent)
    decisions: list[tuple[str, int | str]] = field(default_factory=list)  # (request id, HTTP status or "cli")


@dataclass
class Tally:
    statuses: Counter = field(default_factory=Counter)
    broken: int = 0  # connections that broke (their API was killed): sent again elsewhere
    died_with_api: int = 0  # sync runs that ran in an API process that was killed (they end failed)
    problems: list[str] = field(default_factory=list)  # what a client met that it should not have
    expects: list[Expect] = field(default_factory=list)
    runs: int = 0


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.chmod(0o755)  # the PostgreSQL server runs as its own user, below this folder
        self.pg = OwnPostgres(root / "pg")
        self.temporal = DevServer(port=free_port(), ui_port=None, db_file=root / "temporal.db",
                                  log_file=root / "temporal.log")
        self.model = FakeOpenAI(responder=model_answer)
        self.api_ports = [free_port(), free_port()]
        self.procs: dict[str, Proc] = {}
        self.env: dict[str, str] = {}
        self.kills = 0
        self.restarts: Counter = Counter()

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.api_ports]

    async def start(self) -> str:
        self.pg.init()
        self.pg.start()
        self.pg.wait_ready()
        self.temporal.start()
        await self.temporal.wait_healthy()
        self.model.start()
        model = self.model.url.removeprefix("http://")
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
                    "SIGNOFF_DATABASE_URL": self.pg.url, "SIGNOFF_TEMPORAL_ADDRESS": self.temporal.address,
                    "SIGNOFF_TASK_QUEUE": f"soak-{uuid.uuid4()}", "SIGNOFF_HOME": str(self.root / "home"),
                    "SIGNOFF_EGRESS_ALLOW": model, "SIGNOFF_SECRET_KEY": "c29hay1zb2FrLXNvYWstc29hay1zb2FrLXNvYWstMTI="}
        store = open_store(self.pg.url)
        await store.setup()
        user = await store.create_user("soak")
        key = await store.create_api_key(user.id)
        await store.close()
        for name in ("api0", "api1", "worker0", "worker1"):
            self.spawn(name)
        for url in self.urls:
            await until(lambda u=url: ready(u), 90, "the APIs to be ready")
        return key

    def spawn(self, name: str) -> None:
        if name.startswith("api"):
            env = {**self.env, "SIGNOFF_API_PORT": str(self.api_ports[int(name[-1])])}
            args = ["api", "--log-level", "warning"]
        else:
            env, args = self.env, ["worker"]
        self.procs[name] = Proc(args, env, self.root / f"{name}.log")

    async def kill_one(self, rng: random.Random) -> None:
        name = rng.choice(sorted(self.procs))
        say_progress(f"SIGKILL {name}")
        self.procs[name].kill()
        self.procs[name].log.close()
        self.kills += 1
        await asyncio.sleep(1.0)
        self.spawn(name)

    async def restart_postgres(self) -> None:
        say_progress("restart PostgreSQL")
        await asyncio.to_thread(self.pg.stop, "fast")
        await asyncio.sleep(3)
        await asyncio.to_thread(self.pg.start)
        self.restarts["postgresql"] += 1

    async def restart_temporal(self) -> None:
        say_progress("restart the Temporal dev server")
        await asyncio.to_thread(self.temporal.stop)
        await asyncio.sleep(2)
        self.temporal.start()
        await self.temporal.wait_healthy()
        self.restarts["temporal"] += 1

    def close(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.close()
        if self.model.thread.is_alive():
            with contextlib.suppress(Exception):
                self.model.close()
        with contextlib.suppress(Exception):
            self.temporal.stop()
        with contextlib.suppress(Exception):
            self.pg.stop("immediate")


async def ready(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=5) as c:
            return (await c.get(f"{url}/health/ready")).status_code == 200
    except httpx.HTTPError:
        return False


async def until(fn: Any, timeout: float, what: str) -> Any:
    return await eventually(fn, timeout=timeout, what=f"soak: {what}")


class Client:
    """One user's client of the cluster: either API; retries 503s; a broken connection is sent
    again to the other API."""

    def __init__(self, cluster: Cluster, key: str, tally: Tally, rng: random.Random) -> None:
        self.cluster, self.tally, self.rng = cluster, tally, rng
        self.http = [httpx.AsyncClient(base_url=u, headers={"x-api-key": key}, timeout=httpx.Timeout(90))
                     for u in cluster.urls]

    async def close(self) -> None:
        for c in self.http:
            await c.aclose()

    async def request(self, method: str, path: str, *, retry_409: bool = False, **kw: Any) -> httpx.Response:
        which = self.rng.randrange(2)
        for _ in range(400):
            try:
                r = await self.http[which].request(method, path, **kw)
            except (httpx.TransportError, httpx.RemoteProtocolError):
                self.tally.broken += 1
                which = 1 - which
                await asyncio.sleep(0.3)
                continue
            self.tally.statuses[r.status_code] += 1
            if r.status_code == 503:
                await asyncio.sleep(min(float(r.headers.get("retry-after", "1")), 1.0))
                continue
            return r
        raise RuntimeError(f"soak: {method} {path} never answered")

    async def status(self, job_id: str) -> dict[str, Any]:
        r = await self.request("GET", f"/api/v2/workflows/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait(self, job_id: str, *statuses: str, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body = await self.status(job_id)
            if body["status"] in statuses:
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"soak: {job_id} is {body['status']}, not {statuses}")
            await asyncio.sleep(0.2)

    async def submit(self, flow_id: str, *, session: str, mode: str = "background") -> dict[str, Any]:
        key = f"soak-{uuid.uuid4()}"
        r = await self.request("POST", "/api/v2/workflows", json={
            "flow_id": flow_id, "input_value": f"refund {self.rng.randrange(1000)}", "session_id": session,
            "mode": mode, "idempotency_key": key, "timeout": 60})
        assert r.status_code in (200, 201, 202), r.text
        return r.json()

    async def decide(self, job_id: str, request_id: str, action: str, expect: Expect) -> None:
        if self.rng.random() < 0.25:  # through the Temporal CLI, as an operator would
            proc = await asyncio.create_subprocess_exec(
                temporal_binary(), "workflow", "update", "execute", "--workflow-id", job_id, "--name", "resume",
                "--input", json.dumps({"request_id": request_id, "decision": {"action_id": action}}),
                "--address", self.cluster.temporal.address, "-o", "json",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            if proc.returncode == 0:
                expect.decisions.append((request_id, "cli"))
                return
            # Temporal away (restarting) or the worker that took the Update killed: the API's turn
        r = await self.request("POST", f"/api/v2/workflows/{job_id}/resume",
                               json={"request_id": request_id, "decision": {"action_id": action}})
        expect.decisions.append((request_id, r.status_code))
        assert r.status_code in (200, 409), r.text  # 409: an earlier try went through after all

    async def one(self, flows: dict[str, str]) -> None:
        kind = self.rng.choices(["gate", "stop", "superseded", "sync", "agent"], [5, 1, 1, 2, 1])[0]
        session = f"s-{uuid.uuid4()}"
        if kind == "sync":
            body = await self.submit(flows["echo"], session=session, mode="sync")
            expect = Expect(body["job_id"], kind, "completed")
            self.tally.expects.append(expect)
            if body["status"] != "completed":
                end = await self.wait(body["job_id"], "completed", "failed")
                if end["status"] == "failed":
                    # a sync run of a flow with no gate runs in its API process (docs/inline.md): it
                    # died with it, and says so (the sweep ended it failed); the client was told
                    assert "stopped" in json.dumps(end.get("errors") or end), end
                    expect.end = "failed"
                    self.tally.died_with_api += 1
        elif kind == "superseded":
            first = await self.submit(flows["gate"], session=session)
            self.tally.expects.append(Expect(first["job_id"], kind, "cancelled"))
            await self.wait(first["job_id"], "suspended")
            second = await self.submit(flows["gate"], session=session)
            self.tally.expects.append(Expect(second["job_id"], "gate", "suspended"))  # left waiting: never decided
            await self.wait(first["job_id"], "cancelled")
        else:
            body = await self.submit(flows["agent" if kind == "agent" else "gate"], session=session)
            job_id = body["job_id"]
            expect = Expect(job_id, kind, "cancelled" if kind == "stop" else "completed")
            self.tally.expects.append(expect)
            waiting = await self.wait(job_id, "suspended")
            if kind == "stop":
                r = await self.request("POST", "/api/v2/workflows/stop", json={"job_id": job_id})
                assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
            else:
                await self.decide(job_id, waiting["human_request"]["request_id"], "approve", expect)
                await self.wait(job_id, "completed")
        self.tally.runs += 1


async def audit(cluster: Cluster, expects: list[Expect]) -> dict[str, Any]:
    import temporalio.client

    store = open_store(cluster.pg.url)
    await store.setup()
    client = await temporalio.client.Client.connect(cluster.temporal.address)
    problems: list[str] = []
    lost = duplicated = 0
    try:
        for e in expects:
            job = await store.get_job(e.job_id)
            if job is None:
                lost += 1
                problems.append(f"{e.job_id}: no job")
                continue
            events = await store.read_events(e.job_id, limit=100_000)
            seqs = [ev.seq for ev in events]
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"{e.job_id}: seq not gap-free {seqs}")
            names = [ev.event for ev in events]
            terminal = [i for i, n in enumerate(names) if n in TERMINAL_EVENTS]
            if job.status.value != e.end:
                lost += 1
                problems.append(f"{e.job_id} ({e.kind}): {job.status.value}, expected {e.end}: {names}")
            if job.status.terminal:
                if len(terminal) != 1 or terminal[0] != len(names) - 1:
                    problems.append(f"{e.job_id}: terminal events {terminal} in {names}")
                roots = [s for s in await store.get_trace(job.run_id) if s.parent_id is None]
                if len(roots) != 1 or roots[0].end_time is None:
                    problems.append(f"{e.job_id}: trace roots {[(r.name, r.end_time) for r in roots]}")
                if await store.load_latest_checkpoint(job.run_id) is not None:
                    problems.append(f"{e.job_id}: a checkpoint left")
                if job.request.get("runner", "temporal") == "temporal":
                    handle = client.get_workflow_handle(e.job_id)

                    async def closed() -> bool:
                        desc = await handle.describe()
                        return desc.status != temporalio.client.WorkflowExecutionStatus.RUNNING

                    try:
                        await until(closed, 60, "the workflow to close")
                    except AssertionError:  # eventually: timed out
                        problems.append(f"{e.job_id}: ended, its workflow still running")
            elif terminal:
                problems.append(f"{e.job_id}: {job.status.value} with a terminal event")
            decided = Counter(ev.data.get("request_id") for ev in events if ev.event == "human_input_decision")
            duplicated += sum(1 for n in decided.values() if n > 1)
            for request_id, answer in e.decisions:
                if answer in (200, "cli") and decided[request_id] != 1:
                    lost += 1
                    problems.append(f"{e.job_id}: decision answered {answer}, applied {decided[request_id]} times")
    finally:
        await store.close()
    return {"lost": lost, "duplicated": duplicated, "problems": problems}


async def settle(cluster: Cluster, expects: list[Expect], timeout: float = 180) -> None:
    """Until every run is where it must end (the last decisions and stops reach their end) and an
    ended run's cleanup, which follows its status (engine/lifecycle.py: end_run), is over: the
    audit then finds what was left behind for good, not what is being removed."""
    store = open_store(cluster.pg.url)
    await store.setup()

    async def unsettled(e: Expect) -> bool:
        job = await store.get_job(e.job_id)
        if job is None:
            return False
        if job.status.terminal:
            return await store.load_latest_checkpoint(job.run_id) is not None
        return job.status.value != e.end

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not [e for e in expects if await unsettled(e)]:
                return
            await asyncio.sleep(0.5)
    finally:
        await store.close()


async def soak(seconds: float, clients: int, kill_every: float, seed: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="signoff-soak-"))
    cluster = Cluster(root)
    tally = Tally()
    started = time.monotonic()
    try:
        key = await cluster.start()
        setup = Client(cluster, key, tally, rng)
        flows = {}
        for name, spec in (("gate", GATE), ("echo", ECHO), ("agent", agent_flow(cluster.model.url + "/v1"))):
            r = await setup.request("POST", "/api/v1/flows", json=spec)
            assert r.status_code == 201, r.text
            flows[name] = r.json()["id"]
        await setup.close()
        load_started = time.monotonic()
        stop_at = load_started + seconds

        async def load(i: int) -> None:
            c = Client(cluster, key, tally, random.Random(rng.random()))
            try:
                while time.monotonic() < stop_at:
                    try:
                        await c.one(flows)
                    except (AssertionError, TimeoutError, RuntimeError) as err:
                        tally.problems.append(f"client {i}: {type(err).__name__}: {str(err)[:300]}")
                        say_progress(tally.problems[-1])
            finally:
                await c.close()

        async def chaos() -> None:
            pg_at, temporal_at = load_started + seconds / 3, load_started + 2 * seconds / 3
            while time.monotonic() < stop_at:
                await asyncio.sleep(kill_every)
                if time.monotonic() >= stop_at:
                    break
                if pg_at and time.monotonic() >= pg_at:
                    pg_at = 0
                    await cluster.restart_postgres()
                elif temporal_at and time.monotonic() >= temporal_at:
                    temporal_at = 0
                    await cluster.restart_temporal()
                else:
                    await cluster.kill_one(rng)
            for url in cluster.urls:  # everything back before the load's last runs settle
                await until(lambda u=url: ready(u), 90, "the APIs to be ready again")

        await asyncio.gather(chaos(), *(load(i) for i in range(clients)))
        load_seconds = time.monotonic() - load_started
        say_progress(f"load over: {tally.runs} runs; settling")
        await settle(cluster, tally.expects)
        say_progress("auditing")
        result = await audit(cluster, tally.expects)
        kinds = Counter(e.kind for e in tally.expects)
        out = {
            "seconds": round(load_seconds, 1), "clients": clients, "runs": tally.runs, "jobs": len(tally.expects),
            "runs_per_s": round(tally.runs / load_seconds, 2), "kinds": dict(kinds),
            "decisions": sum(len(e.decisions) for e in tally.expects),
            "kills": cluster.kills, "restarts": dict(cluster.restarts),
            "answers": {str(k): v for k, v in sorted(tally.statuses.items())}, "broken_connections": tally.broken,
            "sync_runs_that_died_with_their_api": tally.died_with_api,
            "lost": result["lost"], "duplicated": result["duplicated"],
            "problems": (tally.problems + result["problems"])[:20],
            "wall_seconds": round(time.monotonic() - started, 1),
        }
        if out["lost"] or out["duplicated"] or out["problems"]:
            out["logs"] = keep_logs(root)
        return out
    except BaseException:
        keep_logs(root)
        raise
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def keep_logs(root: Path) -> str:
    """The cluster's logs (APIs, workers, Temporal) copied out of the soak's folder, which is
    removed: a failure can be read afterwards. Returns where they are."""
    kept = Path(tempfile.mkdtemp(prefix="signoff-soak-logs-"))
    for log in root.glob("*.log"):
        shutil.copy(log, kept / log.name)
    say_progress(f"logs kept in {kept}")
    return str(kept)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--kill-every", type=float, default=5)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    out = asyncio.run(soak(args.seconds, args.clients, args.kill_every, args.seed))
    print(json.dumps(out, indent=2))
    if out["lost"] or out["duplicated"] or out["problems"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
