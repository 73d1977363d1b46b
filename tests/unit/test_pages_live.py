"""The inbox's live updates: one watcher per process reads a person's inbox when the store's
event log says something concerns them (once, however many of their inboxes are open), and
hands it to every stream of theirs; nothing is read while nothing happens (api/pages/live.py,
service/feed.py). The store is the in-memory one: its tail is the same contract as SQLite's and
PostgreSQL's (tests/store_conformance.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from signoff.api import sse
from signoff.api.pages import live
from signoff.engine.access import Access
from signoff.engine.store.memory import MemoryStore
from signoff.service.backend import poll_job
from signoff.service.feed import EventFeed, TooManyStreams

from tests.store_conformance import new_job


class FakeService:
    """inbox_entries counted; what waits is empty (the diffing is the browser tests' business)."""

    def __init__(self, **feed: Any) -> None:
        self.store = MemoryStore()
        self.access = Access(self.store)
        self.feed = EventFeed(self.store, **feed)
        self.calls: dict[str, int] = {}

    async def inbox_entries(self, user: Any) -> list[Any]:
        self.calls[user.id] = self.calls.get(user.id, 0) + 1
        return []


def event(chunk: bytes) -> tuple[str, dict[str, Any]]:
    head, data = chunk.decode().strip().split("\n")
    return head.removeprefix("event: "), json.loads(data.removeprefix("data: "))


async def render(item: Any) -> str:
    return ""


def inbox(watcher: live.InboxWatcher, who: Any, keepalive: float | None = None, **kw: Any):
    """An inbox stream; with ``keepalive``, as sse_response sends it (a keep-alive that often)."""
    stream = live.inbox_stream(watcher, who, flow=None, session=None, kind=None, add_rows=True, render_row=render, **kw)
    return sse.keepalive(stream, keepalive) if keepalive else stream


async def settle(watcher: live.InboxWatcher, reads: int) -> None:
    """Until the watcher has done ``reads`` reads (a woken watcher reads at once)."""
    async def done() -> None:
        while watcher.reads < reads:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(done(), 5)
    await asyncio.sleep(0.05)  # and no more


async def test_a_person_is_read_once_per_event_that_concerns_them_however_many_inboxes() -> None:
    service = FakeService()
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    alice, bob = await service.store.create_user("alice"), await service.store.create_user("bob")
    streams = [inbox(watcher, who, keepalive=0.05) for who in (alice, alice, alice, bob, bob)]
    for s in streams:
        assert event(await s.__anext__()) == ("snapshot", {"ids": [], "count": 0, "total": 0})
    assert watcher.streams == 5 and service.calls == {alice.id: 3, bob.id: 2}  # each stream's own first read
    reads = watcher.reads
    await asyncio.sleep(0.3)
    assert watcher.reads == reads  # nothing happens: nothing is read
    assert await streams[0].__anext__() == sse.KEEPALIVE

    job_id = await new_job(service.store, alice.id)
    await service.store.append_event(job_id, "human_input_required", {})  # alice's run paused
    await settle(watcher, reads + 1)
    assert service.calls == {alice.id: 4, bob.id: 2}  # alice once for her three inboxes, bob not at all
    await service.store.append_event(job_id, "progress", {})  # an event no inbox shows: no read
    await asyncio.sleep(0.1)
    assert watcher.reads == reads + 1

    for s in streams:
        await s.aclose()
    assert watcher.streams == 0 and watcher._task is None  # no open inbox, no watcher
    await service.feed.close()


async def test_an_approver_is_read_when_a_run_that_names_them_pauses() -> None:
    from signoff.engine.models import JobStatus
    from tests.store_conformance import pending

    service = FakeService()
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    alice, carol = await service.store.create_user("alice"), await service.store.create_user("carol")
    stream = inbox(watcher, carol)
    await stream.__anext__()
    reads = watcher.reads
    job_id = await new_job(service.store, alice.id)
    assert await service.store.set_status(job_id, JobStatus.in_progress)
    assert await service.store.mark_suspended(job_id, pending(f"gate:{job_id}", approver_refs=[f"user:{carol.id}"]),
                                              event=("human_input_required", {}))
    await settle(watcher, reads + 1)  # carol's inbox, though the run is alice's
    assert service.calls[carol.id] == 2
    await stream.aclose()
    await service.feed.close()


async def test_an_approver_an_escalation_added_is_read_when_it_happens() -> None:
    """The approvers of a request are those stored now (engine.access.current_approvers), not
    only those it paused with: the person an escalation adds sees it come into their open inbox
    (the watcher asked only the pause's own approvers, so that inbox waited for the safety read)."""
    from signoff.engine.models import JobStatus
    from tests.store_conformance import pending

    service = FakeService()
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    alice, dave = await service.store.create_user("alice"), await service.store.create_user("dave")
    job_id = await new_job(service.store, alice.id)
    assert await service.store.set_status(job_id, JobStatus.in_progress)
    assert await service.store.mark_suspended(job_id, pending(f"gate:{job_id}", escalate_to=["dave"],
                                                              escalate_after_seconds=60))
    stream = inbox(watcher, dave)
    await stream.__anext__()
    reads = watcher.reads
    await service.store.add_request_approvers(job_id, f"gate:{job_id}", [f"user:{dave.id}"])
    await service.store.append_event(job_id, "human_input_escalated", {"request_id": f"gate:{job_id}"})
    await settle(watcher, reads + 1)  # dave's inbox, though the pause named nobody
    assert service.calls[dave.id] == 2
    await stream.aclose()
    await service.feed.close()


async def test_every_open_inbox_is_read_after_the_safety_time_or_when_the_tail_may_have_missed_events() -> None:
    service = FakeService()
    watcher = live.InboxWatcher(service, safety=0.1)  # type: ignore[arg-type]
    alice, bob = SimpleNamespace(id="alice", groups=[]), SimpleNamespace(id="bob", groups=[])
    streams = [inbox(watcher, alice), inbox(watcher, bob)]
    for s in streams:
        await s.__anext__()
    await asyncio.sleep(0.55)
    assert service.calls["alice"] >= 4 and service.calls["bob"] >= 4  # a read each 0.1 s, for each person
    for s in streams:
        await s.aclose()
    await service.feed.close()


async def test_inboxes_opened_at_once_share_one_read() -> None:
    service = FakeService()
    gate = asyncio.Event()
    plain = service.inbox_entries

    async def slow(user: Any) -> list[Any]:
        await gate.wait()
        return await plain(user)

    service.inbox_entries = slow  # type: ignore[method-assign]
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    alice = SimpleNamespace(id="alice")
    streams = [inbox(watcher, alice) for _ in range(20)]
    firsts = [asyncio.ensure_future(s.__anext__()) for s in streams]
    await asyncio.sleep(0.05)
    firsts[0].cancel()  # one page closes while the read is under way: the others still get it
    gate.set()
    got = await asyncio.gather(*firsts[1:])
    assert all(event(chunk)[0] == "snapshot" for chunk in got)
    assert service.calls == {"alice": 1}
    for s in streams:
        await s.aclose()
    await service.feed.close()


async def test_a_person_holds_at_most_max_streams_and_a_closed_one_gives_its_place_back() -> None:
    service = FakeService(max_per_user=2)
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    alice = SimpleNamespace(id="alice")
    one, two = inbox(watcher, alice), inbox(watcher, alice)
    await one.__anext__()
    await two.__anext__()
    with pytest.raises(TooManyStreams):
        service.feed.check("alice")
    job_id = await new_job(service.store)
    with pytest.raises(TooManyStreams):
        async with service.feed.follow(job_id, user_id="alice"):
            pass
    async with service.feed.follow(job_id, user_id="bob"):  # someone else is not held back
        pass
    await one.aclose()
    async with service.feed.follow(job_id, user_id="alice"):
        assert service.feed.streams_of("alice") == 2
    await two.aclose()
    assert service.feed.streams_of("alice") == 0
    await service.feed.close()


async def test_a_burst_of_requests_cannot_all_pass_the_check_before_their_streams_open() -> None:
    """Each answer checks before it streams, and its stream opens later: the checks hold places
    at once, so 5 requests at once for 3 places give 3 streams and 2 refusals."""
    feed = EventFeed(MemoryStore(), max_per_user=3)
    passed = 0
    for _ in range(5):
        try:
            feed.check("alice")
            passed += 1
        except TooManyStreams:
            pass
    assert passed == 3
    job_id = await new_job(feed.store)
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):  # the three streams take the places held for them
            await stack.enter_async_context(feed.follow(job_id, user_id="alice"))
        assert feed.streams_of("alice") == 3
        with pytest.raises(TooManyStreams):
            feed.check("alice")
    feed.check("alice")  # closed: places again (a held one the client never took is let go...)
    feed.hold_seconds = 0.05
    await asyncio.sleep(0.1)  # ... after hold_seconds)
    for _ in range(3):
        feed.check("alice")
    await feed.close()


