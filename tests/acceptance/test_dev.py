"""`signoff dev` as a newcomer meets it: the real command in a subprocess on free ports, the
README walkthrough over HTTP and from the wheel's `temporal` CLI, Ctrl-C, and a SIGKILL of the
whole process tree followed by a second start on the same state folder.

One `signoff dev` start serves several checks, a second the restart; about 10-20 s."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from signoff.devserver import free_port, port_open, temporal_binary

ROOT = Path(__file__).resolve().parents[2]
SIGNOFF = [sys.executable, "-m", "signoff.cli"]


def poll(fn: Callable[[], Any], *, timeout: float = 30.0, what: str) -> Any:
    """``fn()`` once it is truthy; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a subprocess's state with a deadline, not timing an assertion


def open_to_others(home: Path) -> dict[str, str]:
    """What under SIGNOFF_HOME someone else could read or enter (mode bits for group or others).
    A file that goes while it is looked at (a database's journal) is skipped."""
    found = {}
    for p in [home, *home.rglob("*")]:
        try:
            mode = stat.S_IMODE(p.lstat().st_mode)
        except FileNotFoundError:
            continue
        if not p.is_symlink() and mode & 0o077:
            found[str(p.relative_to(home.parent))] = oct(mode)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # an exited process not yet reaped by init is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Dev:
    """One `signoff dev` process (its own process group) with its output collected line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*SIGNOFF, "dev"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.key = poll(self._key, timeout=90, what="`API key:` in the output of signoff dev")
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _key(self) -> str | None:
        assert self.proc.poll() is None, "signoff dev exited:\n" + self.output
        for line in self.lines:
            if line.startswith("API key: "):
                return line.removeprefix("API key: ").strip()
        return None

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def url(self, label: str) -> str:
        m = re.search(rf"^\s*{re.escape(label)}:\s+(http://\S+)", self.output, re.M)
        assert m, f"no {label} URL in:\n{self.output}"
        return m.group(1)

    def temporal_pid(self) -> int:
        return json.loads((Path(self.env["SIGNOFF_HOME"]) / "temporal.pid").read_text())["pid"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def test_signoff_dev_as_a_newcomer_meets_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    api_port, temporal_port, ui_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "OTEL_"))}
    env.update(
        SIGNOFF_HOME=str(home),
        SIGNOFF_API_PORT=str(api_port),
        SIGNOFF_DEV_TEMPORAL_PORT=str(temporal_port),
        SIGNOFF_DEV_UI_PORT=str(ui_port),
    )
    address = f"127.0.0.1:{temporal_port}"

    def temporal(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([temporal_binary(), *args, "--address", address], capture_output=True, text=True,
                              timeout=60)

    stack = contextlib.ExitStack()  # the HTTP clients
    dev = Dev(env)
    try:
        # What it prints, and what answers there.
        api = dev.url("API")
        assert api == f"http://127.0.0.1:{api_port}"
        assert dev.url("Temporal Web UI") == f"http://127.0.0.1:{ui_port}"
        assert httpx.get(f"{api}/health", timeout=10).status_code == 200  # no key needed
        assert httpx.get(dev.url("Temporal Web UI"), timeout=10).status_code == 200
        key = dev.key

        # A second `signoff dev` on the same folder, or on a taken API port, says what to change.
        again = subprocess.run([*SIGNOFF, "dev"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "another `signoff dev`" in again.stderr, again.stderr
        assert "Traceback" not in again.stderr
        taken = subprocess.run([*SIGNOFF, "dev"], env={**env, "SIGNOFF_HOME": str(tmp_path / "other")}, cwd=ROOT,
                               capture_output=True, text=True, timeout=60)
        assert taken.returncode == 1 and f"port {api_port}" in taken.stderr and "SIGNOFF_API_PORT" in taken.stderr
        assert "Traceback" not in taken.stderr

        # The README walkthrough, as a user.
        http = stack.enter_context(httpx.Client(base_url=api, headers={"x-api-key": key}, timeout=90))
        created = http.post("/api/v1/flows", content=(ROOT / "examples/flows/refund.json").read_bytes(),
                            headers={"content-type": "application/json"})
        assert created.status_code == 201, created.text
        flow = created.json()["id"]

        def submit(session: str) -> dict:
            r = http.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "Refund order 42",
                                                     "session_id": session, "mode": "sync"})
            assert r.status_code == 200, r.text
            return r.json()

        def status(job: str) -> dict:
            r = http.get(f"/api/v2/workflows/{job}")
            assert r.status_code == 200, r.text
            return r.json()

        def completed(job: str) -> dict:
            return poll(lambda: (s := status(job))["status"] == "completed" and s, what=f"{job} completed")

        run = submit("s1")
        job = run["job_id"]
        assert run["status"] == "suspended"
        assert run["human_request"]["request_id"] == f"gate:{job}"
        assert [o["action_id"] for o in run["human_request"]["options"]] == ["approve", "reject"]
        assert status(job)["status"] == "suspended"
        assert http.get(f"/api/v2/workflows/{job}/pending").json()["request_id"] == f"gate:{job}"
        waiting = http.get("/api/v2/workflows/pending", params={"flow_id": flow}).json()
        assert [p["job_id"] for p in waiting] == [job]
        r = http.post(f"/api/v2/workflows/{job}/resume",
                      json={"request_id": f"gate:{job}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200 and r.json()["status"] == "resuming"
        assert r.json()["run"]["status"] == "completed"  # the answer says where the run is now
        assert completed(job)["output"]["text"] == "Refund sent"

        # Step 5: the event log (whole, then after seq 2), the chat history, the trace.
        def events(**headers: str) -> list[dict]:
            r = http.get(f"/api/v2/workflows/{job}/events", headers=headers)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]

        assert [e["event"] for e in events()] == ["human_input_required", "human_input_decision", "end"]
        assert [e["seq"] for e in events(**{"Last-Event-ID": "2"})] == [3]
        history = http.get("/api/v1/monitor/messages", params={"session_id": "s1"}).json()
        assert [m["text"] for m in history] == ["Refund order 42", "Approve the refund for: Refund order 42", "Refund sent"]
        assert history[1]["card"]["submitted_action"] == "approve"
        trace = http.get(f"/api/v1/monitor/traces/{job}").json()
        assert trace["trace_id"] == job

        def names(spans: list[dict]) -> list[str]:
            return [n for s in spans for n in [s["name"], *names(s.get("children", []))]]

        assert "Human In The Loop — Approve" in names(trace["spans"])

        # Approve from the Temporal CLI of the wheel.
        job2 = submit("s1")["job_id"]
        assert status(job2)["status"] == "suspended"
        query = temporal("workflow", "query", "--workflow-id", job2, "--name", "pending")
        assert query.returncode == 0 and f"gate:{job2}" in query.stdout, query.stderr
        update = temporal("workflow", "update", "execute", "--workflow-id", job2, "--name", "resume", "--input",
                          json.dumps({"request_id": f"gate:{job2}", "decision": {"action_id": "approve"}}))
        assert update.returncode == 0, update.stderr
        assert completed(job2)["output"]["text"] == "Refund sent"

        # A run left suspended: the Web UI's query finds it.
        job3 = submit("s2")["job_id"]
        poll(lambda: job3 in temporal("workflow", "list", "--query", 'SignoffStatus="suspended"').stdout,
             what="the suspended run in `temporal workflow list`")

        # The state folder is private: both databases hold every run's inputs.
        assert {"temporal.db", "signoff.db", "dev_api_key"} <= {p.name for p in home.iterdir()}
        assert open_to_others(home) == {}

        # SIGKILL of the whole `signoff dev` process group: the dev server goes with it.
        server_pid = dev.temporal_pid()
        os.killpg(dev.proc.pid, signal.SIGKILL)
        dev.proc.wait()
        poll(lambda: not alive(server_pid), what="the Temporal dev server to die with signoff dev")
        poll(lambda: not port_open("127.0.0.1", temporal_port), what="the Temporal port to close")
    finally:
        dev.stop()

    # A second start on the same folder: the same key, the run still waits and resumes; what an
    # earlier, laxer version left open is closed.
    home.chmod(0o755)
    (home / "dev_api_key").chmod(0o644)
    assert open_to_others(home)
    dev = Dev(env)
    try:
        assert dev.key == key
        assert open_to_others(home) == {}
        http = stack.enter_context(httpx.Client(base_url=api, headers={"x-api-key": key}, timeout=90))
        assert status(job3)["status"] == "suspended"
        assert http.get(f"/api/v2/workflows/{job3}/pending").json()["request_id"] == f"gate:{job3}"

        # The client commands find this `signoff dev` (a moved port, its key) with no exports; the
        # banner names the dev user, whom `users list` lists; a prompt reads as text.
        assert re.search(r"^\s*User:\s+dev\b", dev.output, re.M), dev.output
        assert json.loads((home / "dev.json").read_text())["api_url"] == api
        cli = subprocess.run([*SIGNOFF, "status", job3], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert f"on request gate:{job3}:\n  Approve the refund for: Refund order 42" in cli.stdout, cli.stdout
        pending = subprocess.run([*SIGNOFF, "pending"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert pending.returncode == 0 and f"{job3}\t{flow}\tgate:{job3}\tApprove the refund for: Refund order 42\t" in pending.stdout, \
            pending.stdout + pending.stderr
        users = subprocess.run([*SIGNOFF, "users", "list"], env=env, cwd=ROOT, capture_output=True, text=True,
                               timeout=60)
        assert users.returncode == 0 and "dev" in [line.split("\t")[0] for line in users.stdout.splitlines()], users.stdout
        # `users create` in a folder with no database says so, instead of making a key nobody reads
        elsewhere = {**env, "SIGNOFF_HOME": str(tmp_path / "elsewhere")}
        made = subprocess.run([*SIGNOFF, "users", "create", "bob"], env=elsewhere, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 1 and "no signoff database" in made.stderr and not made.stdout, made.stderr
        assert not (tmp_path / "elsewhere" / "signoff.db").exists()
        # ... and one pointed at another database than the running dev's
        other_db = {**env, "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'other.db'}"}
        made = subprocess.run([*SIGNOFF, "users", "create", "bob"], env=other_db, cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 1 and "uses sqlite:///" in made.stderr and not made.stdout, made.stderr

        r = http.post(f"/api/v2/workflows/{job3}/resume",
                      json={"request_id": f"gate:{job3}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        assert completed(job3)["output"]["text"] == "Refund sent"

        # Ctrl-C stops everything, with exit code 0.
        server_pid = dev.temporal_pid()
        os.kill(dev.proc.pid, signal.SIGINT)
        assert dev.proc.wait(timeout=60) == 0, dev.output
        assert "Traceback" not in dev.output, dev.output
        assert not alive(server_pid)
        assert not port_open("127.0.0.1", temporal_port)
        assert not port_open("127.0.0.1", api_port)
        assert not (home / "temporal.pid").exists()
        assert not (home / "dev.json").exists()
    finally:
        dev.stop()
        stack.close()


def test_a_killed_temporal_dev_server_is_started_again_and_the_waiting_run_goes_on(tmp_path: Path) -> None:
    """SIGKILL the dev server under `signoff dev` (issue 17: it used to stay a zombie and nothing
    noticed): signoff dev reaps it, says so, starts it again on the same database file; the run
    that waited goes on when its decision comes."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "OTEL_"))}
    env.update(SIGNOFF_HOME=str(home), SIGNOFF_API_PORT=str(free_port()),
               SIGNOFF_DEV_TEMPORAL_PORT=str(free_port()), SIGNOFF_DEV_UI_PORT=str(free_port()))
    dev = Dev(env)
    try:
        with httpx.Client(base_url=dev.url("API"), headers={"x-api-key": dev.key}, timeout=60) as http:
            flow = http.post("/api/v1/flows", content=(ROOT / "examples/flows/refund.json").read_bytes(),
                             headers={"content-type": "application/json"}).json()["id"]
            job = http.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "refund 7", "mode": "sync"}
                            ).json()
            assert job["status"] == "suspended", job
            first = dev.temporal_pid()
            os.kill(first, signal.SIGKILL)
            poll(lambda: "Temporal dev server exited" in dev.output, timeout=30, what="signoff dev to notice")
            assert not alive(first)  # reaped, not a zombie
            poll(lambda: "Temporal dev server is back" in dev.output, timeout=90, what="the server back")
            assert dev.temporal_pid() != first and dev.proc.poll() is None
            r = http.post(f"/api/v2/workflows/{job['job_id']}/resume",
                          json={"request_id": job["human_request"]["request_id"], "decision": {"action_id": "approve"}})
            assert r.status_code == 200, r.text
            done = poll(lambda: (b := http.get(f"/api/v2/workflows/{job['job_id']}").json())["status"] == "completed"
                        and b, timeout=60, what="the run to complete")
            assert done["output"]["text"] == "Refund sent"
            assert http.get("/health/ready").status_code == 200
    finally:
        dev.stop()
    assert "Traceback" not in dev.output, dev.output
