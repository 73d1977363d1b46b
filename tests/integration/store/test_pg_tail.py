"""PostgreSQL's tail listens on a channel anyone who may connect can NOTIFY: a payload that is not
ours is a "may have missed" (None, so followers read again), never the end of the tail, and the
notes after it still arrive."""

from __future__ import annotations

import asyncio

import psycopg

from signoff.engine.store import open_store
from signoff.engine.store.postgres import TAIL_CHANNEL
from tests.store_conformance import new_job


async def test_a_notification_that_is_not_ours_is_a_miss_not_the_end_of_the_tail(pg_fresh_url: str) -> None:
    store = open_store(pg_fresh_url)
    await store.setup()
    tail = store.tail_events()
    try:
        assert await tail.__anext__() == []
        job_id = await new_job(store)
        async with await psycopg.AsyncConnection.connect(pg_fresh_url, autocommit=True) as other:
            for junk in ("not json", '["a"]', '{"x": 1}', '["j", "not a number", "e"]'):
                await other.execute("SELECT pg_notify(%s, %s)", (TAIL_CHANNEL, junk))
        await store.append_event(job_id, "progress", {})
        got = []
        while not any(b and any(n.job_id == job_id for n in b) for b in got):
            got.append(await asyncio.wait_for(tail.__anext__(), 30))
        assert None in got  # the junk: read everything again
        assert [(n.job_id, n.seq, n.event) for b in got if b for n in b] == [(job_id, 1, "progress")]
    finally:
        await tail.aclose()
        await store.close()
