"""A layer's activity cancelled in the middle of its pause's writes (the chaos soak's "a
checkpoint left", issue 27). A stop ends the job, then cancels the workflow, which cancels the
layer's activity (through its heartbeat, or a local activity at once) while the activity may be
writing the pause it reached: the checkpoint, then the look at the job that deletes it again
when the run ended meanwhile (its cleanup may be over by then). A cancel between the two left
the checkpoint of an ended run for good. The writes now run to their end, then the cancel is
honoured."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

from signoff.activities.flow import FlowActivities
from signoff.activities.types import RunLayerInput
from signoff.engine.lifecycle import RunEnd, end_run
from signoff.engine.models import JobStatus, utcnow
from signoff.engine.store.proxy import StoreProxy

from tests.helpers import to_a_pause_and_its_retry

from .test_surface import submit


class HeldCheckpoint(StoreProxy):
    """The store, holding the pause's write (``mark_suspended``, which carries its checkpoint since
    issue 33): before its write until ``go``, after it until ``hold`` (``written`` says the write
    is done)."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.entered, self.go, self.written, self.hold = (asyncio.Event() for _ in range(4))

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args, **kwargs):
            if name != "mark_suspended" or self.entered.is_set():
                return await inner(*args, **kwargs)
            self.entered.set()
            await self.go.wait()
            out = await inner(*args, **kwargs)
            self.written.set()
            await self.hold.wait()
            return out

        return call


async def test_a_layer_cancelled_while_it_writes_its_pause_leaves_no_checkpoint(service, store, settings, user,
                                                                               make_flow):
    job = await submit(service, user, await make_flow())  # no worker: this test runs the first layer itself
    held, env = HeldCheckpoint(store), ActivityEnvironment()
    try:
        layer = asyncio.ensure_future(env.run(FlowActivities(held, settings).run_layer, RunLayerInput(
            job_id=job.job_id, step=0, now=utcnow(), inline=True, persist=True)))
        await held.entered.wait()  # the layer reached the gate and writes its pause with its checkpoint
        # the stop ends the job; its cleanup finds no checkpoint yet
        ended = await end_run(store, job.job_id, RunEnd(JobStatus.cancelled))
        assert ended.won and await store.load_latest_checkpoint(job.run_id) is None
        held.go.set()
        await held.written.wait()
        env.cancel()  # the workflow's cancel reaches the activity right after the checkpoint's write
        held.hold.set()
        with pytest.raises(asyncio.CancelledError):
            await layer
        assert (await store.get_job(job.job_id)).status == JobStatus.cancelled
        assert await store.load_latest_checkpoint(job.run_id) is None
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


async def test_the_retry_of_a_layer_whose_attempt_died_after_its_pause_drops_what_it_left(service, store, settings,
                                                                                        user, make_flow):
    """The attempt was killed (its worker SIGKILLed) after the checkpoint's write and before its
    look at the job, which a stop ended meanwhile: its retry finds the run ended before it dials
    out, and deletes what that attempt left."""
    flow = await make_flow({
        "name": "dials out",
        "nodes": [{"id": "ask", "type": "ChatInput"},
                  {"id": "call", "type": "HTTPRequest", "params": {"url": "http://127.0.0.1:9/never", "method": "GET"}},
                  {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}]})
    job = await submit(service, user, flow)
    acts, env = FlowActivities(store, settings), ActivityEnvironment()
    try:
        first = await env.run(acts.run_layer, RunLayerInput(job_id=job.job_id, step=0, now=utcnow(), inline=True,
                                                           persist=True))
        assert first.pending is None and not first.done  # the next layer dials out: its own activity
        assert (await end_run(store, job.job_id, RunEnd(JobStatus.cancelled))).won  # the stop
        # the layer's first attempt wrote its checkpoint after the stop's cleanup, then died
        await store.save_checkpoint(job.run_id, first.state.inline or {}, job_id=job.job_id)
        retry = await env.run(acts.run_layer, RunLayerInput(job_id=job.job_id, step=first.step, state=first.state,
                                                           now=utcnow(), inline=True, persist=True))
        assert retry.cancelled and retry.status == "cancelled"
        assert await store.load_latest_checkpoint(job.run_id) is None
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


async def test_the_retry_of_a_layer_that_reached_its_pause_builds_nothing_again(service, store, settings, user,
                                                                                make_flow, http_counter):
    """Resume is not a re-run, a lost attempt included: the layer that dials out built, reached
    the gate and persisted the pause, and its worker was killed before Temporal heard of it
    (test_restarts.py: test_worker_killed_while_suspended saw the call made twice). Its retry
    goes on from that pause: no second call, the same pause, one ``human_input_required``."""
    from .test_restarts import counted_gate_flow

    job = await submit(service, user, await make_flow(counted_gate_flow(http_counter.url)))
    try:
        paused, retry = await to_a_pause_and_its_retry(store, settings, job.job_id)
        assert http_counter.counts["/count/before"] == 1
        again = await retry()
        assert http_counter.counts["/count/before"] == 1
        assert (again.step, again.pending, again.built, again.persisted) == (paused.step, paused.pending,
                                                                             paused.built, True)
        events = [e.event for e in await store.read_events(job.job_id)]
        assert events.count("human_input_required") == 1, events
        assert (await store.get_job(job.job_id)).waits_for(paused.pending.request_id)
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")


async def test_a_stop_sent_again_after_its_first_process_died_mid_stop_leaves_nothing(service, store, settings,
                                                                                     user, make_flow):
    """A stop's API was SIGKILLed after its claim ended the job and before its cleanup (the chaos
    soak kills APIs); the client sends the stop again. That claim finds the job ended, and does
    the cleanup the first one never did: no checkpoint of the ended run is left."""
    job = await submit(service, user, await make_flow())
    try:
        paused = await ActivityEnvironment().run(FlowActivities(store, settings).run_layer, RunLayerInput(
            job_id=job.job_id, step=0, now=utcnow(), inline=True, persist=True))
        assert paused.pending is not None and await store.load_latest_checkpoint(job.run_id) is not None
        end = RunEnd(JobStatus.cancelled)
        assert await store.claim_suspended_for_cancel(job.job_id, event=end.event())  # then the process died
        assert await store.load_latest_checkpoint(job.run_id) is not None
        again = await end_run(store, job.job_id, end, from_suspended=True)
        assert not again.won and again.job.status == JobStatus.cancelled
        assert await store.load_latest_checkpoint(job.run_id) is None
    finally:
        await service.client.get_workflow_handle(job.job_id).terminate("test drove the activity itself")
