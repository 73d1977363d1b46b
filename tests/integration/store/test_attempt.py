"""The decision attempt (engine/attempt.py) on every store, without Temporal: applied once and
recorded in one write; run again under its token (a retried activity, a lost task's twin running
beside it) it finds its own record instead of applying twice; a rival token gets nothing; a stop
that ends the job after the claim leaves the decision not applied and nothing recorded.

Each runs both ways: the caller's job carried (``carried``: the activity's read of it; the claim
then rides in the decision's one write) and not (the claim first, its own write)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from signoff.engine.attempt import Attempted, DecisionAttempt, attempt_decision
from signoff.engine.graph import Graph
from signoff.engine.lifecycle import RunEnd, end_run
from signoff.engine.models import Decision, JobStatus, utcnow
from signoff.engine.runner import InProcessRunner
from signoff.engine.store import Store
from signoff.engine.store.base import DecisionReads
from signoff.engine.store.counters import tallying
from tests.helpers import CountingStore, gate_flow
from tests.store_conformance import new_job


async def paused_run(store: Store) -> tuple[str, str, object]:
    """A job paused at its gate, as the worker leaves one: the checkpoint and the pending request."""
    job_id = await new_job(store)
    outcome = await InProcessRunner(store, store).start(gate_flow(), run_id=job_id, job_id=job_id)
    assert outcome.status == "paused" and outcome.pending is not None
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.mark_suspended(job_id, outcome.pending)
    return job_id, outcome.pending.request_id, outcome.state


@pytest.fixture(params=["carried", "claim_first"])
def carried(request) -> bool:
    return request.param == "carried"


async def attempt(store: Store, job_id: str, request_id: str, state, token: str, action: str = "approve", *,
                  carried: bool = False, job=None) -> Attempted:
    async def paused_state(job):
        return state, Graph.from_spec(state.flow)

    if carried and job is None:
        job = await store.get_job(job_id)
    return await attempt_decision(store, DecisionAttempt(job_id, request_id, token, Decision(action_id=action),
                                                         utcnow(), sent={"via": "test"}), paused_state,
                                  job=job if carried else None)


async def decisions(store: Store, job_id: str) -> list:
    return await store.read_events_named(job_id, "human_input_decision")


async def test_an_attempt_applies_once_and_its_rerun_goes_on_from_its_record(any_store: Store, carried: bool) -> None:
    job_id, request_id, state = await paused_run(any_store)
    first = await attempt(any_store, job_id, request_id, state, "t1", carried=carried)
    assert first.outcome == "applied" and first.applied.action_id == "approve"
    assert [name for name, _ in first.written] == ["human_input_decision"]
    assert first.state.pending is None and first.job.status == JobStatus.in_progress
    again = await attempt(any_store, job_id, request_id, state, "t1", action="reject",
                          carried=carried)  # the same token once more
    assert again.outcome == "recorded" and again.claim.recorded["decision"].data["action_id"] == "approve"
    rival = await attempt(any_store, job_id, request_id, state, "t2", carried=carried)
    assert rival.outcome == "not_claimed"
    (decided,) = await decisions(any_store, job_id)
    assert decided.data["action_id"] == "approve" and decided.data["via"] == "test"
    assert (await any_store.get_job(job_id)).pending is None


async def test_twin_attempts_under_one_token_apply_one_decision(any_store: Store, carried: bool) -> None:
    """A lost workflow task's local activity still running beside the one that runs it again:
    both win the token's claim, both apply; one record is written, the other finds it."""
    for _ in range(5):
        job_id, request_id, state = await paused_run(any_store)
        outcomes = await asyncio.gather(*(attempt(any_store, job_id, request_id, state, "t", carried=carried)
                                          for _ in range(2)))
        assert sorted(o.outcome for o in outcomes) == ["applied", "recorded"], outcomes
        assert len(await decisions(any_store, job_id)) == 1


async def test_tokens_racing_apply_one_decision(any_store: Store, carried: bool) -> None:
    job_id, request_id, state = await paused_run(any_store)
    outcomes = await asyncio.gather(*(attempt(any_store, job_id, request_id, state, f"t{i}", carried=carried)
                                      for i in range(6)))
    assert sorted(o.outcome for o in outcomes) == ["applied"] + ["not_claimed"] * 5
    assert len(await decisions(any_store, job_id)) == 1


async def test_a_stop_after_the_claim_leaves_the_decision_not_applied(any_store: Store, carried: bool) -> None:
    job_id, request_id, state = await paused_run(any_store)
    assert (await any_store.claim_decision(job_id, request_id, "t1")).won  # the attempt's claim ...
    assert (await end_run(any_store, job_id, RunEnd(JobStatus.cancelled))).won  # ... then a stop ends the job
    out = await attempt(any_store, job_id, request_id, state, "t1", carried=carried)  # goes on under its claim
    assert out.outcome == "not_applied" and out.job.status == JobStatus.cancelled
    assert await decisions(any_store, job_id) == []