async def test_a_sync_wait_is_one_of_the_persons_streams_and_with_none_left_answers_at_once() -> None:
    feed = EventFeed(MemoryStore(), max_per_user=1)
    job_id = await new_job(feed.store)
    never = lambda job: False  # noqa: E731
    waiting = asyncio.create_task(poll_job(feed.store, job_id, 30, never, feed=feed, user_id="alice"))
    await asyncio.sleep(0.1)
    assert feed.streams_of("alice") == 1 and not waiting.done()
    job = await asyncio.wait_for(poll_job(feed.store, job_id, 30, never, feed=feed, user_id="alice"), 2)
    assert job.job_id == job_id  # no place left: the job as it is, no wait
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert feed.streams_of("alice") == 0
    await feed.close()


async def test_one_tail_serves_every_follower_and_wakes_only_the_followers_of_the_job() -> None:
    service = FakeService(linger=0.05)
    feed, store = service.feed, service.store
    a, b = await new_job(store), await new_job(store)
    async with feed.follow(a) as fa1, feed.follow(a) as fa2, feed.follow(b) as fb, feed.follow(None) as every:
        assert feed.tails == 1
        await store.append_event(a, "x", {})
        assert await fa1.wait(2) and await fa2.wait(2) and await every.wait(2)
        assert not await fb.wait(0.1)
        notes, missed = every.take()
        assert [(n.job_id, n.seq, n.event) for n in notes] == [(a, 1, "x")] and not missed
    await asyncio.sleep(0.15)
    assert feed._task is None  # the last follower left: the tail stops after its linger
    async with feed.follow(a) as fa:
        assert feed.tails == 2
        await store.append_event(a, "y", {})
        assert await fa.wait(2)
    await feed.close()


