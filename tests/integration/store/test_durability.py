"""What survives: closing and reopening, SIGKILL in the middle of a burst of writes, and hostile
strings that must come back byte for byte."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import uuid
from datetime import timedelta
from pathlib import Path

from signoff.engine.models import JobStatus, Message, NewJob, SpanRecord, utcnow
from signoff.engine.store import Store, open_store
from signoff.engine.store._sql import MIGRATIONS
from tests.integration.store.test_conformance import new_job, pending, suspended_job, uid

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


HOSTILE = [
    "'; DROP TABLE jobs; --",
    'Robert"); DROP TABLE students;--',
    "' OR '1'='1",
    "?", "??", "%s", "%(name)s", "%%", "$1", ":name", "\\", "\\'", "\\x00",
    "😀 ünïcødé ﷽ 𝕏 中文 עברית \u202eevil\u202c",
    "\r\n\t\x0b\x0c\x1f\x7f",
    "'" * 1000,
    "a\u2028b\u2029c",
    "",
]
BIG = ("0123456789abcdef'\"%?\\😀" * 50_000)[: 1024 * 1024]  # 1 MiB of characters, no NUL


async def test_hostile_strings_round_trip(store: Store) -> None:
    for i, text in enumerate([*HOSTILE, BIG]):
        name = f"{text[:200]}-{uuid.uuid4()}"
        user = await store.create_user(name)
        assert (await store.get_user_by_name(name)) == user
        assert (await store.user_for_api_key(await store.create_api_key(user.id, f"{text[:100]}{uuid.uuid4()}"))) == user

        spec = {"name": text, text[:100] or "k": [text], "nodes": [{"id": text[:50], "params": {"t": text}}]}
        flow = await store.save_flow(user.id, text, spec)
        got = await store.get_flow(flow.id)
        assert got.name == text and got.spec == spec

        session = text[:100] + str(uuid.uuid4())
        job = NewJob(job_id=f"{text[:50]}{uuid.uuid4()}", flow_id=flow.id, flow_version=1, user_id=user.id,
                     session_id=session, request={"input_value": text}, idempotency_key=text[:100] + str(i))
        created, _ = await store.create_job(job)
        assert created.request == {"input_value": text} and created.session_id == session
        again, was_new = await store.create_job(job.model_copy(update={"job_id": str(uuid.uuid4())}))
        assert not was_new and again.job_id == job.job_id

        await store.set_status(job.job_id, JobStatus.in_progress)
        request_id = f"{text[:100]}:{job.job_id}"
        await store.mark_suspended(job.job_id, pending(request_id, prompt=text))
        assert [j.job_id for j in await store.find_suspended(flow.id, user.id, session)] == [job.job_id]
        got_job = await store.get_job(job.job_id)
        assert got_job.pending.prompt == text and got_job.pending.request_id == request_id
        assert await store.claim_suspended_for_resume(job.job_id, request_id)

        assert await store.append_event(job.job_id, text or "e", {"text": text}) == 1
        event = (await store.read_events(job.job_id))[0]
        assert event.event == (text or "e") and event.data == {"text": text}

        await store.save_checkpoint(job.job_id, {"text": text, text[:100] or "k": text})
        assert (await store.load_latest_checkpoint(job.job_id)).data == {"text": text, text[:100] or "k": text}

        card = {"prompt": text, "options": [{"action_id": text[:50], "label": text}], "request_id": request_id}
        message = Message(id=str(uuid.uuid4()), session_id=session, job_id=job.job_id, sender="Machine",
                          sender_name=text[:100], text=text, kind="card", card=card, created_at=utcnow())
        await store.add_message(message)
        assert await store.stamp_card(request_id, text) == 1
        [stored] = await store.list_messages(session)
        assert stored.text == text and stored.card == {**card, "submitted_action": text}

        span = SpanRecord(trace_id=job.job_id, span_id=text[:100] or "s", name=text, start_time=utcnow(),
                          end_time=utcnow() + timedelta(seconds=1), inputs={"t": text}, outputs={"t": text},
                          attributes={text[:100] or "k": text}, flow_id=flow.id)
        await store.save_spans([span])
        assert await store.get_trace(job.job_id) == [span]

        key = f"{text[:100]}/{uuid.uuid4()}"
        await store.put_blob(key, text.encode())
        assert await store.get_blob(key) == text.encode()
        assert await store.delete_blobs(key) == 1


async def test_nul_inside_json_documents_round_trips(store: Store) -> None:
    job_id = await new_job(store)
    await store.append_event(job_id, "progress", {"text": "a\x00b"})
    assert (await store.read_events(job_id))[0].data == {"text": "a\x00b"}
