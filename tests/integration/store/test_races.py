"""Races that really race, on both backends: many store instances (separate connections) on one
database, and separate processes on one database (the API and the worker are separate
processes). Many coroutines on one store are part of the contract (tests/store_conformance.py),
on every backend."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from signoff.engine.audit.events import verify_chain
from signoff.engine.models import JobStatus, NewJob
from signoff.engine.store import Store, open_store
from tests.helpers import scaled
from tests.store_conformance import new_job, new_user, suspended_job, uid

REPO = Path(__file__).resolve().parents[3]
INSTANCES = 4


def _open(url: str) -> Store:
    return open_store(url, max_size=4) if url.startswith("postgresql") else open_store(url)


@pytest_asyncio.fixture
async def stores(db_url: str, store: Store) -> AsyncIterator[list[Store]]:
    """``store`` plus independent instances on the same database (own connections/threads)."""
    others = [_open(db_url) for _ in range(INSTANCES - 1)]
    for s in others:
        await s.setup()
    try:
        yield [store, *others]
    finally:
        for s in others:
            await s.close()


async def test_50_concurrent_appends_across_store_instances(stores: list[Store]) -> None:
    job_id = await new_job(stores[0])
    seqs = await asyncio.gather(
        *(stores[i % len(stores)].append_event(job_id, "progress", {"i": i}) for i in range(50))
    )
    assert sorted(seqs) == list(range(1, 51))
    assert [e.seq for e in await stores[1].read_events(job_id)] == list(range(1, 51))
    # each append chained to the one before it, whichever instance took the seq (docs/audit.md)
    chain = verify_chain(await stores[2].read_events(job_id), last_seq=await stores[3].last_event_seq(job_id))
    assert chain.ok and chain.checked == 50 and chain.unchained == 0, chain


async def test_20_concurrent_resume_claims_have_exactly_one_winner(stores: list[Store]) -> None:
    job_id, request_id = await suspended_job(stores[0])
    tokens = await asyncio.gather(
        *(stores[i % len(stores)].claim_suspended_for_resume(job_id, request_id) for i in range(20))
    )
    winners = [t for t in tokens if t is not None]
    assert len(winners) == 1
    job = await stores[0].get_job(job_id)
    assert job.status == JobStatus.in_progress and job.pending.request_id == request_id


async def test_token_claims_and_their_retries_have_exactly_one_winner(stores: list[Store]) -> None:
    job_id, request_id = await suspended_job(stores[0])
    # 10 claimants, each with its own token, each trying twice (a retried activity)
    calls = [(i, stores[(i + k) % len(stores)]) for i in range(10) for k in range(2)]
    results = await asyncio.gather(
        *(s.claim_suspended_for_resume(job_id, request_id, token=f"t{i}") for i, s in calls))
    winners = {r for r in results if r is not None}
    assert len(winners) == 1
    (token,) = winners
    assert results.count(token) == 2  # both attempts of the winner, and nobody else
    assert (await stores[0].get_job(job_id)).status == JobStatus.in_progress


async def test_concurrent_appends_with_one_dedupe_key_write_one_event(stores: list[Store]) -> None:
    job_id = await new_job(stores[0])
    keyed = [s.append_event(job_id, "human_input_decision", {}, dedupe_key="t:decision")
             for s in stores for _ in range(5)]
    plain = [s.append_event(job_id, "progress", {}) for s in stores for _ in range(5)]
    results = await asyncio.gather(*keyed, *plain)
    assert len(set(results[: len(keyed)])) == 1
    events = await stores[0].read_events(job_id)
    assert [e.seq for e in events] == list(range(1, len(plain) + 2))
    assert [e.event for e in events].count("human_input_decision") == 1


async def test_resume_claim_against_cancel_claim_never_both_win(stores: list[Store]) -> None:
    resumer, canceller = stores[1], stores[2]
    outcomes = {"resume": 0, "cancel": 0}
    n = scaled(200)
    for _ in range(n):
        job_id, request_id = await suspended_job(stores[0])
        token, cancelled = await asyncio.gather(
            resumer.claim_suspended_for_resume(job_id, request_id), canceller.claim_suspended_for_cancel(job_id)
        )
        assert (token is not None) != cancelled, "exactly one of the two claims must win"
        job = await stores[0].get_job(job_id)
        if token is not None:
            outcomes["resume"] += 1
            assert job.status == JobStatus.in_progress and job.pending is not None
        else:
            outcomes["cancel"] += 1
            assert job.status == JobStatus.cancelled and job.pending is None
    assert outcomes["resume"] + outcomes["cancel"] == n


async def test_concurrent_idempotency_collisions_make_one_job(stores: list[Store]) -> None:
    user = await new_user(stores[0])
    flow_id, key = uid("flow-"), uid("key-")
    results = await asyncio.gather(
        *(
            stores[i % len(stores)].create_job(
                NewJob(job_id=uid("job-"), flow_id=flow_id, flow_version=1, user_id=user.id, idempotency_key=key)
            )
            for i in range(20)
        )
    )
    assert sum(created for _, created in results) == 1
    assert len({job.job_id for job, _ in results}) == 1
    assert len(await stores[0].list_pending(user.id)) == 0
    assert (await stores[3].get_job(results[0][0].job_id)).idempotency_key == key


async def test_concurrent_get_or_create_user_makes_one_user(stores: list[Store]) -> None:
    name = uid("dev-")
    users = await asyncio.gather(*(stores[i % len(stores)].get_or_create_user(name) for i in range(12)))
    assert len({u.id for u in users}) == 1


async def test_votes_racing_a_stop_across_store_instances_never_come_after_it(stores: list[Store]) -> None:
    for _ in range(scaled(30)):
        job_id, request_id = await suspended_job(stores[0])
        votes = [stores[i % len(stores)].append_event_if_waiting(
            job_id, request_id, "human_input_vote", {"i": i}, dedupe_key=f"v:{i % 6}") for i in range(12)]
        stop = stores[3].claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"}))
        results = await asyncio.gather(*votes[:6], stop, *votes[6:])
        assert results.pop(6) is True
        events = await stores[1].read_events(job_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        cancel_seq = next(e.seq for e in events if e.event == "run_cancelled")
        recorded = {s for s in results if s is not None}
        assert all(s < cancel_seq for s in recorded)  # no vote after the stop
        assert len(events) == len(recorded) + 1  # each key once


async def test_votes_racing_a_resume_claim_across_store_instances(stores: list[Store]) -> None:
    for _ in range(20):
        job_id, request_id = await suspended_job(stores[0])
        votes = [stores[i % len(stores)].append_event_if_waiting(
            job_id, request_id, "human_input_vote", {"i": i}, dedupe_key=f"v:{i}") for i in range(8)]
        results = await asyncio.gather(*votes[:4], stores[2].claim_suspended_for_resume(job_id, request_id), *votes[4:])
        token = results.pop(4)
        assert token is not None
        recorded = [s for s in results if s is not None]
        # the votes that came after the claim wrote nothing; those before are all there
        assert [e.seq for e in await stores[3].read_events(job_id)] == sorted(recorded)


async def test_concurrent_create_group_across_store_instances_has_one_winner(stores: list[Store]) -> None:
    owner = await new_user(stores[0])
    results = await asyncio.gather(*(stores[i % len(stores)].create_group(owner.id, "finance") for i in range(12)),
                                   return_exceptions=True)
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(type(r).__name__ in ("Group", "StoreConflict") for r in results)


async def test_group_members_added_while_it_is_deleted_never_outlive_it(stores: list[Store]) -> None:
    owner = await new_user(stores[0])
    for round_ in range(20):
        name = f"g{round_}"
        await stores[0].create_group(owner.id, name)
        adds = [stores[i % len(stores)].add_group_members(owner.id, name, [f"u{i}"]) for i in range(8)]
        await asyncio.gather(*adds[:4], stores[3].delete_group(owner.id, name), *adds[4:])
        assert await stores[1].get_group(owner.id, name) is None
        assert (await stores[2].create_group(owner.id, name)).members == []
        assert (await stores[0].get_group(owner.id, name)).members == []


async def test_concurrent_approver_changes_across_store_instances(stores: list[Store]) -> None:
    job_id, request_id = await suspended_job(stores[0])
    sets = [[f"user:s{i}-{k}" for k in range(3)] for i in range(6)]
    await asyncio.gather(*(stores[i % len(stores)].set_request_approvers(job_id, request_id, refs)
                           for i, refs in enumerate(sets)))
    assert await stores[1].request_approvers(job_id, request_id) in sets  # one whole replacement won
    before = await stores[0].request_approvers(job_id, request_id)
    added = await asyncio.gather(*(stores[i % len(stores)].add_request_approvers(job_id, request_id, ["user:esc", f"user:e{i}"])
                                   for i in range(8)))
    final = await stores[2].request_approvers(job_id, request_id)
    assert final[:3] == before and sorted(final[3:]) == sorted(["user:esc", *(f"user:e{i}" for i in range(8))])
    assert all(set(a) <= set(final) for a in added)


# ---- separate processes -----------------------------------------------------------------------


async def _children(db_url: str, argv_list: list[list[str]]) -> list[list[str]]:
    """Start children, wait until every one is ready, release them together, collect their lines."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.integration.store._child", db_url, *argv,
            cwd=REPO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        for argv in argv_list
    ]
    for p in procs:
        assert (await asyncio.wait_for(p.stdout.readline(), 60)).strip() == b"ready"
    for p in procs:
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
    for p in procs:
        assert p.returncode == 0
    return [out.decode().split() for out, _ in outs]


