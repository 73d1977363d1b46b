"""setup() on the SQL backends: explicit, idempotent, concurrent-safe, records the schema
version, and upgrades a database made by an older version without losing data. The tests that
change the schema get their own empty database."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from datetime import timedelta

from signoff.engine.models import JobStatus, SpanRecord, utcnow
from signoff.engine.store import Store, StoreError, open_store
from signoff.engine.store.sql import schema
from tests.store_conformance import new_job, new_user


# What migration 9 adds that today's write methods need (its usage table, and the size and
# charge of rows a delete gives back). The tests of older schemas write their rows with today's
# methods; they have these for the writes and lose them again before the upgrade, which then
# finds the database as that older signoff left it (without any count).
_LATER_COLUMNS = [("flow_versions", "size"), ("checkpoints", "size"), ("checkpoints", "charged_to"),
                  ("spans", "size"), ("spans", "charged_to"), ("blobs", "size"), ("blobs", "charged_to"),
                  # and migration 11's (the inbox's columns, written by mark_suspended)
                  ("jobs", "paused_at"), ("jobs", "pending_kind"), ("jobs", "pending_names"),
                  # and migration 14's (the event log's hash chain, written by every append)
                  ("events", "sha256"), ("events", "prev_sha256")]
_KINDS = {"charged_to": "TEXT", "pending_kind": "TEXT", "paused_at": "{ts}", "sha256": "TEXT", "prev_sha256": "TEXT"}


@contextlib.asynccontextmanager
async def writing_today(store: Store):
    async with store._tx(write=True) as tx:  # type: ignore[attr-defined]
        await tx.execute("CREATE TABLE user_storage (user_id TEXT NOT NULL, shard INTEGER NOT NULL, "
                         "bytes BIGINT NOT NULL, PRIMARY KEY (user_id, shard))")
        for table, column in _LATER_COLUMNS:
            kind = _KINDS.get(column, "BIGINT NOT NULL DEFAULT 0").format(**store.ddl_types)  # type: ignore[attr-defined]
            await tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    yield
    async with store._tx(write=True) as tx:  # type: ignore[attr-defined]
        await tx.execute("DROP TABLE user_storage")
        for table, column in _LATER_COLUMNS:
            await tx.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


async def test_setup_twice_is_safe_and_records_the_version(store: Store) -> None:
    await store.setup()
    await store.setup()
    assert await store.schema_version() == len(schema.MIGRATIONS)
    await store.ping()


async def test_nothing_migrates_until_setup_and_concurrent_setups_apply_once(fresh_db_url: str) -> None:
    stores = [open_store(fresh_db_url) for _ in range(3)]
    try:
        assert await stores[0].schema_version() == 0
        await asyncio.gather(*(s.setup() for s in stores))
        await stores[1].setup()
        assert await stores[2].schema_version() == len(schema.MIGRATIONS)
    finally:
        for s in stores:
            await s.close()


async def test_setup_upgrades_an_older_database_and_keeps_its_rows(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = open_store(fresh_db_url)
    await old.setup()
    job_id = await new_job(old)
    await old.close()

    # a later signoff ships migration 2
    monkeypatch.setattr(
        schema, "MIGRATIONS", [*schema.MIGRATIONS, ["ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"]]
    )
    new = open_store(fresh_db_url)
    try:
        await new.setup()
        await new.setup()
        assert await new.schema_version() == len(schema.MIGRATIONS)
        job = await new.get_job(job_id)
        assert job is not None and job.status == JobStatus.queued
        assert await new.set_status(job_id, JobStatus.in_progress)
    finally:
        await new.close()


async def test_a_database_newer_than_the_code_refuses_to_open(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, ["CREATE TABLE future_feature (id TEXT PRIMARY KEY)"]])
    newer = open_store(fresh_db_url)
    await newer.setup()
    await newer.close()
    monkeypatch.undo()

    older = open_store(fresh_db_url)
    try:
        with pytest.raises(StoreError, match="upgrade signoff"):
            await older.setup()
    finally:
        await older.close()


async def test_schema_1_database_gains_event_dedupe_keeping_its_events(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
    old = open_store(fresh_db_url)
    await old.setup()
    async with writing_today(old):
        job_id = await new_job(old)
    async with old._tx(write=True) as tx:  # an event as schema 1 wrote it (no dedupe_key column)
        await tx.execute("INSERT INTO job_event_seq (job_id, last_seq) VALUES (?, 1)", (job_id,))
        await tx.execute("INSERT INTO events (job_id, seq, event, data, created_at) VALUES (?, 1, ?, ?, ?)",
                         (job_id, "human_input_required", old._enc_json({}), old._enc_dt(utcnow())))
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        assert await new.schema_version() == len(schema.MIGRATIONS) >= 2
        assert await new.append_event(job_id, "human_input_decision", {}, dedupe_key="k") == 2
        assert await new.append_event(job_id, "human_input_decision", {}, dedupe_key="k") == 2
        assert [e.event for e in await new.read_events(job_id)] == ["human_input_required", "human_input_decision"]
    finally:
        await new.close()


async def _indexes(store: Store) -> set[str]:
    sql = ("SELECT name FROM sqlite_master WHERE type = 'index'" if store.dialect == "sqlite"  # type: ignore[attr-defined]
           else "SELECT indexname AS name FROM pg_indexes WHERE schemaname = 'public'")
    async with store._tx(write=False) as tx:  # type: ignore[attr-defined]
        return {r["name"] for r in await tx.fetchall(sql)}


async def test_schema_4_database_gains_secrets_and_the_new_indexes_keeping_its_rows(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
    old = open_store(fresh_db_url)
    await old.setup()
    assert await old.schema_version() == 4
    async with writing_today(old):
        user, guest = await new_user(old), await new_user(old)
        key = await old.create_api_key(user.id)
        flow = await old.save_flow(user.id, "Refund", {"nodes": []})
        await old.grant_share(flow.id, guest.id, ["execute"])
        job_id = await new_job(old, user.id, flow_id=flow.id)
        # a job that ended (made ended: this code's set_status also clears schema 6's approver rows)
        await new_job(old, user.id, flow_id=flow.id, status=JobStatus.completed)
        t0 = utcnow()
        await old.save_spans([SpanRecord(trace_id=job_id, span_id="root", name="run", start_time=t0,
                                         end_time=t0 + timedelta(seconds=1), status="ok", run_id=job_id,
                                         flow_id=flow.id)])
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        await new.setup()
        assert await new.schema_version() == len(schema.MIGRATIONS) >= 5
        assert {"jobs_flow_status", "spans_run"} <= await _indexes(new)
        # the rows written by schema 4 are served by the new methods
        assert [j.job_id for j in await new.list_active_jobs(flow.id)] == [job_id]
        assert [j.job_id for j in await new.list_user_active_jobs(user.id)] == [job_id]
        assert [t["trace_id"] for t in await new.list_traces(user_id=user.id)] == [job_id]
        assert (await new.put_secret(user.id, "token", b"\x00c")).ciphertext == b"\x00c"
        assert [s.name for s in await new.list_secrets(user.id)] == ["token"]
        assert await new.delete_user(user.id)
        assert await new.user_for_api_key(key) is None and not await new.has_permission(flow.id, guest.id)
        assert await new.get_secret(user.id, "token") is None
        assert (await new.get_job(job_id)).status == JobStatus.queued
    finally:
        await new.close()


async def test_schema_5_database_gains_groups_approvers_and_webhooks_keeping_its_rows(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.store_conformance import pending

    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:5])
    old = open_store(fresh_db_url)
    await old.setup()
    assert await old.schema_version() == 5
    async with writing_today(old):
        owner, approver = await new_user(old), await new_user(old)
        job_id = await new_job(old, owner.id)
        assert await old.set_status(job_id, JobStatus.in_progress)
        assert await old.mark_suspended(job_id, pending("gate"), event=("human_input_required", {"request_id": "gate"}))
        await old.put_secret(owner.id, "token", b"c")
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        await new.setup()
        assert await new.schema_version() == len(schema.MIGRATIONS) >= 6
        assert {"group_members_user", "request_approvers_user", "request_approvers_group", "webhooks_owner",
                "webhook_deliveries_hook"} <= await _indexes(new)
        # a job suspended under schema 5 gets approvers and votes
        await new.create_group(owner.id, "finance")
        await new.add_group_members(owner.id, "finance", [approver.id])
        await new.set_request_approvers(job_id, "gate", [f"group:{owner.id}/finance"])
        assert [j.job_id for j in await new.list_assigned_pending(approver.id)] == [job_id]
        assert await new.append_event_if_waiting(job_id, "gate", "human_input_vote", {}, dedupe_key="v") == 2
        hook = await new.create_webhook(owner.id, "https://x", ["*"], b"s")
        await new.log_delivery(hook.id, event="human_input_vote", job_id=job_id, seq=2, attempt=1, status_code=200,
                               error=None, delivered=True)
        assert [d.seq for d in await new.list_deliveries(hook.id)] == [2]
        assert (await new.get_secret(owner.id, "token")).ciphertext == b"c"
        assert await new.delete_user(owner.id)
        assert await new.list_groups(owner.id) == [] and await new.get_webhook(hook.id) is None
        assert (await new.get_job(job_id)).status == JobStatus.suspended  # jobs are the caller's
    finally:
        await new.close()


async def test_schema_6_database_learns_who_took_part_from_the_events_of_its_runs(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 7 records who voted on or decided each run; the runs decided before it are read
    from their events, so an approver's history and sight of them survive the upgrade."""
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:6])
    old = open_store(fresh_db_url)
    await old.setup()
    async with writing_today(old):
        owner, voter, decider, bystander = [await new_user(old) for _ in range(4)]
        voted, decided = await new_job(old, owner.id), await new_job(old, owner.id)
        await old.append_event(voted, "human_input_vote", {"request_id": "gate", "user": voter.id, "action_id": "approve"})
        await old.append_event(voted, "human_input_vote", {"request_id": "gate", "user": voter.id, "action_id": "approve"},
                               dedupe_key="again")  # twice: one row
        await old.append_event(decided, "human_input_decision", {"request_id": "gate", "action_id": "approve",
                                                                 "decided_by": decider.id})
        await old.append_event(decided, "human_input_decision", {"request_id": "later", "decided_by": None})  # the clock
        # what earlier versions recorded as a Temporal caller sent it: no user's id, or far too long
        await old.append_event(voted, "human_input_decision", {"request_id": "x", "decided_by": "nobody-" + "z" * 9000})
        await old.append_event(voted, "human_input_vote", {"request_id": "x", "user": {"not": "an id"}})
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        assert await new.took_part(voted, voter.id) and await new.took_part(decided, decider.id)
        assert not await new.took_part(voted, decider.id) and not await new.took_part(decided, bystander.id)
        assert not await new.took_part(voted, "nobody-" + "z" * 9000)  # only users' ids are taken
        assert [j.job_id for j in await new.participated_jobs(voter.id)] == [voted]
        assert [j.job_id for j in await new.participated_jobs(decider.id)] == [decided]
    finally:
        await new.close()