async def test_a_carried_job_costs_one_commit_for_the_claim_and_the_decision(any_store: Store) -> None:
    """Issue 33: the job the activity read, still waiting for the request, is claimed in the
    decision's own write: one transaction for the claim and every record (two without it)."""
    job_id, request_id, state = await paused_run(any_store)
    job = await any_store.get_job(job_id)
    with tallying() as sent:  # this test's own calls (the parallel suite's other work counts elsewhere)
        out = await attempt(any_store, job_id, request_id, state, "t1", carried=True, job=job)
    assert out.outcome == "applied" and out.job.status == JobStatus.in_progress
    if getattr(any_store, "dialect", ""):  # the SQL stores count their transactions
        assert sent["commit"] == 1
    stored = await any_store.get_job(job_id)
    assert stored.status == JobStatus.in_progress and stored.pending is None
    assert (await any_store.claim_decision(job_id, request_id, "t1", claim=False)).won  # the claim is the token's


async def test_a_carried_job_that_moved_on_gets_nothing_applied(any_store: Store) -> None:
    """What the caller read is checked in the claim's WHERE: a stop, or another decision, that got
    in after the read leaves this attempt not claimed, nothing written by it."""
    job_id, request_id, state = await paused_run(any_store)
    read = await any_store.get_job(job_id)
    assert (await end_run(any_store, job_id, RunEnd(JobStatus.cancelled), from_suspended=True)).won  # a stop
    out = await attempt(any_store, job_id, request_id, state, "t1", carried=True, job=read)
    assert out.outcome == "not_claimed" and out.job.status == JobStatus.cancelled
    assert await decisions(any_store, job_id) == []
    other, other_request, other_state = await paused_run(any_store)
    read = await any_store.get_job(other)
    assert (await attempt(any_store, other, other_request, other_state, "t2", carried=True)).outcome == "applied"
    late = await attempt(any_store, other, other_request, other_state, "t3", action="reject", carried=True, job=read)
    assert late.outcome == "not_claimed"
    (decided,) = await decisions(any_store, other)
    assert decided.data["action_id"] == "approve"


class _Keys:
    """A signing key of the test's own (the secret store's keys have their own tests)."""

    def __init__(self) -> None:
        from datetime import datetime, timezone

        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from signoff.engine.audit.keys import SigningKey

        private = Ed25519PrivateKey.generate()
        self.key = SigningKey(n=1, key_id="k1", private=private, public_raw=b"", created_at=datetime.now(timezone.utc))

    async def signing(self):
        return self.key




@pytest.mark.parametrize("signed", [False, True], ids=["no_receipt", "receipt"])
@pytest.mark.parametrize("reading", [False, True], ids=["no_reads", "reads"])
async def test_a_carried_decision_is_one_store_call_and_one_commit(any_store: Store, signed: bool,
                                                                   reading: bool) -> None:
    """Issue 33's count, exact for this task (engine/store/counters.py: tallying): a decision whose
    job and decider the caller carries (the API's check, engine/carried.py: the job as the API read
    it, its row's stamp checked in the claim's WHERE) and whose paused state it holds (the
    workflow's copy) is ONE store call, record_decision (the claim, the records, the access check
    and the receipt in one transaction): one commit, no read connection. Its receipt (issue 32) costs
    one statement more than none on SQLite, the INSERT, and none on PostgreSQL, where the INSERT
    rides in the UPDATE that clears the request (a WITH): no round trip of its own (the run's
    last receipt comes back from the lock's UPDATE and goes on the row with the UPDATE that
    clears the request). What its deliveries need
    (``reads``: the webhooks of the people its events go to, the run's notifications) is read in
    the same transaction: two statements more, no store call or connection of their own."""
    job_id, request_id, state = await paused_run(any_store)
    job = await any_store.get_job(job_id)
    counting = CountingStore(any_store)

    async def paused_state(_job):
        return state, Graph.from_spec(state.flow)

    hook = await any_store.create_webhook(job.user_id, "https://example.invalid/h", ["human_input_decision"], b"s")
    await any_store.create_webhook(job.user_id, "https://example.invalid/other", ["human_input_required"], b"s")
    told = await any_store.log_notification(job_id=job_id, request_id=request_id, seq=1, event="human_input_required",
                                            channel="email", user_id=job.user_id, attempt=1, delivered=True, error=None)
    reads = DecisionReads(owners=[job.user_id], notifications=500) if reading else None
    with tallying() as sent:
        out = await attempt_decision(counting, DecisionAttempt(  # type: ignore[arg-type]
            job_id, request_id, "t1", Decision(action_id="approve"), utcnow(), job.user_id, sent={"via": "test"},
            access_since=(job.user_id, utcnow()), reads=reads, stamp=job.updated_at), paused_state,
            _Keys() if signed else None, job=job)
    assert out.outcome == "applied"
    assert counting.calls == ["record_decision"]
    if reading:  # read with the decision: every webhook of the owner (filtered by event by the caller)
        assert reads.webhooks is not None and hook.id in {h.id for h in reads.webhooks} and len(reads.webhooks) == 2
        assert [n.id for n in reads.told] == [told.id]
    if getattr(any_store, "dialect", ""):  # the SQL stores count what they send
        # the access check, the claim, the lock, the event's append (its seq, dedupe, chain, insert
        # and size; PostgreSQL's NOTIFY), the card, the request cleared; + the receipt's INSERT
        # (SQLite's; PostgreSQL's is in the UPDATE that clears the request)
        base = {"sqlite": 9, "postgres": 10}[any_store.dialect]
        receipt = {"sqlite": 1, "postgres": 0}[any_store.dialect] if signed else 0
        assert sent == {"commit": 1, "read": 0, "statements": base + receipt + (2 if reading else 0)}, sent
    if signed:
        (receipt,) = await any_store.read_receipts(job_id)
        assert receipt.seq == 1 and receipt.body["prev_sha256"] is None and receipt.body["authority"] == "owner"


