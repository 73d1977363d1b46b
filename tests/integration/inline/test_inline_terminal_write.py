"""A stop that cancels an inline run while it writes how it ended (``completed``) does not roll
that write back: the job reports what really happened (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any


from signoff.engine.models import JobStatus
from signoff.service import RunService
from tests.helpers import eventually

from .conftest import chat_flow



class HeldEnd:
    """The real store, whose write of ``completed`` waits for ``release`` before it goes to the
    database (a slow commit): a cancel of the writer arrives while the write is under way."""

    def __init__(self, store) -> None:
        self._store = store
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def set_status(self, job_id: str, status: JobStatus, **kw: Any) -> bool:
        if status == JobStatus.completed:
            self.writing.set()
            await self.release.wait()
        return await self._store.set_status(job_id, status, **kw)


async def test_a_stop_during_the_completed_write_leaves_the_job_completed(settings, store, client, user, make_flow):
    held = HeldEnd(store)
    service = RunService(settings, held, client)  # type: ignore[arg-type]
    flow = await make_flow(chat_flow())
    job, _ = await service.submit(user, flow, input_value="hello", session_id=None, tweaks=None,
                                  idempotency_key=None, mode="sync", sync_timeout=0.01)
    await asyncio.wait_for(held.writing.wait(), 30)  # the run ended: its completed write is under way
    run = service.inline.running(job.job_id)
    assert run is not None
    stop = asyncio.create_task(service.stop(user, job.job_id))
    await eventually(lambda: run.done() or run.cancelling(), what="the stop's cancel of the run")
    held.release.set()
    stopped = await stop
    assert stopped.status == JobStatus.completed  # what really happened
    assert [e.event for e in await store.read_events(job.job_id)] == ["end"]
    assert (await store.get_job(job.job_id)).result is not None
