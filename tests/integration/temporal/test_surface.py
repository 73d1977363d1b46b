"""The Temporal surface as the `temporal` CLI and concurrent callers see it: Update/Signal
`resume`, Query `pending`, search attributes; races apply exactly one decision; stop,
supersede and failures end the run with the right status and event."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError

from temporalio.service import RPCError

from signoff.engine.models import Decision, JobStatus
from signoff.devserver import temporal_binary
from signoff.workflows.types import ResumeInput

from tests.helpers import event_names, eventually, settle_leftovers, wait_status


def temporal_cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [temporal_binary(), *args, "--address", server.address, "--namespace", "default", "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )


async def submit(service, user, flow, session_id=None, **kw):
    job, _ = await service.submit(user, flow, input_value=kw.pop("input_value", "refund 42"), session_id=session_id,
                                  tweaks=kw.pop("tweaks", None), idempotency_key=None, mode="background")
    return job


async def test_temporal_cli_update_query_list(worker, service, store, user, make_flow, temporal_server):
    flow = await make_flow()
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    request_id = job.pending.request_id

    q = await asyncio.to_thread(temporal_cli, temporal_server, "workflow", "query", "--workflow-id", job.job_id,
                                "--name", "pending")
    assert q.returncode == 0, q.stderr
    assert request_id in q.stdout

    def listed():
        out = temporal_cli(temporal_server, "workflow", "list", "--query",
                           f'SignoffStatus="suspended" AND SignoffFlowId="{flow.id}"')
        return out.returncode == 0 and job.job_id in out.stdout

    await eventually(lambda: asyncio.to_thread(listed), what="the run listed as suspended")

    body = json.dumps({"request_id": request_id, "decision": {"action_id": "approve"}})
    up = await asyncio.to_thread(temporal_cli, temporal_server, "workflow", "update", "execute", "--workflow-id",
                                 job.job_id, "--name", "resume", "--input", body)
    assert up.returncode == 0, up.stderr
    assert "resuming" in up.stdout
    again = await asyncio.to_thread(temporal_cli, temporal_server, "workflow", "update", "execute", "--workflow-id",
                                    job.job_id, "--name", "resume", "--input", body)
    assert again.returncode != 0
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == "Refund sent"
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 1


async def test_twenty_concurrent_updates_apply_one(worker, service, store, user, make_flow):
    flow = await make_flow()
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    handle = service.client.get_workflow_handle(job.job_id)
    arg = ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id="approve"), decided_by=user.id)

    async def one():
        try:
            await handle.execute_update("resume", arg, id=f"u-{uuid.uuid4()}")
            return True
        except (WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            return False  # rejected, lost the claim, or the run ended before it was admitted

    outcomes = await asyncio.gather(*(one() for _ in range(20)))
    assert outcomes.count(True) == 1
    await wait_status(store, job.job_id, JobStatus.completed)
    assert (await event_names(store, job.job_id)).count("human_input_decision") == 1


async def test_signal_racing_update_applies_at_most_one(worker, service, store, user, make_flow):
    flow = await make_flow()
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    handle = service.client.get_workflow_handle(job.job_id)
    arg = ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id="reject"))

    async def update():
        try:
            await handle.execute_update("resume", arg)
            return True
        except (WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            return False

    await asyncio.gather(handle.signal("resume", arg), update())
    done = await wait_status(store, job.job_id, JobStatus.completed)
    names = await event_names(store, job.job_id)
    assert names.count("human_input_decision") == 1
    assert done.result["output"]["text"] == "Refund refused"


async def test_rejected_signal_is_recorded_not_applied(worker, service, store, user, make_flow):
    flow = await make_flow()
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    handle = service.client.get_workflow_handle(job.job_id)
    await handle.signal("resume", ResumeInput(request_id="gate:stale", decision=Decision(action_id="approve")))
    await handle.signal("resume", ResumeInput(request_id=job.pending.request_id, decision=Decision(action_id="nope")))

    async def two_rejections():
        return (await event_names(store, job.job_id)).count("resume_rejected") == 2

    await eventually(two_rejections, what="two resume_rejected events")
    assert (await store.get_job(job.job_id)).status == JobStatus.suspended
    assert await handle.query("pending") is not None


async def test_stop_suspended_and_running(worker, service, store, user, make_flow, http_counter):
    flow = await make_flow()
    job = await submit(service, user, flow)
    await service.wait_for_pause_or_end(job.job_id, timeout=30)
    stopped = await service.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    assert (await store.read_events(job.job_id))[-1].data == {"reason": "stopped"}
    assert await store.load_latest_checkpoint(job.run_id) is None

    slow = await make_flow({
        "name": "slow",
        "nodes": [{"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/block/stop"}},
                  {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "call.response", "to": "out.input_value"}],
    })
    run = await submit(service, user, slow)
    await eventually(lambda: http_counter.counts["/block/stop"] >= 1, what="the slow call")
    stopped = await service.stop(user, run.job_id)
    http_counter.release.set()
    assert stopped.status == JobStatus.cancelled
    # the status is written before the event (finish): poll for the event
    await eventually(lambda: _last_event_is(store, run.job_id, "run_cancelled"), what="run_cancelled")
    # a completed job stays completed
    again = await service.stop(user, job.job_id)
    assert again.status == JobStatus.cancelled


async def test_supersede_same_session_only(worker, service, store, user, make_flow):
    flow = await make_flow()
    other_flow = await make_flow()
    first = await submit(service, user, flow, session_id="s")
    other_session = await submit(service, user, flow, session_id="t")
    other = await submit(service, user, other_flow, session_id="s")
    for j in (first, other_session, other):
        await service.wait_for_pause_or_end(j.job_id, timeout=30)
    second = await submit(service, user, flow, session_id="s")
    assert (await store.get_job(first.job_id)).status == JobStatus.cancelled
    last = (await store.read_events(first.job_id))[-1]
    assert last.event == "run_cancelled" and last.data == {"reason": "superseded", "superseded_by": second.job_id}
    for j in (other_session, other):
        assert (await store.get_job(j.job_id)).status == JobStatus.suspended
    result = await service.client.get_workflow_handle(first.job_id).describe()
    await eventually(lambda: service.client.get_workflow_handle(first.job_id).describe(),
                     what="describe")
    assert result is not None


async def test_failure_ends_failed_with_event(worker, service, store, user, make_flow):
    flow = await make_flow({
        "name": "broken",
        "nodes": [{"id": "calc", "type": "Calculator", "params": {"expression": "1/0"}},
                  {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "calc.result", "to": "out.input_value"}],
    })
    job = await submit(service, user, flow)
    failed = await wait_status(store, job.job_id, JobStatus.failed)
    events = await store.read_events(job.job_id)
    assert events[-1].event == "run_failed"
    assert events[-1].data["vertex_id"] == "calc"
    assert failed.error["vertex_id"] == "calc"


async def test_large_output_travels_by_reference(worker, service, store, user, make_flow, settings):
    big = "x" * (settings.inline_output_bytes * 4)
    flow = await make_flow({
        "name": "big",
        "nodes": [{"id": "t", "type": "TextInput", "params": {"value": big}},
                  {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve"]}},
                  {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "t.text", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "out.input_value"}],
    })
    job = await submit(service, user, flow)
    job = await service.wait_for_pause_or_end(job.job_id, timeout=30)
    await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
    done = await wait_status(store, job.job_id, JobStatus.completed)
    assert done.result["output"]["text"] == big
    history = await service.client.get_workflow_handle(job.job_id).fetch_history()
    assert history.to_json().count(big) == 0


async def _last_event_is(store, job_id: str, name: str) -> bool:
    names = await event_names(store, job_id)
    return bool(names) and names[-1] == name


async def test_a_submit_that_died_before_superseding_is_finished_by_its_retry_or_the_sweep(
        worker, service, store, user, make_flow):
    """The API was SIGKILLed between the job's insert and the supersede (the soak met it): the
    client's retry with the same idempotency key, or else the sweep that starts the queued run,
    supersedes the session's older suspended run; a run submitted after it is left alone."""
    from signoff.engine.models import NewJob

    flow = await make_flow()
    for finish in ("retry", "sweep"):
        older = await service.wait_for_pause_or_end((await submit(service, user, flow, session_id=finish)).job_id, 30)
        # what the dead submit left: its job, queued, nothing superseded, nothing started
        key = f"died-{finish}-{uuid.uuid4()}"
        await settle_leftovers(store)
        left, _ = await store.create_job(NewJob(
            job_id=str(uuid.uuid4()), flow_id=flow.id, flow_version=flow.version, user_id=user.id, session_id=finish,
            request={"input_value": "refund 42", "tweaks": {}, "mode": "background", "session_id": finish,
                     "runner": "temporal"}, idempotency_key=key))
        assert (await store.get_job(older.job_id)).status == JobStatus.suspended
        if finish == "retry":
            again, created = await service.submit(user, flow, input_value="refund 42", session_id=finish, tweaks=None,
                                                  idempotency_key=key, mode="background")
            assert not created and again.job_id == left.job_id
        else:
            assert left.job_id in await service.start_unstarted(older_than=0)
        assert (await store.get_job(older.job_id)).status == JobStatus.cancelled
        last = (await store.read_events(older.job_id))[-1]
        assert last.data == {"reason": "superseded", "superseded_by": left.job_id}
        newer = await service.wait_for_pause_or_end(left.job_id, 30)  # it runs, to its own pause
        assert newer.status == JobStatus.suspended
