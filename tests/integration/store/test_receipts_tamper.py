"""The oversight record against its own database (DESIGN §16, docs/audit.md), on SQLite and
PostgreSQL: receipts signed with keys made in the secret store (one key whoever makes it first,
a rotation keeps the old ones), then the database edited behind signoff's back: a changed row, a
removed receipt, two swapped, one signed by an unknown key. ``signoff audit verify``'s check
(commands/audit.py: check_receipts) names the receipt each one broke."""

from __future__ import annotations

import asyncio
from functools import partial

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.commands.audit import check_receipts
from signoff.engine.audit.keys import ReceiptKeys
from signoff.engine.audit.receipts import ReceiptDraft, public_keys
from signoff.engine.models import utcnow
from signoff.engine.secrets import SecretBox
from signoff.engine.settings import Settings
from signoff.engine.store import Store
from tests.store_conformance import pending, suspended_job

# the test session's deployment key (tests/conftest.py): the session's PostgreSQL database holds the
# keys other tests' workers made, sealed with it, as replicas of one deployment share it
BOX = SecretBox.for_settings(Settings())


def _keys(store: Store) -> ReceiptKeys:
    return ReceiptKeys(store, Settings(audit_key_cache_seconds=0), box=BOX)


async def _votes(store: Store, keys: ReceiptKeys, n: int) -> str:
    """A run with ``n`` receipts (votes), each signed by the key that signs now."""
    job_id, request_id = await suspended_job(store)
    for i in range(n):
        signing = await keys.signing()
        draft = ReceiptDraft.of(job_id=job_id, flow_id="f", flow_version=1, pending=pending(request_id),
                                key=f"vote:{i}", action_id="approve", values={"i": i},
                                decided_by={"id": f"u{i}", "name": f"u{i}"}, authority="approver", via="api",
                                at=utcnow().isoformat())
        assert await store.append_event_if_waiting(
            job_id, request_id, "human_input_vote", {}, dedupe_key=f"vote:{i}",
            receipt=partial(draft.signed, key_id=signing.key_id, private=signing.private))
    return job_id


async def _check(store: Store, keys: ReceiptKeys, job_id: str):
    found = [{**r.body, "seq": r.seq} for r in await store.read_receipts(job_id)]
    return check_receipts(found, public_keys(await keys.public_keys()), whole_run=True)


async def _sql(store: Store, sql: str, *params) -> None:
    async with store._tx(write=True) as tx:  # type: ignore[attr-defined]
        await tx.execute(sql, params)


async def test_one_key_whoever_makes_it_and_a_rotation_keeps_the_old(store: Store):
    made = await asyncio.gather(*[_keys(store).signing() for _ in range(6)])  # six workers at once
    assert len({k.key_id for k in made}) == 1
    keys = _keys(store)
    job_id = await _votes(store, keys, 2)
    old = (await keys.signing()).key_id
    new = (await keys.rotate()).key_id
    assert new != old and (await _keys(store).signing()).key_id == new
    assert [k["key_id"] for k in await keys.public_keys()] == [old, new]
    job2 = await _votes(store, keys, 1)
    assert (await store.read_receipts(job2))[0].body["key_id"] == new
    assert await _check(store, keys, job_id) is None and await _check(store, keys, job2) is None


async def test_verify_names_the_receipt_an_edit_of_the_database_broke(store: Store):
    keys = _keys(store)
    # a changed row: a value edited in the stored receipt
    job_id = await _votes(store, keys, 3)
    assert await _check(store, keys, job_id) is None
    second = (await store.read_receipts(job_id))[1]
    await _sql(store, "UPDATE receipts SET body = ? WHERE receipt_id = ?",
               store._enc_json({**second.body, "values": {"i": 99}}), second.receipt_id)  # type: ignore[attr-defined]
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == second.receipt_id and "signature" in broken.problem

    # a removed receipt: the next one's link breaks; the first removed: the new first names one
    job_id = await _votes(store, keys, 3)
    rows = await store.read_receipts(job_id)
    await _sql(store, "DELETE FROM receipts WHERE receipt_id = ?", rows[1].receipt_id)
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == rows[2].receipt_id and "prev_sha256" in broken.problem
    await _sql(store, "DELETE FROM receipts WHERE receipt_id = ?", rows[0].receipt_id)
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == rows[2].receipt_id and "first receipt" in broken.problem

    # two reordered (their places swapped)
    job_id = await _votes(store, keys, 3)
    rows = await store.read_receipts(job_id)
    await _sql(store, "UPDATE receipts SET seq = -1 WHERE receipt_id = ?", rows[0].receipt_id)
    await _sql(store, "UPDATE receipts SET seq = 1 WHERE receipt_id = ?", rows[1].receipt_id)
    await _sql(store, "UPDATE receipts SET seq = 2 WHERE receipt_id = ?", rows[0].receipt_id)
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == rows[1].receipt_id

    # signed again by a key signoff never made (a forger's), its key id in place
    job_id = await _votes(store, keys, 2)
    last = (await store.read_receipts(job_id))[1]
    forger = Ed25519PrivateKey.generate()
    forged = ReceiptDraft({k: v for k, v in last.body.items() if k not in ("prev_sha256", "key_id", "signature")})
    body = forged.signed(last.body["prev_sha256"], key_id="0123456789abcdef", private=forger).receipt
    await _sql(store, "UPDATE receipts SET body = ? WHERE receipt_id = ?", store._enc_json(body),  # type: ignore[attr-defined]
               last.receipt_id)
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == last.receipt_id and "unknown key" in broken.problem


