"""Helpers shared by the integration and acceptance tests: polling with a deadline (never a
bare sleep), the canonical gate flow, and a local HTTP server that counts its hits (a real part
for "no second HTTP call")."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from signoff.engine.models import Job, JobStatus, NewJob, utcnow
from signoff.engine.store.proxy import StoreProxy

REPO = Path(__file__).resolve().parents[1]

GATE_FLOW: dict[str, Any] = {
    "name": "Refund approval",
    "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
        {"id": "ok", "type": "ChatOutput", "params": {"text": "Refund sent"}},
        {"id": "no", "type": "ChatOutput", "params": {"text": "Refund refused"}},
    ],
    "edges": [
        {"from": "ask.message", "to": "gate.prompt"},
        {"from": "gate.branch_approve", "to": "ok.input_value"},
        {"from": "gate.branch_reject", "to": "no.input_value"},
    ],
}


def gate_flow(name: str = "Refund approval", **gate: Any) -> dict[str, Any]:
    """GATE_FLOW named ``name``, its gate asking "Approve this refund?" with ``gate``'s params."""
    nodes = [dict(n) for n in GATE_FLOW["nodes"]]
    nodes[1] = {**nodes[1], "params": {"prompt": "Approve this refund?", **nodes[1]["params"], **gate}}
    return {**GATE_FLOW, "name": name, "nodes": nodes}


# How much of each race's full count a run spends (SIGNOFF_TEST_RACE_SCALE): `make test` (CI, a
# change's check) a quarter, `make test-deep` all of it. A race's rounds look for a rare
# interleaving; the quick count keeps every race and every assertion, the deep one looks harder
# (docs/testing.md: before a release, after touching a claim, a lock or the decision path).
RACE_SCALE = float(os.environ.get("SIGNOFF_TEST_RACE_SCALE", "0.25"))


def scaled(n: int, *, least: int = 4) -> int:
    """A race's full count ``n`` as this run spends it: times :data:`RACE_SCALE`, never under
    ``least`` (nor over ``n`` when ``n`` is that small already)."""
    return n if n <= least else max(least, round(n * RACE_SCALE))


