"""Sync runs of flows with no gate run in the calling process (docs/inline.md), on SQLite and
PostgreSQL: no workflow is started, and the job looks exactly as the same flow run on Temporal
(status body, events, chat history, trace); a failing component fails the job with
``run_failed``; a flow with a gate still runs as a workflow; a stop here or from another replica
cancels the run and says so."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from signoff.api.models import workflow_response
from signoff.engine.models import Job, JobStatus
from signoff.service import RunService
from tests.helpers import GATE_FLOW, eventually, wait_status

from .conftest import blocking_flow, chat_flow, failing_flow



async def no_workflow(client, job_id: str) -> None:
    """Temporal never heard of the job: no execution with its id, none listed."""
    with pytest.raises(RPCError) as err:
        await client.get_workflow_handle(job_id).describe()
    assert err.value.status == RPCStatusCode.NOT_FOUND
    assert [w.id async for w in client.list_workflows(f"WorkflowId = '{job_id}'")] == []


async def submit(service: RunService, user, flow, mode: str, text: str = "hello", **kw: Any) -> Job:
    job, created = await service.submit(user, flow, input_value=text, session_id=kw.pop("session_id", None),
                                        tweaks=None, idempotency_key=kw.pop("idempotency_key", None), mode=mode, **kw)
    return job


async def story(store, job: Job) -> dict[str, Any]:
    """What a client sees of a job, without its ids and times."""
    body = workflow_response(job).model_dump(mode="json", exclude={"job_id", "session_id"})
    events = [(e.seq, e.event, e.data) for e in await store.read_events(job.job_id)]
    session = job.session_id or job.flow_id
    history = [(m.sender, m.sender_name, m.text, m.kind) for m in await store.list_messages(session)
               if m.job_id == job.job_id or m.job_id is None]
    spans = await store.get_trace(job.run_id)
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1, [(s.name, s.parent_id) for s in spans]
    children = sorted((s for s in spans if s.parent_id == roots[0].span_id), key=lambda s: (s.start_time, s.span_id))
    assert len(children) == len(spans) - 1, "every span hangs under the run's root"
    trace = [(roots[0].name, roots[0].status, roots[0].end_time is not None)] + [
        (s.name, s.type, s.status, s.inputs, s.outputs, s.attributes.get("signoff.vertex_id")) for s in children
    ]
    return _anonymous({"body": body, "events": events, "history": history, "trace": trace, "error": job.error},
                      {job.job_id: "JOB", session: "SESSION"})


def _anonymous(value: Any, names: dict[str, str]) -> Any:
    """The value with the run's own ids named generically and message ids dropped."""
    if isinstance(value, dict):
        return {k: _anonymous(v, names) for k, v in value.items() if k != "id"}
    if isinstance(value, (list, tuple)):
        return type(value)(_anonymous(v, names) for v in value)
    if isinstance(value, str):
        for old, new in names.items():
            value = value.replace(old, new)
    return value


async def test_gateless_sync_run_is_inline_and_looks_like_a_workflow_run(service, store, user, make_flow, client, worker):
    flow = await make_flow(chat_flow())
    job = await submit(service, user, flow, "sync", session_id=f"s-{uuid.uuid4()}")
    assert job.status == JobStatus.completed  # submit returned with the run done
    assert job.request["runner"] == "inline"
    await no_workflow(client, job.job_id)
    assert workflow_response(job).output.text == "You said: hello"

    # the reference: the same flow on Temporal (background mode)
    ref = await submit(service, user, flow, "background", session_id=f"s-{uuid.uuid4()}")
    assert ref.request["runner"] == "temporal"
    ref = await wait_status(store, ref.job_id, JobStatus.completed)
    inline, temporal = await story(store, job), await story(store, ref)
    assert inline == temporal
    assert [e[1] for e in inline["events"]] == ["end"] and inline["events"][0][2] == {"status": "completed"}
    assert [h[0] for h in inline["history"]] == ["User", "Machine"]
    assert [t[0] for t in inline["trace"]] == ["Greeting", "Chat Input", "Prompt", "Answer"]


async def test_a_failing_component_fails_the_inline_job_as_on_temporal(service, store, user, make_flow, client, worker):
    flow = await make_flow(failing_flow())
    job = await submit(service, user, flow, "sync", session_id=f"s-{uuid.uuid4()}")
    assert job.status == JobStatus.failed
    await no_workflow(client, job.job_id)
    events = await store.read_events(job.job_id)
    assert [e.event for e in events] == ["run_failed"]
    assert events[0].data["vertex_id"] == "calc" and events[0].data["type"] == "ComponentError"
    assert "division by zero" in events[0].data["error"]

    ref = await submit(service, user, flow, "background", session_id=f"s-{uuid.uuid4()}")
    ref = await wait_status(store, ref.job_id, JobStatus.failed)
    inline, temporal = await story(store, job), await story(store, ref)
    assert inline["events"] == temporal["events"] and inline["error"] == temporal["error"]
    assert inline["body"] == temporal["body"]
    # the trace shows where the run died, as on Temporal
    assert [t[:3] for t in inline["trace"]] == [t[:3] for t in temporal["trace"]]
    assert inline["trace"][0][1] == "error"


async def test_a_gated_flow_in_sync_mode_still_runs_as_a_workflow(service, store, user, make_flow, client, worker):
    flow = await make_flow(GATE_FLOW)
    job = await submit(service, user, flow, "sync", session_id=f"s-{uuid.uuid4()}")
    assert job.request["runner"] == "temporal"
    job = await service.wait_for_pause_or_end(job.job_id, 30)
    body = workflow_response(job)
    assert body.status == JobStatus.suspended
    assert body.human_request is not None and body.human_request.request_id == f"gate:{job.job_id}"
    desc = await client.get_workflow_handle(job.job_id).describe()
    assert desc.id == job.job_id


