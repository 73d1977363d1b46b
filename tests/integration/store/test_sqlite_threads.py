"""SQLite's connections live on the store's threads, and a task cancelled while it awaits a
statement does not stop that thread. A read cancelled mid-statement (a closed stream's tail) must
not hand its connection to the next read while the statement still runs, and closing the store
must wait for running reads: either way two threads in one sqlite3 connection crash the whole
process (CI met it as a segfault). Run in a child process so a crash fails this test, not the
session."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import REPO

SCRIPT = textwrap.dedent('''
    import asyncio, os, sys, tempfile
    from signoff.engine.store.sqlite import SQLiteStore

    # long enough to be running when its task is cancelled (5 ms) and the store closed (15 ms); a
    # close that does not wait for it still crashes every run (checked with shutdown(wait=False))
    SLOW = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
            "SELECT count(*) AS n FROM c")

    async def read(store, times=1):
        for _ in range(times):
            async with store._tx(write=False) as tx:
                assert (await tx.fetchone(SLOW))["n"] == 100000

    async def main():
        home = tempfile.mkdtemp()
        for round in range(10):
            store = SQLiteStore(os.path.join(home, f"s{round}.db"), readers=4)
            await store.setup()  # as every process does first (the file in WAL mode before any reader)
            cancelled = [asyncio.create_task(read(store)) for _ in range(4)]
            await asyncio.sleep(0.005)
            for task in cancelled:
                task.cancel()  # their statements go on running on the store's threads
            others = [asyncio.create_task(read(store, 20)) for _ in range(3)]
            await asyncio.sleep(0.01)
            await store.close()  # while reads run
            for task in others + cancelled:
                try:
                    await task
                except (asyncio.CancelledError, Exception) as exc:
                    if not isinstance(exc, asyncio.CancelledError):
                        assert "closed" in str(exc), exc
        print("survived")

    asyncio.run(main())
''')


def test_cancelled_reads_and_a_close_under_running_reads_do_not_crash():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip() == "survived"
