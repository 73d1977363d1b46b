"""A process started while its dependencies do not answer yet waits for them (service/startup.py):
``signoff api`` and ``signoff worker`` started with PostgreSQL and the Temporal frontend both away
(each behind a TCP proxy the test has cut) say what they wait for, and serve once both come back,
instead of exiting as they did (the chaos soak's API restarted during a restart of PostgreSQL or
Temporal stayed down). Past SIGNOFF_STARTUP_WAIT_SECONDS a process exits, naming what it waited for."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx
import pytest

from signoff.devserver import free_port
from tests.fixtures.tls_proxy import TLSProxy
from tests.helpers import Proc, eventually

pytestmark = [pytest.mark.postgres, pytest.mark.temporal]


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def test_api_and_worker_started_before_postgres_and_temporal_wait_for_them(
        temporal_server, pg_url: str, tmp_path: Path) -> None:
    async with TLSProxy(None, "127.0.0.1:5432") as database, TLSProxy(None, temporal_server.address) as frontend:
        await database.cut()
        await frontend.cut()
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
               "SIGNOFF_DATABASE_URL": pg_url.replace("127.0.0.1:5432", database.address),
               "SIGNOFF_TEMPORAL_ADDRESS": frontend.address, "SIGNOFF_TASK_QUEUE": f"startup-{uuid.uuid4()}",
               "SIGNOFF_HOME": str(tmp_path), "SIGNOFF_API_PORT": str(port), "SIGNOFF_STARTUP_WAIT_SECONDS": "120"}
        logs = {name: tmp_path / f"{name}.log" for name in ("api", "worker")}
        procs = {"api": Proc(["api", "--log-level", "warning"], env, logs["api"]),
                 "worker": Proc(["worker"], env, logs["worker"])}
        try:
            for name, log in logs.items():
                await eventually(lambda log=log: "waiting for the database" in _log(log), timeout=60,
                                 what=f"the {name} to say it waits for the database")
            await database.mend()
            for name, log in logs.items():
                await eventually(lambda log=log: "waiting for Temporal" in _log(log), timeout=60,
                                 what=f"the {name} to say it waits for Temporal")
            assert all(p.proc.poll() is None for p in procs.values()), {n: _log(p) for n, p in logs.items()}
            await frontend.mend()

            async def ready() -> bool:
                try:
                    async with httpx.AsyncClient() as c:
                        return (await c.get(f"http://127.0.0.1:{port}/health/ready", timeout=5)).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(ready, timeout=90, what="the API to be ready once both are back")
            await eventually(lambda: "signoff worker: task queue" in _log(logs["worker"]), timeout=60,
                             what="the worker to run once both are back")
        finally:
            for p in procs.values():
                p.close()


async def test_a_process_gives_up_after_the_startup_wait_naming_what_it_waited_for(
        temporal_server, tmp_path: Path) -> None:
    async with TLSProxy(None, temporal_server.address) as frontend:
        await frontend.cut()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
               "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}", "SIGNOFF_TEMPORAL_ADDRESS":
               frontend.address, "SIGNOFF_HOME": str(tmp_path), "SIGNOFF_STARTUP_WAIT_SECONDS": "1"}
        worker = Proc(["worker"], env, tmp_path / "worker.log")
        try:
            code = worker.proc.wait(60)
        finally:
            worker.close()
        out = _log(tmp_path / "worker.log")
        assert code != 0 and "waiting for Temporal" in out and "not reachable" in out, out