def rounds(backend: str, n: int, *, least: int = 4) -> int:
    """How many times a race through the whole stack runs on ``backend``: its full count ``n`` on
    PostgreSQL, half on SQLite, then :func:`scaled`. SQLite has one writer, so racing claims queue
    in the database and meet fewer interleavings than PostgreSQL's row locks and concurrent
    transactions give; the rounds that find more are spent where there is more to find (the
    suite's time: docs/testing.md)."""
    return scaled(n if backend == "postgres" else max(1, n // 2), least=least)


class EgressAllow:
    """The egress allow-list (SIGNOFF_EGRESS_ALLOW) of one test: the local servers its flows may
    call, port by port, never a bypass. Settings bound to it (:meth:`bind`) see each server
    added later too: the engine reads the setting at every connection."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self._bound: list[Any] = []

    @property
    def value(self) -> str:
        return ",".join(self.entries)

    def add(self, *servers: Any) -> None:
        """Allow servers (anything with a ``url``) or ``host:port`` entries."""
        for server in servers:
            entry = server if isinstance(server, str) else urlsplit(server.url).netloc
            if entry not in self.entries:
                self.entries.append(entry)
        for settings in self._bound:
            settings.egress_allow = self.value

    def bind(self, settings: Any) -> Any:
        settings.egress_allow = self.value
        self._bound.append(settings)
        return settings


def signoff_cli(*argv: str, stdin: str | None = None):
    """The ``signoff`` command run in this process: ``signoff.cli.main`` (what the console script
    calls) with its output captured, as a ``CompletedProcess``. For a test whose subject is a
    command's answer, not the process (a spawn costs a second or more of imports); call it with
    ``asyncio.to_thread`` from async code. The environment is this process's (``monkeypatch`` it)."""
    import contextlib
    import io
    import subprocess
    import sys

    from signoff.cli import main

    out, err = io.StringIO(), io.StringIO()
    stdin_was = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as e:  # argparse, or a command that exits with a message (as Python does)
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    finally:
        sys.stdin = stdin_was
    return subprocess.CompletedProcess(["signoff", *argv], code, out.getvalue(), err.getvalue())


class LocalHTTPServer:
    """A real HTTP server on 127.0.0.1 (a free port), serving ``handler`` from a daemon thread.
    Subclasses build their handler class, then call ``super().__init__(Handler)``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # serve_forever's loop notices a shutdown() only at its poll (0.5 s by default): every
        # close waited that long
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class CountingHTTP(LocalHTTPServer):
    """Counts requests per path. ``/block/...`` answers only once ``release`` is set."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                outer.counts[self.path] += 1
                if self.path.startswith("/block/"):
                    outer.release.wait(120)
                body = f"seen {self.path}".encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def close(self) -> None:
        self.release.set()
        super().close()


async def eventually(fn: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``fn`` (sync or async) until it returns a truthy value; returns it."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = fn()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.2)


async def settle_leftovers(store) -> None:
    """Cancel the runs an earlier test left ``queued`` without a workflow, so that the sweep
    (``start_unstarted``) this test calls sees this test's runs alone. On SQLite a test has its
    own file and there are none; the session's PostgreSQL database is shared by the tests of one
    worker (tests/fixtures/db.py), one after another, and a sweep would start every earlier
    test's leftovers on this test's task queue (and list at most 100 of them)."""
    while left := await store.list_unstarted(utcnow() + timedelta(seconds=1), limit=100):
        for job in left:
            await store.set_status(job.job_id, JobStatus.cancelled, event=("run_cancelled", {"reason": "stopped"}))


async def queued_without_workflow(store, user, flow, **fields) -> str:
    """What a submit that died right after its insert leaves: a ``queued`` job without its
    workflow (and none of an earlier test's beside it: :func:`settle_leftovers`)."""
    await settle_leftovers(store)
    job, created = await store.create_job(NewJob(
        job_id=str(uuid.uuid4()), flow_id=flow.id, flow_version=flow.version, user_id=user.id,
        request={"input_value": "refund 42", "tweaks": {}, "mode": "background", "runner": "temporal"}, **fields))
    assert created and job.status == JobStatus.queued
    return job.job_id


async def wait_status(store, job_id: str, *statuses: JobStatus, timeout: float = 60.0) -> Job:
    async def check():
        job = await store.get_job(job_id)
        return job if job and job.status in statuses else None

    return await eventually(check, timeout=timeout, what=f"job {job_id} in {statuses}")


async def event_names(store, job_id: str) -> list[str]:
    return [e.event for e in await store.read_events(job_id)]


class Proc:
    """A ``signoff`` command (``api``, ``worker``, ...) as its own process, in its own process
    group, its output in ``log``: killed with SIGKILL, or stopped with SIGTERM."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        import subprocess
        import sys

        self.log = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", *args], cwd=REPO, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        import os
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        import os
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        self.log.close()


async def to_a_pause_and_its_retry(store, settings, job_id: str) -> tuple[Any, Callable[[], Any]]:
    """A run's layers driven as its workflow would (the run's workflow has no worker: the test
    is it): the first layer (it must not pause), then the next to its pause, persisted. Returns
    that layer's output, and the layer's retry (attempt 2, as after a worker killed once the pause
    was persisted, before Temporal heard of it) to await when the test has counted what the
    first attempt did."""
    import dataclasses

    from temporalio.testing import ActivityEnvironment

    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import RunLayerInput

    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    first = await env.run(acts.run_layer, RunLayerInput(job_id=job_id, step=0, now=utcnow(), inline=True,
                                                       persist=True))
    assert first.pending is None and not first.done  # what dials out (or asks a model) is a layer of its own
    layer = RunLayerInput(job_id=job_id, step=first.step, state=first.state, now=utcnow(), inline=True, persist=True)
    paused = await env.run(acts.run_layer, layer)
    assert paused.pending is not None and paused.persisted

    async def retry() -> Any:
        env.info = dataclasses.replace(env.info, attempt=2)
        return await env.run(acts.run_layer, layer)

    return paused, retry


class CountingStore(StoreProxy):
    """A store whose calls are kept by name (``calls``), for the tests that count a path's round
    trips; ``before``: a coroutine function awaited before the first call of that name."""

    def __init__(self, inner: Any, before: dict[str, Callable[[], Any]] | None = None) -> None:
        super().__init__(inner)
        self.calls: list[str] = []
        self.before = before or {}

    def _wrap(self, name: str):
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in self.before:
                await self.before.pop(name)()
            return await getattr(self._store, name)(*args, **kwargs)

        return call