async def test_a_decision_attempt_run_again_writes_one_receipt(store: Store):
    """engine/attempt.py with the keys: the receipt with the decision; the same attempt again
    (a retried activity) and twins racing under one token leave exactly one."""
    import asyncio as _asyncio

    from signoff.engine.attempt import DecisionAttempt, attempt_decision
    from signoff.engine.graph import Graph
    from signoff.engine.models import Decision
    from tests.integration.store.test_attempt import paused_run

    keys = _keys(store)
    job_id, request_id, state = await paused_run(store)

    async def paused_state(job):
        return state, Graph.from_spec(state.flow)

    def attempt():
        return attempt_decision(store, DecisionAttempt(job_id, request_id, "t1", Decision(action_id="approve"),
                                                       utcnow(), "u1", sent={"via": "api"}, decider_name="Ann",
                                                       authority="approver"), paused_state, keys)

    outcomes = await _asyncio.gather(attempt(), attempt())
    assert sorted(o.outcome for o in outcomes) == ["applied", "recorded"]
    assert (await attempt()).outcome == "recorded"
    [receipt] = [r.body for r in await store.read_receipts(job_id)]
    assert receipt["decided_by"] == {"id": "u1", "name": "Ann"} and receipt["authority"] == "approver"
    assert receipt["via"] == "api" and receipt["action_id"] == "approve"
    assert await _check(store, keys, job_id) is None


async def test_receipts_stored_before_the_canonical_body_still_verify(store: Store):
    """Until issue 32 the store kept a receipt as its json.dumps wrote it (", " and ": ", the
    fields in the draft's order); now it keeps the canonical JSON it signed and hashed. A run
    whose first receipts are stored the old way, with new ones chained after them, verifies
    whole; the new rows' text is the canonical JSON; and an old row changed is still caught."""
    from signoff.engine.audit.canonical import canonical

    keys = _keys(store)
    job_id, request_id = await suspended_job(store)
    signing = await keys.signing()

    def draft(i: int) -> ReceiptDraft:
        return ReceiptDraft.of(job_id=job_id, flow_id="f", flow_version=1, pending=pending(request_id),
                               key=f"vote:{i}", action_id="approve", values={"i": i, "note": "é"},
                               decided_by={"id": f"u{i}", "name": f"u{i}"}, authority="approver", via="api",
                               at=utcnow().isoformat())

    prev = None
    for seq in (1, 2):  # as the store wrote them before: the fields encoded again by _enc_json
        receipt, sha, _ = draft(seq).signed(prev, signing.key_id, signing.private)
        await _sql(store, "INSERT INTO receipts (job_id, seq, receipt_id, flow_id, at, sha256, body) "
                          "VALUES (?, ?, ?, 'f', ?, ?, ?)", job_id, seq, receipt["receipt_id"],
                   store._enc_dt(utcnow()), sha, store._enc_json(receipt))  # type: ignore[attr-defined]
        prev = sha
    await _sql(store, "UPDATE jobs SET receipt_seq = 2, receipt_sha256 = ? WHERE job_id = ?", prev, job_id)
    for seq in (3, 4):  # then through the store, as now
        assert await store.append_event_if_waiting(
            job_id, request_id, "human_input_vote", {}, dedupe_key=f"vote:{seq}",
            receipt=partial(draft(seq).signed, key_id=signing.key_id, private=signing.private))
    async with store._tx(write=False) as tx:  # type: ignore[attr-defined]
        rows = await tx.fetchall("SELECT seq, CAST(body AS TEXT) AS text FROM receipts WHERE job_id = ? ORDER BY seq",
                                 (job_id,))
    found = await store.read_receipts(job_id)
    assert [r["seq"] for r in rows] == [r.seq for r in found] == [1, 2, 3, 4]
    for row, record in zip(rows, found):
        is_canonical = row["text"].encode("utf-8") == canonical(record.body)
        assert is_canonical == (row["seq"] > 2), row  # the old rows are not, the new ones are
    assert found[2].body["prev_sha256"] == found[1].sha256
    assert await _check(store, keys, job_id) is None
    # an old row changed behind signoff's back: caught as any other
    await _sql(store, "UPDATE receipts SET body = ? WHERE job_id = ? AND seq = 1",
               store._enc_json({**found[0].body, "values": {"i": 9}}), job_id)  # type: ignore[attr-defined]
    broken = await _check(store, keys, job_id)
    assert broken is not None and broken.receipt_id == found[0].receipt_id and "signature" in broken.problem
