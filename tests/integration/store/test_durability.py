"""What survives: closing and reopening, and SIGKILL in the middle of a burst of writes. (That
hostile strings come back byte for byte is part of the contract: tests/store_conformance.py.)"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import uuid
from pathlib import Path

from signoff.engine.models import JobStatus, Message, SpanRecord, utcnow
from signoff.engine.store import open_store
from signoff.engine.store.sql.schema import MIGRATIONS
from tests.store_conformance import suspended_job, uid

REPO = Path(__file__).resolve().parents[3]


async def test_data_survives_close_and_reopen(db_url: str) -> None:
    store = open_store(db_url)
    await store.setup()
    user = await store.create_user(uid("user-"))
    key = await store.create_api_key(user.id)
    flow = await store.save_flow(user.id, "f", {"nodes": [], "edges": []})
    job_id, request_id = await suspended_job(store, user_id=user.id, flow_id=flow.id)
    await store.append_event(job_id, "human_input_required", {"request_id": request_id})
    checkpoint_id = await store.save_checkpoint(job_id, {"state": [1, 2, 3]}, job_id=job_id)
    await store.add_message(Message(id=uid(), session_id=job_id, sender="User", sender_name="User", text="hi",
                                    created_at=utcnow()))
    await store.save_spans([SpanRecord(trace_id=job_id, span_id="s", name="n", start_time=utcnow())])
    await store.put_blob(f"{job_id}/out", b"\x00\xffdata")
    await store.close()

    reopened = open_store(db_url)
    try:
        await reopened.setup()
        assert await reopened.schema_version() == len(MIGRATIONS)
        assert (await reopened.user_for_api_key(key)).id == user.id
        assert (await reopened.get_flow(flow.id)).spec == {"nodes": [], "edges": []}
        job = await reopened.get_job(job_id)
        assert job.status == JobStatus.suspended and job.pending.request_id == request_id
        assert [e.event for e in await reopened.read_events(job_id)] == ["human_input_required"]
        assert (await reopened.load_latest_checkpoint(job_id)).id == checkpoint_id
        assert [m.text for m in await reopened.list_messages(job_id)] == ["hi"]
        assert len(await reopened.get_trace(job_id)) == 1
        assert await reopened.get_blob(f"{job_id}/out") == b"\x00\xffdata"
        # the claim still works after the restart
        assert await reopened.claim_suspended_for_resume(job_id, request_id)
    finally:
        await reopened.close()


async def test_sigkill_mid_burst_keeps_every_committed_row(db_url: str) -> None:
    prefix = f"kill-{uuid.uuid4().hex[:8]}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.store._child", db_url, "burst", prefix,
        cwd=REPO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    reported: list[str] = []
    try:
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() == b"ready"
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        while len(reported) < 150:  # well into the burst: four writers are mid-transaction
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, "the writer stopped early"
            reported.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == -signal.SIGKILL
    reported += rest.decode().split()  # lines flushed before the kill were committed too

    if db_url.startswith("sqlite:///"):
        path = db_url[len("sqlite:///"):]
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()

    store = open_store(db_url)
    try:
        await store.setup()  # opens cleanly (and recovers the WAL on SQLite)
        for job_id in reported:
            job = await store.get_job(job_id)
            assert job is not None, f"{job_id} was reported committed but is gone"
            assert job.status == JobStatus.completed and job.result == {"i": int(job_id.rsplit("-", 1)[1])}
            assert [e.seq for e in await store.read_events(job_id)] == [1]
    finally:
        await store.close()
