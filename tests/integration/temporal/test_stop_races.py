"""Stop of a run that has no running workflow to cancel: the submit died before starting it
(the job is still ``queued``), or the workflow was ended from Temporal's side (terminated in the
Web UI or the CLI) while the job was ``in_progress``. Nothing else would ever end such a job:
the stop ends it, says so, and a later sweep does not start it again."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from signoff.activities.flow import FlowActivities
from signoff.engine.errors import SignoffError
from signoff.engine.models import Decision, JobStatus
from signoff.engine.store.proxy import StoreProxy
from signoff.service import RunService
from signoff.worker import STRICT_SANDBOX, build_worker
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from signoff.workflows.flow_run import FlowRun
from signoff.workflows.types import SA_STATUS
from signoff.activities.types import FinishInput, FinishOutput, ResumeRunInput, ResumeRunOutput
from signoff.workflows.types import ResumeInput, ResumeResult
from tests.helpers import event_names, eventually, queued_without_workflow, wait_status



def replayer() -> Replayer:
    return Replayer(workflows=[FlowRun], data_converter=pydantic_data_converter, workflow_runner=SandboxedWorkflowRunner(
        restrictions=STRICT_SANDBOX))


@pytest.mark.both_stores
async def test_stop_of_a_queued_run_without_workflow_cancels_it_for_good(worker, service, store, user, make_flow):
    job_id = await queued_without_workflow(store, user, await make_flow())
    stopped = await service.stop(user, job_id)
    assert stopped.status == JobStatus.cancelled
    events = await store.read_events(job_id)
    assert [(e.event, e.data) for e in events] == [("run_cancelled", {"reason": "stopped"})]
    # the API's sweep finds nothing left to start: the stopped run never runs
    assert job_id not in await service.start_unstarted(older_than=0)
    assert (await store.get_job(job_id)).status == JobStatus.cancelled


@pytest.mark.both_stores
async def test_stop_of_a_running_job_whose_workflow_was_terminated_ends_it(worker, service, store, user, make_flow,
                                                                           http_counter):
    flow = await make_flow({
        "name": "held",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/block/t", "method": "GET"}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}],
    })
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    await eventually(lambda: http_counter.counts["/block/t"] == 1, what="the held call")
    await service.client.get_workflow_handle(job.job_id).terminate("an operator ended it in the Web UI")
    assert (await store.get_job(job.job_id)).status == JobStatus.in_progress  # nothing will end it now
    stopped = await service.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    assert (await event_names(store, job.job_id))[-1] == "run_cancelled"
    http_counter.release.set()
    assert (await wait_status(store, job.job_id, JobStatus.cancelled)).status == JobStatus.cancelled


def gate_beside_held_call(url: str) -> dict:
    """Layer 2 holds an HTTP call and a gate side by side: the layer pauses once the call answers."""
    return {
        "name": "gate beside a held call",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": "GET"}},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "out", "type": "ChatOutput"},
            {"id": "ok", "type": "ChatOutput", "params": {"text": "ok"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "call.body"},
            {"from": "ask.message", "to": "gate.prompt"},
            {"from": "call.response", "to": "out.input_value"},
            {"from": "gate.branch_approve", "to": "ok.input_value"},
        ],
    }


@pytest.mark.both_stores
async def test_a_layer_that_ends_after_its_run_was_stopped_leaves_no_checkpoint(client, service, store, settings,
                                                                                 user, make_flow, http_counter):
    flow = await make_flow(gate_beside_held_call(f"{http_counter.url}/block/cp"))
    async with build_worker(client, store, settings):
        job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await eventually(lambda: http_counter.counts["/block/cp"] == 1, what="the held call")
        assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled
        http_counter.release.set()  # the layer (if it still runs) now ends with its pause
    # the worker has shut down: every activity it ran has returned
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    assert await store.load_latest_checkpoint(job.run_id) is None
    assert (await event_names(store, job.job_id)).count("human_input_required") == 0


class HeldResume:
    """The real ``resume_run``, whose result is held back until ``release`` (a slow worker)."""

    def __init__(self, real: FlowActivities) -> None:
        self.real = real
        self.applied = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="resume_run")
    async def resume_run(self, inp: ResumeRunInput) -> ResumeRunOutput:
        out = await self.real.resume_run(inp)
        self.applied.set()
        await self.release.wait()
        return out


@pytest.mark.both_stores
async def test_a_decision_answered_after_the_run_was_stopped_leaves_the_status_cancelled(
        client, service, store, settings, user, make_flow, http_counter):
    flow = await make_flow({
        "name": "gate then call",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/after", "method": "POST"}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [
            {"from": "ask.message", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "call.body"},
            {"from": "call.response", "to": "out.input_value"},
        ],
    })
    real = FlowActivities(store, settings)
    held = HeldResume(real)
    acts = [held.resume_run if a.__name__ == "resume_run" else a for a in real.all()]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await wait_status(store, job.job_id, JobStatus.suspended)
        resume = asyncio.create_task(service.resume(user, job.job_id, f"gate:{job.job_id}",
                                                    Decision(action_id="approve")))
        await asyncio.wait_for(held.applied.wait(), 60)  # claimed and applied; its answer not yet back
        assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled
        held.release.set()
        assert (await resume).status == "resuming"  # the decision was applied, before the stop
        assert (await store.get_job(job.job_id)).status == JobStatus.cancelled
        handle = service.client.get_workflow_handle(job.job_id)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        desc = await handle.describe()
        history = await handle.fetch_history()
    assert desc.typed_search_attributes.get(SA_STATUS) == "cancelled"  # the Web UI lists it as what it is
    assert http_counter.counts["/after"] == 0  # nothing ran after the stop
    assert (await event_names(store, job.job_id))[-1] == "run_cancelled"
    # its history replays
    await replayer().replay_workflow(history)


class TimeoutRace:
    """The maximum suspension fires; while its ``finish(timed_out)`` runs, a decision's claim gets
    in first (the job is ``in_progress`` when finish writes), and applying that decision then
    fails (its claim is rolled back: the job is ``suspended`` again)."""

    def __init__(self, real: FlowActivities, store) -> None:
        self.real, self.store = real, store
        self.finishing = asyncio.Event()
        self.claimed = asyncio.Event()
        self.finished = asyncio.Event()

    @activity.defn(name="finish")
    async def finish(self, inp: FinishInput) -> FinishOutput:
        if inp.status == "timed_out" and not self.finished.is_set():
            self.finishing.set()
            await self.claimed.wait()
            out = await self.real.finish(inp)
            self.finished.set()
            return out
        return await self.real.finish(inp)

    @activity.defn(name="resume_run")
    async def resume_run(self, inp: ResumeRunInput) -> ResumeRunOutput:
        if inp.probe:  # a catch-up's look at the store, not the decision
            return await self.real.resume_run(inp)
        assert await self.store.claim_suspended_for_resume(inp.job_id, inp.request_id, token=inp.token)
        self.claimed.set()
        await self.finished.wait()
        raise ApplicationError("applying the decision failed", type="DECISION_FAILED", non_retryable=True)


@pytest.mark.both_stores
async def test_a_failed_decision_racing_the_maximum_suspension_still_ends_the_run(
        client, store, settings, user, make_flow):
    settings = settings.model_copy(update={"max_suspend_seconds": 1})
    service = RunService(settings, store, client)
    real = FlowActivities(store, settings)
    race = TimeoutRace(real, store)
    swap = {"finish": race.finish, "resume_run": race.resume_run}
    acts = [swap.get(a.__name__, a) for a in real.all()]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await asyncio.wait_for(race.finishing.wait(), 60)  # the timer fired; finish not yet written
        with pytest.raises(SignoffError):
            await service.resume(user, job.job_id, f"gate:{job.job_id}", Decision(action_id="approve"))
        # the claim was rolled back: the run is past its maximum suspension and must still end
        ended = await wait_status(store, job.job_id, JobStatus.timed_out, timeout=30)
        handle = service.client.get_workflow_handle(job.job_id)
        assert (await handle.result())["status"] == "timed_out"
        history = await handle.fetch_history()
    assert ended.pending is None
    assert (await event_names(store, job.job_id))[-1] == "run_timed_out"
    # a decision that failed is no sign that the run is behind its job: no catch-up was sent
    # (its look at the store once met the failing decision's claim, and the run never ended)
    updates = [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
               for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert updates == ["resume"]
    await replayer().replay_workflow(history)


class StaleFirstRead(StoreProxy):
    """The store, whose first read of a running job is answered only once the job has paused
    since: a stop that read ``in_progress`` a moment before the run's layer persisted its pause."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.armed = True

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args, **kwargs):
            out = await inner(*args, **kwargs)
            if name == "get_job" and self.armed and out is not None and out.status == JobStatus.in_progress:
                self.armed = False
                await eventually(lambda: _suspended(inner, *args), what="the run paused")
            return out

        return call


