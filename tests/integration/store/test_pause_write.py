"""A submit's pause in one write (issue 33, docs/temporal.md "A submit's pause in one write"):
the first layer's activity (``run_layer``, run here without Temporal) persists the pause it
reaches with one ``mark_suspended``, which carries the checkpoint, the User's message and the
card, the request's approvers, the ``human_input_required`` event and the spans of what was
built; the run's start is one ``set_status`` with its root span. On every store (in memory,
SQLite, PostgreSQL), and with the guarantees of the writes apart: a retried attempt writes
nothing again, and a layer whose run was stopped before its pause leaves nothing of the pause
behind."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.testing import ActivityEnvironment

from signoff.activities.flow import FlowActivities
from signoff.activities.types import RunLayerInput
from signoff.engine.lifecycle import RunEnd, end_run
from signoff.engine.models import JobStatus, NewJob, utcnow
from signoff.engine.settings import Settings
from signoff.engine.store import Store
from signoff.engine.store.counters import tallying
from signoff.engine.store.memory import MemoryStore
from tests.helpers import CountingStore, gate_flow
from tests.store_conformance import uid




async def queued_run(store: Store, **gate) -> tuple[str, str]:
    """A job of the gate flow as a submit leaves it (queued, its workflow about to start it)."""
    owner = await store.create_user(uid("owner-"))
    flow = await store.save_flow(owner.id, "Refund approval", gate_flow(**gate))
    job, _ = await store.create_job(NewJob(job_id=uid("job-"), flow_id=flow.id, flow_version=flow.version,
                                           user_id=owner.id, session_id=uid("s-"),
                                           request={"input_value": "refund 42", "tweaks": {}, "mode": "background"}))
    return job.job_id, owner.id


def first_layer(job_id: str) -> RunLayerInput:
    return RunLayerInput(job_id=job_id, step=0, now=utcnow(), inline=True, persist=True)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path / "home")


async def test_a_submits_pause_is_one_write_and_one_commit(any_store: Store, settings: Settings) -> None:
    job_id, _ = await queued_run(any_store)
    counting = CountingStore(any_store)
    with tallying() as tally:
        out = await ActivityEnvironment().run(FlowActivities(counting, settings).run_layer, first_layer(job_id))
    assert out.pending is not None and out.persisted
    assert counting.calls == ["get_job_with_flow", "set_status", "mark_suspended"]  # its webhooks read in it
    if not isinstance(any_store, MemoryStore):  # the SQL stores count what they send
        assert tally["commit"] == 2  # the start, the pause
    job = await any_store.get_job(job_id)
    assert job.waits_for(out.pending.request_id)
    checkpoint = await any_store.load_latest_checkpoint(job.run_id)
    assert checkpoint.data["pending"]["request_id"] == out.pending.request_id
    said = await any_store.list_messages(job.session_id)
    assert [(m.sender, m.text) for m in said][:1] == [("User", "refund 42")] and len(said) == 2
    assert said[1].card["request_id"] == out.pending.request_id
    assert [e.event for e in await any_store.read_events(job_id)] == ["human_input_required"]
    # the provisional root, written with the start (the components' spans are the worker's
    # interceptors' to collect: test_round_trips.py sees them in the pause's write)
    assert [(s.type, s.end_time) for s in await any_store.get_trace(job.run_id)] == [("flow", None)]


async def test_the_approvers_ride_in_the_pause(any_store: Store, settings: Settings) -> None:
    """Who may decide is written with the pause (an approver's inbox lists the request as the
    status shows it), and is not read back for the event's deliveries."""
    bob = await any_store.create_user(uid("bob-"))
    job_id, _ = await queued_run(any_store, approvers=[bob.name])
    counting = CountingStore(any_store)
    out = await ActivityEnvironment().run(FlowActivities(counting, settings).run_layer, first_layer(job_id))
    assert out.persisted and out.pending.approver_refs == [f"user:{bob.id}"]
    assert "set_request_approvers" not in counting.calls and "request_approvers" not in counting.calls
    assert await any_store.request_approvers(job_id, out.pending.request_id) == [f"user:{bob.id}"]
    assert [j.job_id for j in await any_store.list_assigned_pending(bob.id)] == [job_id]


async def test_a_retry_of_the_layer_after_its_pause_was_written_writes_nothing_again(any_store: Store,
                                                                                     settings: Settings) -> None:
    """The attempt wrote its pause and its worker died before Temporal heard of it: the retry
    goes on from that pause, and its one write changes nothing (the job waits already): one
    event, the same messages, the job waiting for the same request."""
    job_id, _ = await queued_run(any_store)
    acts, env = FlowActivities(any_store, settings), ActivityEnvironment()
    first = await env.run(acts.run_layer, first_layer(job_id))
    said = await any_store.list_messages((await any_store.get_job(job_id)).session_id)
    env.info = dataclasses.replace(env.info, attempt=2)
    again = await env.run(acts.run_layer, first_layer(job_id))
    assert (again.pending, again.persisted) == (first.pending, True)
    job = await any_store.get_job(job_id)
    assert job.waits_for(first.pending.request_id)
    assert [e.event for e in await any_store.read_events(job_id)] == ["human_input_required"]
    assert await any_store.list_messages(job.session_id) == said


async def test_a_layer_whose_run_was_stopped_before_its_pause_leaves_nothing_of_it(any_store: Store,
                                                                                   settings: Settings) -> None:
    """The stop ends the job while the layer builds; the pause's one write then changes nothing,
    and writes none of what it carries: no checkpoint, no event, no approvers; the layer reports
    the run's real status."""
    bob = await any_store.create_user(uid("bob-"))
    job_id, _ = await queued_run(any_store, approvers=[bob.name])

    async def stop() -> None:
        assert (await end_run(any_store, job_id, RunEnd(JobStatus.cancelled))).won

    out = await ActivityEnvironment().run(FlowActivities(CountingStore(any_store, {"mark_suspended": stop}),
                                                         settings).run_layer, first_layer(job_id))
    assert out.cancelled and out.status == "cancelled"
    job = await any_store.get_job(job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    assert await any_store.load_latest_checkpoint(job.run_id) is None
    assert "human_input_required" not in [e.event for e in await any_store.read_events(job_id)]
    assert await any_store.request_approvers(job_id, f"gate:{job.run_id}") == []
