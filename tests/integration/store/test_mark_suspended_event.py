"""``mark_suspended(..., event=, dedupe_key=)``: the pause's event and the status in one
conditional write, on every backend (the ``store`` fixture is parametrised)."""

from __future__ import annotations

from signoff.engine.models import JobStatus
from signoff.engine.store import Store
from tests.integration.store.test_conformance import new_job, pending


async def test_mark_suspended_writes_its_event_with_the_status(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    event = ("human_input_required", {"request_id": request_id})
    assert await store.mark_suspended(job_id, pending(request_id), event=event, dedupe_key=f"pause:1:{request_id}")
    assert (await store.get_job(job_id)).status == JobStatus.suspended
    assert [(e.seq, e.event, e.data) for e in await store.read_events(job_id)] == [
        (1, "human_input_required", {"request_id": request_id})]


async def test_mark_suspended_of_an_ended_job_writes_no_event(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.set_status(job_id, JobStatus.cancelled, event=("run_cancelled", {"reason": "stopped"}))
    request_id = f"gate:{job_id}"
    assert not await store.mark_suspended(job_id, pending(request_id),
                                          event=("human_input_required", {"request_id": request_id}))
    job = await store.get_job(job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    assert [e.event for e in await store.read_events(job_id)] == ["run_cancelled"]  # nothing after the end


async def test_mark_suspended_with_a_used_dedupe_key_writes_the_event_once(store: Store) -> None:
    job_id = await new_job(store)
    assert await store.set_status(job_id, JobStatus.in_progress)
    request_id = f"gate:{job_id}"
    key = f"pause:1:{request_id}"
    # an earlier attempt (before the event moved into this write) appended the event, then died
    await store.append_event(job_id, "human_input_required", {"request_id": request_id}, dedupe_key=key)
    assert await store.mark_suspended(job_id, pending(request_id),
                                      event=("human_input_required", {"request_id": request_id}), dedupe_key=key)
    assert (await store.get_job(job_id)).status == JobStatus.suspended
    assert [e.event for e in await store.read_events(job_id)] == ["human_input_required"]
    # the sequence goes on without a gap
    assert await store.append_event(job_id, "next", {}) == 2
