"""What the benches share: percentiles, a process's CPU time, a free port, and a server process
started in its own group (waited for until healthy, stopped with its children). Standard library
only at import: bench/peer.py starts in a bare python3.11 and runs again in lfx's venv, which has
httpx but not signoff (so free_port is here beside signoff.devserver's)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path



def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(values: list[float]) -> dict:
    """p50 / p95 in ms of durations in seconds, and how many."""
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(pct(ms, 0.5), 2), "p95_ms": round(pct(ms, 0.95), 2), "n": len(ms)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_healthy(proc: subprocess.Popen, healthy: Callable[[], Awaitable[bool]], what: str, log: Path,
                       timeout: float) -> None:
    """Until ``healthy()`` says so (an HTTP error is "not yet"); SystemExit with the end of ``log``
    when the process exits first, or after ``timeout`` seconds."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: " + log.read_text()[-2000:])
        try:
            if await healthy():
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise SystemExit(f"{what} did not become healthy")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group (started with ``start_new_session``), SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_process(proc: subprocess.Popen | None, timeout: float = 20) -> None:
    """SIGTERM to one process (a ``signoff worker`` the bench started), SIGKILL after ``timeout``."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