async def test_a_tail_that_fails_is_started_again_and_every_follower_reads_again() -> None:
    service = FakeService()
    feed, store = service.feed, service.store
    job_id = await new_job(store)
    real = store.tail_events
    failures = 1

    async def failing():
        nonlocal failures
        if failures:
            failures -= 1
            yield []
            raise ConnectionError("the database went away")
        async for batch in real():
            yield batch

    store.tail_events = failing  # type: ignore[method-assign]
    async with feed.follow(job_id) as follower:
        assert await follower.wait(5)  # woken when the new tail is in place: what came between is unknown
        assert follower.take() == ([], True) and feed.tails == 2
        await store.append_event(job_id, "x", {})
        assert await follower.wait(2)
    await feed.close()


def test_a_follower_of_every_job_not_taking_its_notes_keeps_a_bounded_number_and_says_it_missed() -> None:
    from signoff.engine.models import EventNote
    from signoff.service.feed import Follower

    follower = Follower(None)
    follower.keep = 3
    follower.tell([EventNote("a", 1, "x"), EventNote("b", 1, "x")])
    assert follower.take() == ([EventNote("a", 1, "x"), EventNote("b", 1, "x")], False)
    for n in range(5):
        follower.tell([EventNote("c", n + 1, "x")])
    notes, missed = follower.take()
    assert missed and len(notes) <= 3  # the watcher reads every open inbox instead


async def test_an_inbox_stream_sends_the_page_s_rows_never_the_waiting_set() -> None:
    """At 10,000 waiting the first snapshot was every id (~0.5 MB): now it names only the rows the
    page said it shows, with the counts; a request leaving that the page does not show sends a
    count, not a ``remove``; one it shows sends its ``remove``."""
    from datetime import datetime, timedelta, timezone

    from signoff.engine.models import InboxEntry

    service = FakeService()
    alice = await service.store.create_user("alice")
    job_id = await new_job(service.store, alice.id)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    everything = [InboxEntry(job_id=f"job-{i}", request_id=f"req-{i}", paused_at=t0 - timedelta(seconds=i),
                             flow_id="f", session_id=None, kind="node_input") for i in range(10_000)]
    service.inbox_entries = lambda user: asyncio.sleep(0, result=list(everything))  # type: ignore[method-assign]
    watcher = live.InboxWatcher(service, safety=60)  # type: ignore[arg-type]
    stream = inbox(watcher, alice, shown_ids=["req-0", "req-1", "req-gone"], since=t0 + timedelta(seconds=1))
    first = await stream.__anext__()
    assert event(first) == ("snapshot", {"ids": ["req-0", "req-1"], "count": 10_000, "total": 10_000})
    assert len(first) < 200

    everything[:] = [e for e in everything if e.request_id not in ("req-1", "req-500")]  # one shown, one not
    await service.store.append_event(job_id, "human_input_decision", {})  # wakes alice's inbox
    got = [event(await asyncio.wait_for(stream.__anext__(), 5)) for _ in range(2)]
    assert got == [("remove", {"id": "req-1", "why": "Gone"}), ("count", {"count": 9_998, "total": 9_998})]
    await stream.aclose()
    await service.feed.close()
