"""The Store contract for the oversight record (DESIGN §16, docs/audit.md): receipts written in
the same write as a decision's records, chained per run, written once, found by time and flow,
deleted with the run; the secret that is created once whoever races. Collected with
tests/store_conformance.py by tests/integration/store/test_conformance.py on memory, SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.engine.audit.receipts import ReceiptDraft, sha256_hex
from signoff.engine.models import JobStatus, utcnow
from signoff.engine.store import Store
from tests.store_conformance import new_job, new_user, pending, uid

KEY = Ed25519PrivateKey.generate()


def maker(job_id: str, request_id: str, key: str, action_id: str = "approve", *, flow_id: str = "flow", at=None):
    draft = ReceiptDraft.of(job_id=job_id, flow_id=flow_id, flow_version=1, pending=pending(request_id), key=key,
                            action_id=action_id, values={"reason": "fine"}, decided_by={"id": "u", "name": "u"},
                            authority="owner", via="api", at=(at or utcnow()).isoformat())
    return partial(draft.signed, key_id="k1", private=KEY)


async def _suspended(store: Store, flow_id: str | None = None) -> tuple[str, str]:
    job_id = await new_job(store, **({"flow_id": flow_id} if flow_id else {}))
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    assert await store.mark_suspended(job_id, pending(request_id))
    return job_id, request_id


async def _decide(store: Store, job_id: str, request_id: str, token: str, **kw) -> list[int] | None:
    assert await store.claim_suspended_for_resume(job_id, request_id, token=token) == token
    return await store.record_decision(job_id, [("human_input_decision", {}, f"{token}:decision")], token=token,
                                       request_id=request_id, action_id="approve", participants=[],
                                       receipt=maker(job_id, request_id, f"{token}:decision", **kw))


async def test_receipts_are_written_with_the_decision_chained_and_once(store: Store) -> None:
    job_id, request_id = await _suspended(store)
    assert await store.read_receipts(job_id) == []
    # a vote while the request waits: its receipt with its event; the same vote again writes nothing
    vote = maker(job_id, request_id, f"vote:{request_id}:d")
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {}, dedupe_key=f"vote:{request_id}:d",
                                               receipt=vote) == 1
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {}, dedupe_key=f"vote:{request_id}:d",
                                               receipt=vote) == 1
    assert await _decide(store, job_id, request_id, "t1") == [2]
    # the same attempt again (a retried activity): nothing written, no second receipt
    assert await store.record_decision(job_id, [("human_input_decision", {}, "t1:decision")], token="t1",
                                       request_id=request_id, action_id="approve", participants=[],
                                       receipt=maker(job_id, request_id, "t1:decision")) is None
    assert await store.mark_suspended(job_id, pending("gate2"))
    assert await _decide(store, job_id, "gate2", "t2") == [3]
    found = await store.read_receipts(job_id)
    assert [r.seq for r in found] == [1, 2, 3]
    assert [r.body["request_id"] for r in found] == [request_id, request_id, "gate2"]
    assert found[0].body["prev_sha256"] is None
    for before, after in zip(found, found[1:]):  # each names the one before it
        assert after.body["prev_sha256"] == before.sha256 == sha256_hex(before.body)
    assert len({r.receipt_id for r in found}) == 3 and all(r.job_id == job_id for r in found)
    assert [r.seq for r in await store.read_receipts(job_id, after_seq=1, limit=1)] == [2]
    # another run's chain is its own
    other, other_request = await _suspended(store)
    assert await _decide(store, other, other_request, "t1") == [1]
    assert (await store.read_receipts(other))[0].body["prev_sha256"] is None


async def test_no_receipt_without_the_decisions_records(store: Store) -> None:
    """A claim that is no longer the caller's (a stop), a vote on a request that no longer waits:
    nothing written, no receipt either."""
    job_id, request_id = await _suspended(store)
    assert await store.claim_suspended_for_resume(job_id, request_id, token="t1") == "t1"
    assert await store.set_status(job_id, JobStatus.cancelled, event=("run_cancelled", {}))
    assert await store.record_decision(job_id, [("human_input_decision", {}, "t1:decision")], token="t1",
                                       request_id=request_id, action_id="approve", participants=[],
                                       receipt=maker(job_id, request_id, "t1:decision")) is None
    assert await store.append_event_if_waiting(job_id, request_id, "human_input_vote", {}, dedupe_key="v",
                                               receipt=maker(job_id, request_id, "v")) is None
    assert await store.read_receipts(job_id) == []


async def test_concurrent_votes_keep_one_chain(store: Store) -> None:
    job_id, request_id = await _suspended(store)
    await asyncio.gather(*[
        store.append_event_if_waiting(job_id, request_id, "human_input_vote", {}, dedupe_key=f"vote:{i}",
                                      receipt=maker(job_id, request_id, f"vote:{i}")) for i in range(6)])
    found = await store.read_receipts(job_id)
    assert [r.seq for r in found] == [1, 2, 3, 4, 5, 6]
    assert [r.body["prev_sha256"] for r in found] == [None, *[r.sha256 for r in found[:-1]]]


async def test_list_receipts_by_time_and_flow_a_page_at_a_time(store: Store) -> None:
    flow_a, flow_b = uid("flow-"), uid("flow-")
    base = utcnow().replace(microsecond=0) + timedelta(days=3650 + int(uid()[:4], 16))  # a window of this test alone
    made = []
    for i, flow_id in enumerate([flow_a, flow_b, flow_a, flow_a]):
        job_id, request_id = await _suspended(store, flow_id)
        assert await _decide(store, job_id, request_id, "t", flow_id=flow_id, at=base + timedelta(minutes=i))
        made.append(job_id)
    every = await store.list_receipts(since=base, until=base + timedelta(hours=1))
    assert [r.job_id for r in every] == made
    assert [r.job_id for r in await store.list_receipts(since=base, flow_id=flow_a)] == [made[0], made[2], made[3]]
    assert [r.job_id for r in await store.list_receipts(since=base + timedelta(minutes=1),
                                                        until=base + timedelta(minutes=3))] == made[1:3]
    page1 = await store.list_receipts(since=base, limit=3)
    last = page1[-1]
    page2 = await store.list_receipts(since=base, after=(last.at, last.job_id, last.seq), limit=3)
    assert [r.job_id for r in page1 + page2] == made
    assert page1[0].at == base and page1[0].flow_id == flow_a and page1[0].body["at"] == base.isoformat()


async def test_delete_run_deletes_its_receipts(store: Store) -> None:
    job_id, request_id = await _suspended(store)
    assert await _decide(store, job_id, request_id, "t1")
    kept, kept_request = await _suspended(store)
    assert await _decide(store, kept, kept_request, "t1")
    assert await store.set_status(job_id, JobStatus.completed, result={})
    assert await store.delete_run(job_id)
    assert await store.read_receipts(job_id) == []
    assert len(await store.read_receipts(kept)) == 1


async def test_create_secret_keeps_the_first_whoever_races(store: Store) -> None:
    owner = (await new_user(store)).id
    made = await asyncio.gather(*[store.create_secret(owner, "k", f"v{i}".encode()) for i in range(8)])
    assert len({m.ciphertext for m in made}) == 1
    assert (await store.get_secret(owner, "k")).ciphertext == made[0].ciphertext
    again = await store.create_secret(owner, "k", b"other")
    assert again.ciphertext == made[0].ciphertext and again.created_at == made[0].created_at