async def test_a_carried_check_made_before_an_access_change_writes_nothing(any_store: Store) -> None:
    """The API checked the decider, then (before the worker's decision) their access changed: a
    group membership removed writes an access note, and the decision's transaction carrying that
    check refuses (AccessChanged), nothing claimed or written; the run still waits. A check made
    after the change goes through."""
    from signoff.engine.store.base import AccessChanged

    job_id, request_id, state = await paused_run(any_store)
    job = await any_store.get_job(job_id)
    owner = job.user_id
    approver = (await any_store.create_user(f"approver-{uuid.uuid4().hex[:8]}")).id
    await any_store.create_group(owner, "ops")
    await any_store.add_group_members(owner, "ops", [approver])
    checked_at = utcnow()  # the API's check: a member then
    await any_store.remove_group_members(owner, "ops", [approver])

    async def paused_state(_job):
        return state, Graph.from_spec(state.flow)

    def decided(since):
        return DecisionAttempt(job_id, request_id, "t1", Decision(action_id="approve"), utcnow(), approver,
                               sent={"via": "test"}, authority="group:ops", access_since=(approver, since))

    with pytest.raises(AccessChanged):
        await attempt_decision(any_store, decided(checked_at), paused_state, job=job)
    after = await any_store.get_job(job_id)
    assert after.status == JobStatus.suspended and after.pending is not None and after.pending.request_id == request_id
    assert await decisions(any_store, job_id) == []
    # another person's access note is not theirs; a check after the change holds
    out = await attempt_decision(any_store, decided(utcnow()), paused_state, job=after)
    assert out.outcome == "applied" and len(await decisions(any_store, job_id)) == 1


async def test_the_reads_of_a_decision_not_written_are_not_made(any_store: Store) -> None:
    """Store.record_decision's ``reads`` are filled only with a decision it wrote: a decision that
    lost to another one leaves them unread (the caller reads nothing for deliveries it has none of)."""
    job_id, request_id, state = await paused_run(any_store)
    job = await any_store.get_job(job_id)
    assert (await attempt(any_store, job_id, request_id, state, "first", carried=True, job=job)).outcome == "applied"

    async def paused_state(_job):
        return state, Graph.from_spec(state.flow)
    reads = DecisionReads(owners=[job.user_id], notifications=500)
    out = await attempt_decision(any_store, DecisionAttempt(job_id, request_id, "second", Decision(action_id="reject"),
                                                            utcnow(), reads=reads), paused_state, job=job)
    assert out.outcome == "not_claimed"
    assert reads.webhooks is None and reads.told is None


async def test_a_carried_job_whose_row_changed_since_is_claimed_first(any_store: Store) -> None:
    """A job carried from an earlier read with its stamp (the API's, engine/carried.py) that still
    waits for the request but whose row changed since (another attempt's claim, let go of): the
    one write is refused, and the attempt claims first on the job as it is now, then records; one
    decision, applied."""
    job_id, request_id, state = await paused_run(any_store)
    read = await any_store.get_job(job_id)
    assert (await any_store.claim_decision(job_id, request_id, "t0")).won
    assert await any_store.rollback_resume_claim(job_id, "t0")
    counting = CountingStore(any_store)

    async def paused_state(_job):
        return state, Graph.from_spec(state.flow)

    out = await attempt_decision(counting, DecisionAttempt(  # type: ignore[arg-type]
        job_id, request_id, "t1", Decision(action_id="approve"), utcnow(), read.user_id, sent={"via": "test"},
        stamp=read.updated_at), paused_state, job=read)
    assert out.outcome == "applied" and out.job.status == JobStatus.in_progress
    assert counting.calls == ["record_decision", "claim_decision", "claim_decision", "record_decision"]
    (decided,) = await decisions(any_store, job_id)
    assert decided.data["action_id"] == "approve"
    assert (await any_store.get_job(job_id)).pending is None
