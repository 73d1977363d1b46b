"""The event log's hash chain against someone who edits the database directly (docs/audit.md,
"The event log's hash chain"), on SQLite and PostgreSQL: a changed, removed, reordered or cut
event, or a stripped hash, is named by its seq; a run untouched verifies; a database from
before the chain keeps its events, reported as unchained, and chains what comes after."""

from __future__ import annotations

import pytest

from signoff.engine.audit.events import Break, event_sha256, verify_chain, verify_events
from signoff.engine.models import utcnow
from signoff.engine.store import Store, open_store
from signoff.engine.store.sql import schema
from tests.store_conformance import new_job


async def _run(store: Store, n: int = 6) -> str:
    job_id = await new_job(store)
    for i in range(1, n + 1):
        await store.append_event(job_id, "progress", {"i": i, "note": f"step {i}"})
    return job_id


async def _sql(store: Store, *statements: tuple[str, tuple]) -> None:
    """Statements run straight on the database, as someone with its file or its password would."""
    async with store._tx(write=True) as tx:  # type: ignore[attr-defined]
        for sql, params in statements:
            await tx.execute(sql, params)


async def _break(store: Store, job_id: str) -> Break | None:
    return verify_events(await store.read_events(job_id), last_seq=await store.last_event_seq(job_id))


async def test_a_run_untouched_verifies(store: Store) -> None:
    job_id = await _run(store)
    result = verify_chain(await store.read_events(job_id), last_seq=await store.last_event_seq(job_id))
    assert result.ok and result.checked == 6 and result.unchained == 0
    assert result.head == (await store.read_events(job_id))[-1].sha256


async def test_a_changed_event_is_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("UPDATE events SET data = ? WHERE job_id = ? AND seq = 3",
                       (store._enc_json({"i": 3, "note": "approved by nobody"}), job_id)))  # type: ignore[attr-defined]
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (3, "changed"), found
    assert "seq 3" in found.message


@pytest.mark.parametrize("column, value", [("event", "end"), ("created_at", None)])
async def test_a_changed_name_or_time_is_named(store: Store, column: str, value: str | None) -> None:
    job_id = await _run(store)
    if column == "created_at":
        first = (await store.read_events(job_id))[0].created_at
        value = store._enc_dt(first)  # type: ignore[attr-defined]  # seq 4 said to be as old as seq 1
    await _sql(store, (f"UPDATE events SET {column} = ? WHERE job_id = ? AND seq = 4", (value, job_id)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (4, "changed"), found


async def test_a_changed_event_rehashed_breaks_the_link_after_it(store: Store) -> None:
    """Whoever changes an event and hashes it again still leaves the next event's link."""
    job_id = await _run(store)
    third = (await store.read_events(job_id))[2]
    data = {"i": 3, "note": "forged"}
    forged = event_sha256(job_id, 3, third.event, data, third.created_at, third.prev_sha256)
    await _sql(store, ("UPDATE events SET data = ?, sha256 = ? WHERE job_id = ? AND seq = 3",
                       (store._enc_json(data), forged, job_id)))  # type: ignore[attr-defined]
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (4, "removed"), found
    assert "removed or replaced" in found.message


async def test_a_removed_event_is_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("DELETE FROM events WHERE job_id = ? AND seq = 3", (job_id,)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (3, "removed"), found
    assert "seq 3 missing" in found.message


async def test_a_removed_event_with_the_seqs_closed_up_is_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("DELETE FROM events WHERE job_id = ? AND seq = 3", (job_id,)),
               *((("UPDATE events SET seq = ? WHERE job_id = ? AND seq = ?", (s - 1, job_id, s)) for s in (4, 5, 6))),
               ("UPDATE job_event_seq SET last_seq = 5 WHERE job_id = ?", (job_id,)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (3, "removed"), found


async def test_the_last_events_cut_are_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("DELETE FROM events WHERE job_id = ? AND seq >= 5", (job_id,)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (5, "truncated"), found
    assert "seqs 5 to 6 missing" in found.message


async def test_reordered_events_are_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("UPDATE events SET seq = -1 WHERE job_id = ? AND seq = 3", (job_id,)),
               ("UPDATE events SET seq = 3 WHERE job_id = ? AND seq = 4", (job_id,)),
               ("UPDATE events SET seq = 4 WHERE job_id = ? AND seq = -1", (job_id,)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (3, "reordered"), found
    assert "now at seq 4" in found.message


async def test_a_stripped_hash_is_named(store: Store) -> None:
    job_id = await _run(store)
    await _sql(store, ("UPDATE events SET sha256 = NULL, prev_sha256 = NULL WHERE job_id = ? AND seq >= 4", (job_id,)))
    found = await _break(store, job_id)
    assert found is not None and (found.seq, found.kind) == (4, "unchained"), found


async def test_events_from_before_the_chain_are_reported_and_what_follows_chains(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 14 leaves the events already written without a hash (a migration cannot hash
    them on SQLite): verify counts them as before the chain; the first event after the upgrade
    chains to nothing, the next to it."""
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:-1])
    old = open_store(fresh_db_url)
    await old.setup()
    job_id = await new_job(old)
    async with old._tx(write=True) as tx:  # type: ignore[attr-defined]  # two events as signoff wrote them before
        await tx.execute("INSERT INTO job_event_seq (job_id, last_seq) VALUES (?, 2)", (job_id,))
        for seq in (1, 2):
            await tx.execute("INSERT INTO events (job_id, seq, event, data, created_at) VALUES (?, ?, ?, ?, ?)",
                             (job_id, seq, "progress", old._enc_json({"seq": seq}), old._enc_dt(utcnow())))
    await old.close()
    monkeypatch.undo()
    new = open_store(fresh_db_url)
    try:
        await new.setup()
        result = verify_chain(await new.read_events(job_id), last_seq=await new.last_event_seq(job_id))
        assert result.ok and (result.checked, result.unchained) == (0, 2)
        assert await new.append_event(job_id, "progress", {"seq": 3}) == 3
        assert await new.append_event(job_id, "progress", {"seq": 4}) == 4
        events = await new.read_events(job_id)
        assert [(e.sha256 is None, e.prev_sha256) for e in events[:3]] == [(True, None), (True, None), (False, None)]
        assert events[3].prev_sha256 == events[2].sha256
        result = verify_chain(events, last_seq=4)
        assert result.ok and (result.checked, result.unchained) == (2, 2)
    finally:
        await new.close()
