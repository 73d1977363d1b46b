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



async def test_a_write_runs_whole_on_the_writers_thread_and_its_hold_is_counted(tmp_path):
    """``_write`` runs BEGIN, the body's statements and the COMMIT on the writer's thread in one
    hop (docs/store.md, "The writer's hold"); a body that awaits anything else is rolled back."""
    import threading

    from signoff.engine.metrics import exposition
    from signoff.engine.store.counters import HOLD

    store = SQLiteStore(tmp_path / "s.db")
    await store.setup()
    threads: list[str] = []

    async def body(tx):
        threads.append(threading.current_thread().name)
        await tx.execute("CREATE TABLE IF NOT EXISTS t(v TEXT)")
        threads.append(threading.current_thread().name)
        await tx.execute("INSERT INTO t(v) VALUES ('kept')")
        threads.append(threading.current_thread().name)
        return await tx.fetchone("SELECT count(*) AS n FROM t")

    async def awaits_else(tx):
        await tx.execute("INSERT INTO t(v) VALUES ('lost')")
        await asyncio.sleep(0)  # not a statement: the writer is never held across the event loop

    try:
        seen = HOLD.n
        assert (await store._write(body))["n"] == 1
        assert len(set(threads)) == 1 and threads[0].startswith("signoff-sqlite-writer")
        assert HOLD.n == seen + 1 and HOLD.sum > 0
        with_metrics = exposition().decode()
        assert "signoff_store_writer_hold_seconds_bucket" in with_metrics
        try:
            await store._write(awaits_else)
        except RuntimeError as exc:
            assert "awaited" in str(exc)
        else:
            raise AssertionError("a body that awaited something else was let through")
        async with store._tx(write=False) as tx:
            rows = await tx.fetchall("SELECT v FROM t ORDER BY rowid")
        assert [r["v"] for r in rows] == ["kept"]  # the other body's insert rolled back
        assert not store._writer.in_transaction
    finally:
        await store.close()


async def test_a_write_cancelled_before_its_commit_rolls_back_and_hands_the_writer_on(tmp_path):
    import threading

    store = SQLiteStore(tmp_path / "s.db")
    await store.setup()
    started, release = threading.Event(), threading.Event()

    async def slow(tx):
        await tx.execute("INSERT INTO t(v) VALUES ('cancelled')")
        started.set()
        release.wait(30)  # on the writer's thread: the caller is cancelled meanwhile

    try:
        await store._write(lambda tx: tx.execute("CREATE TABLE t(v TEXT)"))
        task = asyncio.create_task(store._write(slow))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        following = asyncio.create_task(store._write(lambda tx: tx.execute("INSERT INTO t(v) VALUES ('next')")))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not following.done() and store._write_lock.busy == 1  # the writer is still the first's
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancelled write said it was done")
        await following
        async with store._tx(write=False) as tx:
            rows = await tx.fetchall("SELECT v FROM t ORDER BY rowid")
        assert [r["v"] for r in rows] == ["next"]
    finally:
        release.set()
        await store.close()


async def test_a_write_cancelled_while_its_commit_waits_for_the_thread_still_ends_its_transaction(tmp_path):
    """A statement-by-statement write (``_tx``) cancelled once its COMMIT is queued behind a busy
    writer's thread: the COMMIT still runs before the writer is passed on, so the next write
    begins on a connection out of its transaction (before, the cancel took the COMMIT's job off
    the queue and the next BEGIN failed "cannot start a transaction within a transaction": CI)."""
    import threading

    store = SQLiteStore(tmp_path / "s.db")
    await store.setup()
    busy, release = threading.Event(), threading.Event()
    at_commit = asyncio.Event()
    try:
        await store._write(lambda tx: tx.execute("CREATE TABLE t(v TEXT)"))

        async def first() -> None:
            async with store._tx(write=True) as tx:
                await tx.execute("INSERT INTO t(v) VALUES ('first')")
                # the writer's thread taken by something else: this COMMIT waits in its queue
                store._writer_exec.submit(lambda: (busy.set(), release.wait(30)))
                while not busy.is_set():
                    await asyncio.sleep(0.001)
                at_commit.set()  # the body is done: the COMMIT is sent once this step suspends

        task = asyncio.create_task(first())
        # the cancel must meet the COMMIT's wait, not the body's poll above (cancelled there, the
        # write rolls back: a CI run under load cancelled it there when the test only polled busy)
        await at_commit.wait()
        for _ in range(3):
            await asyncio.sleep(0)  # the task is in its COMMIT's wait now
        task.cancel()
        following = asyncio.create_task(store._write(lambda tx: tx.execute("INSERT INTO t(v) VALUES ('next')")))
        await asyncio.sleep(0.05)
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await following  # began on a connection out of the first's transaction
        async with store._tx(write=False) as tx:
            rows = await tx.fetchall("SELECT v FROM t ORDER BY rowid")
        assert [r["v"] for r in rows] == ["first", "next"]  # the COMMIT that was under way took effect
    finally:
        release.set()
        await store.close()
