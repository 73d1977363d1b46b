"""FairGate (engine/fairgate.py): at most `slots` at once, and a freed slot goes to the next user
in turn, not to whoever queued first; a cancelled waiter leaves its line."""

from __future__ import annotations

import asyncio

from signoff.engine.fairgate import FairGate, acting_for, current_user


async def test_freed_slots_go_to_the_users_in_turn_not_first_come():
    gate = FairGate(1)
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


def test_an_activity_takes_its_runs_turns_not_nobodys():
    """The server hands the workflow's fairness key on to no activity task (the budget soak's
    activities all came without one), so an activity without one is keyed by its run: keyed as
    nobody's, every run's writes shared one turn at the SQLite writer."""
    import dataclasses

    from temporalio.common import Priority
    from temporalio.testing import ActivityEnvironment

    from signoff.activities.telemetry import _fairness_key

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="job-1", priority=Priority.default)
    assert env.run(_fairness_key) == "run:job-1"
    env.info = dataclasses.replace(env.info, priority=Priority(fairness_key="user-1"))
    assert env.run(_fairness_key) == "user-1"


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
