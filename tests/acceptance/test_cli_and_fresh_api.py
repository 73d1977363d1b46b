"""The `signoff` CLI and a real `signoff api` process, as a user drives them: a fresh API
process on the same database serves and resumes a job suspended through the old one."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from signoff.engine.models import JobStatus
from signoff.engine.settings import Settings
from signoff.engine.store import open_store
from signoff.devserver import free_port
from signoff.worker import build_worker

ROOT = Path(__file__).resolve().parents[2]
SIGNOFF = [sys.executable, "-m", "signoff.cli"]


def _env(tmp: Path, port: int, temporal_address: str, task_queue: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_HOME=str(tmp),
        SIGNOFF_DATABASE_URL=f"sqlite:///{tmp / 'signoff.db'}",
        SIGNOFF_TEMPORAL_ADDRESS=temporal_address,
        SIGNOFF_TASK_QUEUE=task_queue,
        SIGNOFF_API_PORT=str(port),
        **extra,
    )
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SIGNOFF, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


async def _acli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    # The worker runs on this test's event loop: never block it while a command waits.
    return await asyncio.to_thread(_cli, env, *args)


def _start_api(env: dict[str, str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen([*SIGNOFF, "api", "--log-level", "warning"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "signoff api exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "signoff api never became healthy"
        time.sleep(0.1)  # polling a subprocess's readiness, not timing an assertion


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def test_cli_walkthrough_and_a_fresh_api_process(tmp_path: Path, temporal_server, temporal_client) -> None:
    port = free_port()
    queue = f"accept-{uuid.uuid4()}"
    env = _env(tmp_path, port, temporal_server.address, queue)
    settings = Settings(home=tmp_path, database_url=env["SIGNOFF_DATABASE_URL"], task_queue=queue)
    store = open_store(settings.resolved_database_url)
    await store.setup()
    try:
        created = await _acli(env, "users", "create", "alice")
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip().splitlines()[-1]
        env["SIGNOFF_API_KEY"] = key

        async with build_worker(temporal_client, store, settings):
            api = await asyncio.to_thread(_start_api, env, port)
            try:
                added = await _acli(env, "flows", "add", "examples/flows/refund.json")
                assert added.returncode == 0, added.stderr
                flow_id = added.stdout.split()[0]
                sub = await _acli(env, "submit", flow_id, "--input", "refund 42", "--session", "s1", "--sync")
                assert sub.returncode == 0, sub.stderr
                job_id, status = sub.stdout.splitlines()[0].split("\t")
                assert status == "suspended"
                pending = await _acli(env, "pending")
                assert job_id in pending.stdout
            finally:
                _stop(api)

            api = await asyncio.to_thread(_start_api, env, port)  # a fresh process on the same database
            try:
                st = await _acli(env, "status", job_id)
                assert st.returncode == 0 and "suspended" in st.stdout, st.stdout + st.stderr
                bad = await _acli(env, "resume", job_id, "--action", "maybe")
                assert bad.returncode == 1 and "INVALID_DECISION" in bad.stderr
                ok = await _acli(env, "resume", job_id, "--action", "approve")
                assert ok.returncode == 0, ok.stderr
                deadline = time.monotonic() + 30
                while (await store.get_job(job_id)).status != JobStatus.completed:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                st = await _acli(env, "status", job_id)
                assert "completed" in st.stdout and "Refund sent" in st.stdout
                unauth = await _acli({**env, "SIGNOFF_API_KEY": "wrong"}, "status", job_id)
                assert unauth.returncode == 1 and "UNAUTHORIZED" in unauth.stderr
            finally:
                _stop(api)
    finally:
        await store.close()


async def test_secrets_keys_and_users_from_the_command_line(tmp_path: Path, temporal_server, temporal_client) -> None:
    """`signoff secrets set` (value on stdin, never printed back), `signoff users revoke-key`
    (401 from then on), `signoff users delete` (runs cancelled, flows deleted, the key dead)."""
    port = free_port()
    queue = f"accept-{uuid.uuid4()}"
    env = _env(tmp_path, port, temporal_server.address, queue)
    settings = Settings(home=tmp_path, database_url=env["SIGNOFF_DATABASE_URL"], task_queue=queue)
    store = open_store(settings.resolved_database_url)
    await store.setup()
    try:
        keys = []
        for _ in range(2):
            created = await _acli(env, "users", "create", "carol")
            assert created.returncode == 0, created.stderr
            keys.append(created.stdout.strip().splitlines()[-1])
        env["SIGNOFF_API_KEY"] = keys[0]
        async with build_worker(temporal_client, store, settings):
            api = await asyncio.to_thread(_start_api, env, port)
            try:
                put = await asyncio.to_thread(subprocess.run, [*SIGNOFF, "secrets", "set", "bank"], env=env, cwd=ROOT,
                                              input="s3cr3t-value\n", capture_output=True, text=True, timeout=60)
                assert put.returncode == 0 and "s3cr3t-value" not in put.stdout + put.stderr, put.stderr
                listed = await _acli(env, "secrets", "list")
                assert "bank" in listed.stdout and "s3cr3t-value" not in listed.stdout
                record = await store.get_secret((await store.get_user_by_name("carol")).id, "bank")
                assert record is not None and b"s3cr3t-value" not in record.ciphertext

                # revoke one key: it gets 401, the other still works
                revoked = await _acli(env, "users", "revoke-key", "carol", "--key", keys[0])
                assert revoked.returncode == 0, revoked.stderr
                dead = await _acli(env, "flows", "list")
                assert dead.returncode == 1 and "UNAUTHORIZED" in dead.stderr
                env["SIGNOFF_API_KEY"] = keys[1]
                added = await _acli(env, "flows", "add", "examples/flows/refund.json")
                flow_id = added.stdout.split()[0]
                sub = await _acli(env, "submit", flow_id, "--input", "refund 42", "--sync")
                job_id, status = sub.stdout.splitlines()[0].split("\t")
                assert status == "suspended"

                # delete the user: the waiting run is cancelled, the flow and the key are gone
                deleted = await _acli(env, "users", "delete", "carol")
                assert deleted.returncode == 0, deleted.stderr
                job = await store.get_job(job_id)
                assert job.status == JobStatus.cancelled
                assert (await store.read_events(job_id))[-1].data == {"reason": "user_deleted"}
                assert await store.get_flow(flow_id) is None
                assert await store.get_user_by_name("carol") is None
                gone = await _acli(env, "flows", "list")
                assert gone.returncode == 1 and "UNAUTHORIZED" in gone.stderr
                missing = await _acli(env, "users", "delete", "carol")
                assert missing.returncode == 1 and "no user named" in missing.stderr
            finally:
                _stop(api)
    finally:
        await store.close()


def test_users_create_makes_a_private_home(tmp_path: Path) -> None:
    """The first command on a new machine may be `signoff users create`: the SQLite database it
    makes holds API keys, so its SIGNOFF_HOME is private from the start, as under signoff dev."""
    home = tmp_path / "new-home"
    env = _env(home, free_port(), "127.0.0.1:1", "unused")
    env["SIGNOFF_DATABASE_URL"] = f"sqlite:///{home / 'signoff.db'}"
    created = _cli(env, "users", "create", "first")
    assert created.returncode == 0, created.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "signoff.db").stat().st_mode) == 0o600