async def test_stop_in_this_process_cancels_the_inline_run(service, store, user, make_flow, client, http_counter):
    flow = await make_flow(blocking_flow(f"{http_counter.url}/block/{uuid.uuid4()}"))
    job = await submit(service, user, flow, "sync", sync_timeout=0.05)
    assert job.status in (JobStatus.queued, JobStatus.in_progress)  # the sync wait ended first
    await eventually(lambda: sum(http_counter.counts.values()) == 1, what="the HTTP call to start")
    stopped = await service.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    assert [(e.event, e.data) for e in await store.read_events(job.job_id)] == [("run_cancelled", {"reason": "stopped"})]
    await no_workflow(client, job.job_id)
    # the root span says how it ended
    root = [s for s in await store.get_trace(job.run_id) if s.parent_id is None]
    assert root[0].attributes.get("signoff.status") == "cancelled" and root[0].end_time is not None
    # a second stop tells the truth too
    assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled


async def test_stop_from_another_replica_reaches_the_owner(service, store, user, make_flow, settings, client, http_counter):
    flow = await make_flow(blocking_flow(f"{http_counter.url}/block/{uuid.uuid4()}"))
    job = await submit(service, user, flow, "sync", sync_timeout=0.05)
    await eventually(lambda: sum(http_counter.counts.values()) == 1, what="the HTTP call to start")
    other = RunService(settings, store, client)  # another API replica: the run is not its task
    assert other.inline.running(job.job_id) is None
    stopped = await other.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    assert await service.inline.wait(job.job_id, 10)  # the owner's task ended
    assert [e.event for e in await store.read_events(job.job_id)] == ["run_cancelled"]


async def test_a_stop_after_the_end_reports_the_end(service, store, user, make_flow):
    flow = await make_flow(chat_flow())
    job = await submit(service, user, flow, "sync")
    assert job.status == JobStatus.completed
    assert (await service.stop(user, job.job_id)).status == JobStatus.completed
    assert [e.event for e in await store.read_events(job.job_id)] == ["end"]


async def test_a_repeated_idempotency_key_returns_the_first_inline_job(service, store, user, make_flow, client):
    flow = await make_flow(chat_flow())
    key = f"k-{uuid.uuid4()}"
    first = await submit(service, user, flow, "sync", idempotency_key=key)
    job, created = await service.submit(user, flow, input_value="other", session_id=None, tweaks=None,
                                        idempotency_key=key, mode="sync")
    assert not created and job.job_id == first.job_id and job.status == JobStatus.completed
    assert [e.event for e in await store.read_events(first.job_id)] == ["end"]


async def test_the_heartbeat_reads_each_beat_and_writes_the_lease_every_third_of_it(
        service, store, user, make_flow, settings, http_counter, monkeypatch):
    """Issue 28: a run's heartbeat looks for a stop every beat with a read, and renews its lease
    (a write, which waits its turn for SQLite's one writer) once a third of the lease has passed:
    here a lease of 5 s and beats of 0.2 s, so a renewal every ~1.7 s, not every 0.2 s."""
    calls: list[tuple[str, float]] = []
    for name in ("renew_lease", "lease_state"):
        async def counted(*args: Any, _real: Any = getattr(store, name), _name: str = name, **kw: Any) -> Any:
            calls.append((_name, time.monotonic()))
            return await _real(*args, **kw)
        monkeypatch.setattr(store, name, counted)
    flow = await make_flow(blocking_flow(f"{http_counter.url}/block/{uuid.uuid4()}"))
    job = await submit(service, user, flow, "sync", sync_timeout=0.05)
    await eventually(lambda: sum(1 for n, _ in calls if n == "renew_lease") >= 2, timeout=30,
                     what="two renewals")
    renewals = [t for n, t in calls if n == "renew_lease"]
    third = settings.inline_lease_seconds / 3
    assert renewals[1] - renewals[0] >= third - 0.05, calls
    between = [n for n, t in calls if renewals[0] < t < renewals[1]]
    assert between and set(between) == {"lease_state"}, calls  # the beats between were reads
    # a stop written by another replica is seen by a read
    assert await store.request_cancel(job.job_id)
    assert await service.inline.wait(job.job_id, 10)
    assert (await store.get_job(job.job_id)).status == JobStatus.cancelled


async def test_a_sync_run_in_this_process_holds_no_live_stream_while_it_runs(service, store, user, make_flow,
                                                                             monkeypatch):
    """A sync submit's wait follows its job's events (issue 33, RunService.submit_sync), but a run
    of this process is waited for by the submit itself: it takes none of the person's live
    streams (SIGNOFF_MAX_STREAMS_PER_USER), so runs of a gate-less flow do not turn away their
    own live pages (a review found the follower held for the whole run)."""
    from signoff.service.inline import InlineBackend

    held = []
    real = InlineBackend.wait

    async def wait(self, job_id, timeout):
        held.append(service.feed.streams_of(user.id))
        return await real(self, job_id, timeout)

    monkeypatch.setattr(InlineBackend, "wait", wait)
    flow = await make_flow(chat_flow())
    job = await service.submit_sync(user, flow, timeout=30, input_value="hello", session_id=f"s-{uuid.uuid4()}",
                                    tweaks=None, idempotency_key=None)
    assert job.status == JobStatus.completed and job.request["runner"] == "inline"
    assert held == [0]
