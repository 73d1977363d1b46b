"""FairGate (engine/fairgate.py): at most `slots` at once, and a freed slot goes to the waiting user
who held the gate least lately (ties in turn), not to whoever queued first; a cancelled waiter
leaves its line."""

from __future__ import annotations

import asyncio

import pytest

from signoff.engine.fairgate import FairGate, acting_for, current_user


class Clock:
    """The gate's clock, moved by the test alone."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


async def test_freed_slots_go_to_the_users_in_turn_not_first_come(clock):
    """Users who held the gate alike (here: no time at all) take it in turns."""
    gate = FairGate(1, clock=clock)
    order: list[str] = []
    release = asyncio.Event()

    async def run(user: str, tag: str, hold: asyncio.Event | None = None) -> None:
        async with gate.hold(user):
            order.append(tag)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(run("big", "big-0", release))
    await asyncio.sleep(0)
    assert gate.busy == 1
    tasks = [asyncio.create_task(run("big", f"big-{i}")) for i in range(1, 6)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(run("small", f"small-{i}")) for i in range(2)]
    await asyncio.sleep(0)
    assert gate.waiting == 7 and gate.busy == 1
    release.set()
    await asyncio.gather(first, *tasks)
    # one of each user while both wait, big having just had its turn (first come: small-0 after big-5)
    assert order == ["big-0", "small-0", "big-1", "small-1", "big-2", "big-3", "big-4", "big-5"]
    assert gate.busy == 0 and gate.waiting == 0


async def test_a_user_who_held_it_little_goes_before_those_who_hold_it_all_the_time(clock):
    """A person deciding now and then waits for the hold in progress, not for a turn of each user
    who keeps the gate busy (round robin would give small-1 the 7th place here)."""
    gate = FairGate(1, clock=clock)
    order: list[str] = []

    async def run(user: str, tag: str, seconds: float, hold: asyncio.Event | None = None) -> None:
        async with gate.hold(user):
            order.append(tag)
            if hold is not None:
                await hold.wait()
            clock.now += seconds

    for i in range(3):  # a, b and c have held it for 1 s, 2 s, 3 s lately
        for user in "abc":
            await run(user, "warm", 1.0 if user >= "abc"[i] else 0.0)
    order.clear()
    release = asyncio.Event()
    tasks = [asyncio.create_task(run(u, f"{u}-{i}", 0.5, release if (u, i) == ("a", 0) else None))
             for i in range(3) for u in "abc"]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(run("small", f"small-{i}", 0.01)) for i in range(2)]
    await asyncio.sleep(0)
    assert gate.waiting == 10
    release.set()
    await asyncio.gather(*tasks)
    assert order[:3] == ["a-0", "small-0", "small-1"]  # a-0 took the free slot; then the least used
    assert order[3:6] == ["a-1", "b-0", "a-2"]  # a (1 s + 0.5) before b (2 s), b before c (3 s)
    assert sorted(order) == sorted(f"{u}-{i}" for i in range(3) for u in "abc") + ["small-0", "small-1"]


def test_the_time_held_counts_half_after_each_half_life(clock):
    gate = FairGate(1, half_life=10.0, clock=clock)
    gate._charge("u", clock.now - 4.0)  # held 4 s, just now
    assert gate.used("u") == pytest.approx(4.0)
    clock.now += 20.0
    assert gate.used("u") == pytest.approx(1.0)
    assert gate.used("nobody") == 0.0


def test_the_users_long_gone_are_forgotten(clock):
    gate = FairGate(1, half_life=1.0, clock=clock)
    for i in range(1000):
        gate._charge(f"old{i}", clock.now - 0.001)
    clock.now += 60.0  # every one's time has halved 60 times
    for i in range(100):
        gate._charge(f"new{i}", clock.now - 1.0)
    assert len(gate._used) == 100 and all(gate.used(f"new{i}") == pytest.approx(1.0) for i in range(100))


async def test_at_most_slots_hold_at_once_and_a_cancelled_waiter_leaves_its_line():
    gate = FairGate(2)
    inside = 0
    most = 0
    go = asyncio.Event()

    async def run(user: str) -> None:
        nonlocal inside, most
        async with gate.hold(user):
            inside += 1
            most = max(most, inside)
            await go.wait()
            inside -= 1

    tasks = [asyncio.create_task(run(f"u{i % 3}")) for i in range(9)]
    await asyncio.sleep(0)
    assert gate.busy == 2 and gate.waiting == 7
    tasks[5].cancel()
    await asyncio.sleep(0)
    assert gate.waiting == 6
    go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 1
    assert most == 2 and gate.busy == 0 and gate.waiting == 0


async def test_no_slots_is_no_limit():
    gate = FairGate(0)
    async with gate.hold("a"), gate.hold("a"), gate.hold("b"):
        assert gate.busy == 0


def test_an_activity_takes_its_users_turns_not_its_runs_nor_nobodys():
    """The server hands the workflow's fairness key on to no activity task (the budget soak's
    activities all came without one), so the workflow names the run's user in each activity's
    headers (workflows/whose.py); without it, an activity is keyed by its run: keyed as nobody's,
    every run's writes shared one turn at the SQLite writer."""
    import dataclasses
    import json
    from types import SimpleNamespace

    from temporalio.api.common.v1 import Payload
    from temporalio.common import Priority
    from temporalio.testing import ActivityEnvironment

    from signoff.activities.telemetry import _fairness_key
    from signoff.activities.headers import USER_HEADER

    def headers(value: object) -> SimpleNamespace:
        return SimpleNamespace(headers={USER_HEADER: Payload(data=json.dumps(value).encode())})

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="job-1", priority=Priority.default)
    assert env.run(_fairness_key, SimpleNamespace(headers={})) == "run:job-1"
    assert env.run(_fairness_key, headers("user-2")) == "user-2"
    assert env.run(_fairness_key, headers(7)) == "run:job-1"  # not a user: the run's
    env.info = dataclasses.replace(env.info, priority=Priority(fairness_key="user-1"))
    assert env.run(_fairness_key, SimpleNamespace(headers={})) == "user-1"


