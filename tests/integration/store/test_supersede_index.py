"""The look for the runs a submit supersedes (Q.find_suspended) reads an index of the suspended runs
by user, flow and effective session (migration 19: jobs_suspended_session). Since issue 33 the look
runs in the job's insert, on SQLite holding the process's one writer: without the index it scanned
every suspended run the user had of the flow (a review measured another user's write waiting
~60 ms behind a user with 50,000 runs waiting in sessions of their own)."""

from __future__ import annotations

import pytest

from signoff.engine.store.sql.queries import Q

pytestmark = pytest.mark.both_stores


async def test_the_supersede_look_reads_its_index(store) -> None:
    if store.dialect == "sqlite":
        async with store._tx(write=False) as tx:
            plan = await tx.fetchall("EXPLAIN QUERY PLAN " + Q.find_suspended, ("f", "u", "s"))
        text = " ".join(str(r.get("detail")) for r in plan)
    else:  # whether the planner can use it at all (on a table this small it would rather scan)
        async with store._tx(write=True) as tx:
            await tx.execute("SET LOCAL enable_seqscan = off")
            plan = await tx.fetchall("EXPLAIN " + Q.find_suspended, ("f", "u", "s"))
        text = " ".join(str(r.get("QUERY PLAN")) for r in plan)
    assert "jobs_suspended_session" in text, text