async def _suspended(get_job, *args) -> bool:
    return (await get_job(*args)).status == JobStatus.suspended


async def test_a_stop_racing_a_pause_being_persisted_still_stops(client, store, settings, user, make_flow, worker,
                                                                http_counter):
    """The stop reads the job running; its layer then persists the run's next pause before the
    stop's conditional end (which expects a running job) is written. The stop reads the job
    again and takes the cancel claim of the suspended job: stopped, not left waiting."""
    flow = await make_flow({
        "name": "call then gate",
        "nodes": [{"id": "ask", "type": "ChatInput"},
                  {"id": "call", "type": "HTTPRequest", "params": {"url": f"{http_counter.url}/x", "method": "POST"}},
                  {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
                  {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "gate.prompt"},
                  {"from": "gate.branch_approve", "to": "out.input_value"}]})
    service = RunService(settings, StaleFirstRead(store), client)
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    await wait_status(store, job.job_id, JobStatus.in_progress)
    stopped = await service.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    assert (await store.get_job(job.job_id)).status == JobStatus.cancelled
    with pytest.raises(WorkflowFailureError):  # its workflow was let go of (cancelled)
        await service.client.get_workflow_handle(job.job_id).result()
    assert (await event_names(store, job.job_id))[-2:] == ["human_input_required", "run_cancelled"]


class HoldBeforeRecord(StoreProxy):
    """The store, whose first ``record_decision`` waits until ``release``: the decision was
    applied and is about to be written, its claim with it (issue 33: the job the attempt read
    waits for the request, so the claim rides in the record), while a stop ends the job."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.claimed = asyncio.Event()
        self.release = asyncio.Event()

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def record(*args, **kwargs):
            if name == "record_decision" and not self.claimed.is_set():
                self.claimed.set()
                await self.release.wait()
            return await inner(*args, **kwargs)

        return record


@pytest.mark.parametrize("cancel", ["at once", "later"])
@pytest.mark.both_stores  # a stop raced through the whole stack
async def test_a_stop_between_the_claim_and_the_record_refuses_the_decision(client, service, store, settings,
                                                                            user, make_flow, cancel, monkeypatch):
    """The decision was applied, then the stop ended the job before the decision's write (its
    claim and its record, one transaction) reached the store: the store records no decision
    after ``run_cancelled``, and the resume is refused (409
    NOT_RESUMABLE), never answered as applied: the decision never took effect. The stop's cancel
    of the workflow reaches it at once (while the decision's task runs), or ``later`` (the API
    process between the end it wrote and the cancel, or Temporal away meanwhile: the release
    outbox): the decision's answer then comes first, and must not say it was applied."""
    held = HoldBeforeRecord(store)
    acts = FlowActivities(held, settings).all()  # type: ignore[arg-type]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await wait_status(store, job.job_id, JobStatus.suspended)
        go = asyncio.Event()
        if cancel == "later":
            backend = service.backend_of(job)
            release = backend.release

            async def held_release(job_id: str) -> None:
                await go.wait()
                await release(job_id)

            monkeypatch.setattr(backend, "release", held_release)
        else:
            go.set()
        resume = asyncio.create_task(service.resume(user, job.job_id, f"gate:{job.job_id}",
                                                    Decision(action_id="approve")))
        await asyncio.wait_for(held.claimed.wait(), 60)  # applied; its claim and record not written yet
        assert (await store.get_job(job.job_id)).status == JobStatus.suspended  # the claim rides in the record
        stop = asyncio.create_task(service.stop(user, job.job_id))
        await wait_status(store, job.job_id, JobStatus.cancelled)  # the stop wrote the end
        held.release.set()
        with pytest.raises(SignoffError) as refused:
            await resume
        assert refused.value.code == "NOT_RESUMABLE", refused.value.message
        go.set()
        assert (await stop).status == JobStatus.cancelled
        handle = service.client.get_workflow_handle(job.job_id)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        history = await handle.fetch_history()
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    names = await event_names(store, job.job_id)
    assert "human_input_decision" not in names
    assert names[-1] == "run_cancelled" and names.count("run_cancelled") == 1
    await replayer().replay_workflow(history)


