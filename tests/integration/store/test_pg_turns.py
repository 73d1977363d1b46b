"""PostgreSQL's connections are taken in turns per user (engine/fairgate.py, issue 28): under load
the pool is the queue every store call waits in, reads too, and first come, first served a
person's call waited behind every busy client's backlog. The wait for a turn is bounded by the
pool's timeout, and answers 503 (StoreUnavailable) past it, as the pool's own wait did."""

from __future__ import annotations

import asyncio

import pytest

from signoff.engine.fairgate import acting_for
from signoff.engine.store.base import StoreUnavailable
from signoff.engine.store.postgres import PostgresStore


async def test_a_users_backlog_of_calls_does_not_delay_another_users_call(pg_fresh_url: str) -> None:
    store = PostgresStore(pg_fresh_url, max_size=2, timeout=30)
    await store.setup()
    order: list[str] = []
    release = asyncio.Event()

    async def call(user: str, label: str, *, hold: bool = False) -> None:
        with acting_for(user):
            async with store._tx(write=False) as tx:
                order.append(label)  # the order connections were handed out in (not calls' ends)
                await tx.fetchone("SELECT 1 AS one")
                if hold:
                    await release.wait()

    try:
        held = [asyncio.create_task(call("busy", f"busy-held-{i}", hold=True)) for i in range(2)]
        while store._turns.busy < 2:
            await asyncio.sleep(0.01)
        backlog = [asyncio.create_task(call("busy", f"busy-{i}")) for i in range(10)]
        await asyncio.sleep(0.05)  # the backlog is queued before the person's call comes
        person = asyncio.create_task(call("person", "person"))
        while store._turns.waiting < 11:
            await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*held, person, *backlog)
        # the first connection freed goes to the person; first come, first served (the pool's own
        # queue) would hand it out 13th, behind the backlog
        assert order.index("person") == 2, order
    finally:
        await store.close()


async def test_the_wait_for_a_turn_is_bounded_by_the_pools_timeout(pg_fresh_url: str) -> None:
    store = PostgresStore(pg_fresh_url, max_size=1, timeout=0.5)
    await store.setup()
    release = asyncio.Event()

    async def hold() -> None:
        with acting_for("busy"):
            async with store._tx(write=False):
                await release.wait()

    try:
        holder = asyncio.create_task(hold())
        while not store._turns.busy:
            await asyncio.sleep(0.01)
        with acting_for("person"), pytest.raises(StoreUnavailable):
            async with store._tx(write=False):
                pass
        assert store._turns.waiting == 0  # it left its line
        release.set()
        await holder
        async with store._tx(write=False) as tx:  # the slot was handed back
            assert (await tx.fetchone("SELECT 1 AS one"))["one"] == 1
    finally:
        await store.close()