def test_acting_for_is_the_tasks_and_ends_with_its_block():
    async def peek() -> str:
        await asyncio.sleep(0)
        return current_user()

    async def main():
        seen = []
        with acting_for("ann"):
            inner = asyncio.create_task(peek())  # a task started inside inherits it
            seen.append(current_user())
        seen.append(current_user())
        seen.append(await inner)
        return seen

    assert asyncio.run(main()) == ["ann", "", "ann"]


async def test_many_users_are_served_least_used_first_and_the_order_stays_small(clock):
    """Fifty users who held the gate for different times, all waiting: served from the least
    used up, whatever order they came in; and the heap of places does not grow with the holds."""
    import random

    gate = FairGate(1, clock=clock)
    rng = random.Random(7)
    users = [f"u{i:02d}" for i in range(50)]
    for user in users:  # u00 held it 0.1 s, u01 0.2 s, ...
        gate._charge(user, clock.now - 0.1 * (1 + int(user[1:])))
    order: list[str] = []
    release = asyncio.Event()

    async def run(user: str, hold: asyncio.Event | None = None) -> None:
        async with gate.hold(user):
            order.append(user)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(run("first", release))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(run(u)) for u in rng.sample(users, len(users))]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *tasks)
    assert order == ["first", *users]
    for _ in range(2000):  # one user again and again: its old places are dropped
        async with gate.hold("again"):
            pass
    assert len(gate._order) <= 64


async def test_nobodys_work_is_not_counted_so_it_never_waits_behind_the_users_it_serves(clock):
    """A sweep or an API key's lookup ("": before the user is known) adds up everyone's work; were
    it counted, it would go behind every user who waits."""
    gate = FairGate(1, clock=clock)
    gate._charge("", clock.now - 100.0)
    gate._charge("busy", clock.now - 1.0)
    assert gate.used("") == 0.0
    order: list[str] = []
    release = asyncio.Event()

    async def run(user: str, hold: asyncio.Event | None = None) -> None:
        async with gate.hold(user):
            order.append(user or "nobody")
            if hold is not None:
                await hold.wait()
            clock.now += 1.0

    tasks = [asyncio.create_task(run("busy", release))]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(run("busy")) for _ in range(3)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(run("")))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["busy", "nobody", "busy", "busy", "busy"]