class HoldAfterRecord(StoreProxy):
    """The store, whose first ``record_decision`` returns only after ``release``: the decision is
    recorded, and the task that applies it goes on (to the completion, then its answer) only once
    a stop has ended the job and asked for the workflow's cancel."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.recorded = asyncio.Event()
        self.release = asyncio.Event()

    def _wrap(self, name: str):
        inner = getattr(self._store, name)

        async def call(*args, **kwargs):
            out = await inner(*args, **kwargs)
            if name == "record_decision" and not self.recorded.is_set():
                self.recorded.set()
                await self.release.wait()
            return out

        return call


@pytest.mark.parametrize("surface", ["api", "temporal"])
@pytest.mark.both_stores  # a stop raced through the whole stack
async def test_a_stop_after_the_record_answers_the_decision_as_applied(client, service, store, settings, user,
                                                                       make_flow, surface):
    """The decision is recorded; before its task ends, a stop ends the job (the completion the
    decision reaches is refused) and asks for the workflow's cancel, which reaches the server while
    that task runs. The decision took effect, then the stop: the resume is answered as applied,
    through the API and through Temporal (an Update sent by the CLI or a client), the run ends
    cancelled with ``run_cancelled`` after the decision. Before, the task that answered the Update
    also closed the workflow, and the server refused it for the cancel it had not handled: the
    Update failed ("The run is over") while its decision stood in the log."""
    held = HoldAfterRecord(store)
    acts = FlowActivities(held, settings).all()  # type: ignore[arg-type]
    async with build_worker(client, store, settings, activities=acts):
        job, _ = await service.submit(user, await make_flow(), input_value="x", session_id=None, tweaks=None,
                                      idempotency_key=None, mode="background")
        await wait_status(store, job.job_id, JobStatus.suspended)
        request_id = f"gate:{job.job_id}"
        handle = service.client.get_workflow_handle(job.job_id)
        if surface == "api":
            resume = asyncio.create_task(service.resume(user, job.job_id, request_id, Decision(action_id="approve")))
        else:
            resume = asyncio.create_task(handle.execute_update(
                "resume", ResumeInput(request_id=request_id, decision=Decision(action_id="approve"), user=user.id),
                id=f"test-{uuid.uuid4()}", result_type=ResumeResult))
        await asyncio.wait_for(held.recorded.wait(), 60)  # recorded; its task not done yet
        assert (await service.stop(user, job.job_id)).status == JobStatus.cancelled  # ended, cancel asked
        held.release.set()
        assert (await resume).status == "resuming"  # the decision took effect, and it says so
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        history = await handle.fetch_history()
    job = await store.get_job(job.job_id)
    assert job.status == JobStatus.cancelled and job.pending is None
    names = await event_names(store, job.job_id)
    assert names.count("human_input_decision") == 1 and "end" not in names
    assert names[-1] == "run_cancelled" and names.count("run_cancelled") == 1
    await replayer().replay_workflow(history)