async def test_schema_8_database_counts_each_users_stored_bytes_once(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 9 counts what a database already holds, per user, as the live writes count it
    (Store.stored_bytes), and records each deletable row's size and user so deletes give back.
    The rows are written as a schema-8 signoff wrote them (its statements, not today's code)."""
    from tests.store_conformance import octets_of, uid

    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:8])
    old = open_store(fresh_db_url)
    await old.setup()
    alice, bob = await new_user(old), await new_user(old)
    spec = {"name": "été", "pad": "€" * 50}
    request, result, data = {"input_value": "ü" * 20}, {"text": "done ✓"}, {"out": "x" * 100}
    card, checkpoint = {"prompt": "Approve?", "request_id": "r"}, {"outputs": {"a": "é" * 30}}
    inputs, outputs, attributes = {"q": "a"}, {"answer": "ö" * 40}, {"k": "v"}
    flow_id, job_id, bobs_job = uid("flow-"), uid("job-"), uid("job-")
    now = old._enc_dt(utcnow())
    enc = old._enc_json
    async with old._tx(write=True) as tx:
        await tx.execute("INSERT INTO flows (id, owner_id, name, spec, version, created_at, updated_at) "
                         "VALUES (?, ?, ?, ?, 2, ?, ?)", (flow_id, alice.id, "f", enc(spec), now, now))
        for version in (1, 2):
            await tx.execute("INSERT INTO flow_versions (flow_id, version, name, spec, created_at) VALUES (?, ?, ?, ?, ?)",
                             (flow_id, version, "f", enc(spec), now))
        for jid, owner in ((job_id, alice.id), (bobs_job, bob.id)):
            await tx.execute("INSERT INTO jobs (job_id, flow_id, flow_version, user_id, status, request, result, run_id, "
                             "created_at, updated_at) VALUES (?, ?, 1, ?, 'completed', ?, ?, ?, ?, ?)",
                             (jid, flow_id, owner, enc(request), enc(result), jid, now, now))
        await tx.execute("INSERT INTO events (job_id, seq, event, data, created_at) VALUES (?, 1, 'e', ?, ?)",
                         (job_id, enc(data), now))
        await tx.execute("INSERT INTO job_event_seq (job_id, last_seq) VALUES (?, 1)", (job_id,))
        await tx.execute("INSERT INTO messages (id, session_id, job_id, sender, sender_name, text, kind, card, created_at) "
                         "VALUES (?, 's', ?, 'Machine', 'gate', ?, 'card', ?, ?)", (uid(), job_id, "ok ✓", enc(card), now))
        await tx.execute("INSERT INTO checkpoints (id, run_id, job_id, data, created_at) VALUES (?, ?, NULL, ?, ?)",
                         (uid(), job_id, enc(checkpoint), now))
        await tx.execute("INSERT INTO spans (trace_id, span_id, name, type, start_time, status, inputs, outputs, "
                         "attributes, run_id) VALUES (?, 'root', 'run', 'flow', ?, 'ok', ?, ?, ?, ?)",
                         (job_id, now, enc(inputs), enc(outputs), enc(attributes), job_id))
        for key, size in ((f"runs/{job_id}/out/1", 3000), (f"runs/{bobs_job}/out/1", 50), ("pages/x/session", 70)):
            await tx.execute("INSERT INTO blobs (key, data, created_at) VALUES (?, ?, ?)", (key, b"b" * size, now))
    await old.close()
    monkeypatch.undo()

    runs = octets_of(request) + octets_of(result)
    alices = (2 * octets_of(spec) + runs + octets_of(data) + len("ok ✓".encode()) + octets_of(card)
              + octets_of(checkpoint) + octets_of(inputs) + octets_of(outputs) + octets_of(attributes) + 3000)
    new = open_store(fresh_db_url)
    try:
        await new.setup()
        assert await new.stored_bytes(alice.id) == alices
        assert await new.stored_bytes(bob.id) == runs + 50
        # the counted rows give back what they counted
        assert await new.delete_blobs(f"runs/{job_id}/") == 1
        assert await new.delete_checkpoints(job_id) == 1
        assert await new.delete_flow(flow_id)
        assert await new.stored_bytes(alice.id) == alices - 3000 - octets_of(checkpoint) - 2 * octets_of(spec)
        await new.append_event(job_id, "later", data)  # and the live count goes on from there
        assert await new.stored_bytes(alice.id) == alices - 3000 - octets_of(checkpoint) - 2 * octets_of(spec) + \
            octets_of(data)
    finally:
        await new.close()