async def test_appends_from_three_processes_are_gap_free(db_url: str, store: Store) -> None:
    job_id = await new_job(store)
    outs = await _children(db_url, [["append", job_id, "20"]] * 3)
    seqs = sorted(int(s) for out in outs for s in out)
    assert seqs == list(range(1, 61))
    assert [e.seq for e in await store.read_events(job_id)] == list(range(1, 61))
    chain = verify_chain(await store.read_events(job_id), last_seq=await store.last_event_seq(job_id))
    assert chain.ok and chain.checked == 60, chain


async def test_resume_claims_from_four_processes_have_one_winner(db_url: str, store: Store) -> None:
    job_id, request_id = await suspended_job(store)
    outs = await _children(db_url, [["claim", job_id, request_id]] * 4)
    assert sorted(line for out in outs for line in out) == ["lost", "lost", "lost", "won"]
    assert (await store.get_job(job_id)).status == JobStatus.in_progress


async def test_one_tail_hears_every_append_of_other_processes_and_instances_in_order(
        db_url: str, stores: list[Store]) -> None:
    """What the event feed relies on (service/feed.py): a tail in this process is told of every
    event other processes (SQLite: other connections of the file; PostgreSQL: NOTIFY) and other
    store instances append, each job's in seq order, each once."""
    from tests.store_conformance import Tail

    store = stores[0]
    job_id = await new_job(store)
    async with Tail(store, {job_id}) as tail:
        await _children(db_url, [["append", job_id, "20"]] * 3)
        await asyncio.gather(*(stores[1 + i % 3].append_event(job_id, "progress", {"i": i}) for i in range(15)))
        notes = await tail.until(75)
        await asyncio.sleep(0.3)
        assert tail.notes == notes  # nothing twice
    assert [seq for _, seq, _ in notes] == list(range(1, 76))


async def test_concurrent_webhook_creations_across_store_instances_never_pass_the_limit(stores: list[Store]) -> None:
    """The limit is counted with the owner's row locked: creations through separate connections
    at once (PostgreSQL's READ COMMITTED would let each count what was there before) stop at it."""
    for _ in range(5):
        owner = await new_user(stores[0])
        made = await asyncio.gather(*(stores[i % len(stores)].create_webhook(owner.id, f"https://x/{i}", ["*"], b"s",
                                                                               limit=3) for i in range(24)))
        assert sum(1 for h in made if h is not None) == 3
        assert len(await stores[0].list_webhooks(owner.id)) == 3
