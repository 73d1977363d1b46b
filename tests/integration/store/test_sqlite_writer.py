"""The SQLite store's one writer takes the process's writes in turns per user (engine/fairgate.py),
so one user's backlog of writes does not sit in front of another user's write (issue 28, "a fair
share of the service"; docs/security.md). Counted in the order the writes committed, not timed."""

from __future__ import annotations

import asyncio

from signoff.engine.fairgate import acting_for
from signoff.engine.store.sqlite import SQLiteStore


async def test_a_users_backlog_of_writes_does_not_delay_another_users_write(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    await store.setup()
    order: list[str] = []
    release = asyncio.Event()

    async def write(user: str, label: str, *, hold: bool = False) -> None:
        with acting_for(user):
            async with store._tx(write=True) as tx:
                await tx.execute("CREATE TABLE IF NOT EXISTS t(v TEXT)")
                await tx.execute("INSERT INTO t(v) VALUES (?)", (label,))
                if hold:
                    await release.wait()
        order.append(label)

    try:
        first = asyncio.create_task(write("hostile", "hostile-0", hold=True))  # holds the writer
        while not store._write_lock.busy:
            await asyncio.sleep(0)
        backlog = [asyncio.create_task(write("hostile", f"hostile-{i}")) for i in range(1, 11)]
        await asyncio.sleep(0)  # the backlog is queued before the honest write comes
        honest = asyncio.create_task(write("honest", "honest"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert store._write_lock.waiting == 11
        release.set()
        await asyncio.gather(first, honest, *backlog)
        # first come, first served would commit it 12th, behind the whole backlog
        assert order.index("honest") <= 2, order
        async with store._tx(write=False) as tx:
            rows = await tx.fetchall("SELECT v FROM t ORDER BY rowid")
        assert [r["v"] for r in rows] == order  # committed in that order, each once
    finally:
        await store.close()