async def test_schema_10_database_lists_its_waiting_requests_in_the_paged_inbox(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 11 gives each request that waits its inbox columns (its pause time from when it
    was marked suspended, its kind, whether it names approvers) read from the row a schema-10
    signoff wrote, so the paged inbox lists what waited before the upgrade, as it did."""
    from tests.store_conformance import pending, uid

    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:10])
    old = open_store(fresh_db_url)
    await old.setup()
    me, approver = await new_user(old), await new_user(old)
    flow_id = uid("flow-")
    rows = []  # (job id, status, pending, updated_at): the oldest first
    for i, (status, request) in enumerate((
            ("suspended", pending("gate:a")),
            ("suspended", pending("gate:b", kind="tool_approval")),
            ("suspended", pending("gate:c", approvers=["someone"], approver_refs=[f"user:{approver.id}"])),
            ("completed", None))):
        rows.append((uid("job-"), status, request, old._enc_dt(utcnow() - timedelta(minutes=10 - i))))
    async with old._tx(write=True) as tx:
        for job_id, status, request, at in rows:
            body = old._enc_json(request.model_dump(mode="json")) if request else None
            await tx.execute("INSERT INTO jobs (job_id, flow_id, flow_version, user_id, status, request, pending, "
                             "pending_request_id, run_id, created_at, updated_at) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (job_id, flow_id, me.id, status, old._enc_json({}), body,
                              request.request_id if request else None, job_id, at, at))
        await tx.execute("INSERT INTO request_approvers (job_id, request_id, ref, user_id) VALUES (?, ?, ?, ?)",
                         (rows[2][0], "gate:c", f"user:{approver.id}", approver.id))
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        a, b, c = rows[0][0], rows[1][0], rows[2][0]
        assert [j.job_id for j in await new.inbox(me.id)] == [b, a]  # newest first; c names an approver
        assert [j.job_id for j in await new.inbox(me.id, kind="tool_approval")] == [b]
        assert [j.job_id for j in await new.inbox(approver.id)] == [c]
        assert await new.inbox_count(me.id) == 2 and await new.inbox_flows(me.id) == [flow_id]
        # a request that pauses after the upgrade goes on top
        d = await new_job(new, me.id, flow_id=flow_id)
        assert await new.set_status(d, JobStatus.in_progress)
        assert await new.mark_suspended(d, pending(f"gate:{d}"))
        assert [j.job_id for j in await new.inbox(me.id, limit=2)] == [d, b]
    finally:
        await new.close()


async def test_schema_15_database_chains_new_receipts_after_its_runs_last(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 17 keeps a run's last receipt on its job row (issue 32's cost: the claim reads it
    there): a run with receipts written by a schema-15 signoff gets its last one's seq and hash, so
    the next receipt chains after it; a run without any starts at the first."""
    from functools import partial

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.engine.audit.receipts import ReceiptDraft, check_chain
    from tests.store_conformance import pending, uid

    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:15])
    old = open_store(fresh_db_url)
    await old.setup()
    me = await new_user(old)
    with_two, without = uid("job-"), uid("job-")
    key, request = Ed25519PrivateKey.generate(), pending("gate:a")

    def draft(job_id: str, n: int) -> ReceiptDraft:
        return ReceiptDraft.of(job_id=job_id, flow_id="f", flow_version=1, pending=request, key=f"k{n}",
                               action_id="approve", values=None, decided_by={"id": me.id, "name": me.name},
                               authority="owner", via=None, at=utcnow().isoformat())

    prev = None
    async with old._tx(write=True) as tx:
        for job_id in (with_two, without):
            at = old._enc_dt(utcnow())
            await tx.execute("INSERT INTO jobs (job_id, flow_id, flow_version, user_id, status, request, pending, "
                             "pending_request_id, run_id, created_at, updated_at) VALUES (?, 'f', 1, ?, 'suspended', "
                             "?, ?, 'gate:a', ?, ?, ?)", (job_id, me.id, old._enc_json({}),
                                                          old._enc_json(request.model_dump(mode="json")), job_id, at, at))
        for seq in (1, 2):  # two receipts of with_two, chained, as schema 15 wrote them
            receipt, sha, _ = draft(with_two, seq).signed(prev, "kid", key)
            await tx.execute("INSERT INTO receipts (job_id, seq, receipt_id, flow_id, at, sha256, body) "
                             "VALUES (?, ?, ?, 'f', ?, ?, ?)", (with_two, seq, receipt["receipt_id"],
                                                               old._enc_dt(utcnow()), sha, old._enc_json(receipt)))
            prev = sha
    await old.close()
    monkeypatch.undo()

    new = open_store(fresh_db_url)
    try:
        await new.setup()
        for job_id, count in ((with_two, 3), (without, 1)):
            maker = partial(draft(job_id, 3).signed, key_id="kid", private=key)
            assert await new.append_event_if_waiting(job_id, "gate:a", "human_input_vote", {"n": 3},
                                                     dedupe_key="vote:3", receipt=maker) is not None
            got = await new.read_receipts(job_id)
            assert [r.seq for r in got] == list(range(1, count + 1))
            assert check_chain([r.body for r in got]) is None  # the new one names the last one's hash
    finally:
        await new.close()
