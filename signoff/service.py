"""The service the API and the CLI both call: submit, resume, stop, status. Routes stay thin.

The job table (store) is the source of truth for what a job is; Temporal runs it. Every
decision goes through the workflow's ``resume`` Update, whose handler takes the same
single-flight claim as any other caller, so the API, the CLI and the Web UI can never apply two
decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from datetime import timedelta

import temporalio.client
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from signoff.engine.errors import Forbidden, InvalidDecision, JobNotFound, NotResumable, SignoffError, Unavailable
from signoff.engine.models import Decision, FlowRecord, Job, JobStatus, NewJob, User, utcnow
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.engine import tracing
from signoff.engine.tracing import run_context
from signoff.activities.state import blob_prefix
from signoff.periodic import periodically
from signoff.inline import RUNNER_INLINE, RUNNER_TEMPORAL, InlineRuns, is_inline, sweep
from signoff.workflows.types import RESUME, WORKFLOW_TYPE, FlowRunInput, ResumeInput

SA_FLOW = SearchAttributeKey.for_keyword("SignoffFlowId")
SA_SESSION = SearchAttributeKey.for_keyword("SignoffSessionId")
SA_USER = SearchAttributeKey.for_keyword("SignoffUserId")
SA_STATUS = SearchAttributeKey.for_keyword("SignoffStatus")

log = logging.getLogger("signoff.service")

_ERRORS: dict[str, type[SignoffError]] = {
    "NOT_RESUMABLE": NotResumable,
    "INVALID_DECISION": InvalidDecision,
}


async def connect_client(settings: Settings) -> temporalio.client.Client:
    """A Temporal client with the data converter the workflow and activities expect."""
    from signoff.telemetry import client_interceptors

    return await temporalio.client.Client.connect(
        settings.effective_temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        interceptors=client_interceptors(),  # Temporal's spans, in the run's trace (docs/tracing.md)
    )


def with_converter(client: temporalio.client.Client) -> temporalio.client.Client:
    """The same connection, using signoff's (pydantic) data converter."""
    if client.data_converter is pydantic_data_converter:
        return client
    config = client.config()
    config["data_converter"] = pydantic_data_converter
    return temporalio.client.Client(**config)


def _valid_job_id(job_id: str) -> bool:
    try:
        uuid.UUID(job_id)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


class SignoffService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: temporalio.client.Client,
        *,
        local_activities: bool = False,
    ) -> None:
        self.settings = settings
        self.store = store
        self.client = with_converter(client)
        self.local_activities = local_activities
        self.inline = InlineRuns(store, settings)  # sync runs of gate-less flows (docs/inline.md)

    # ---- submit ----------------------------------------------------------------------------

    async def submit(
        self,
        user: User,
        flow: FlowRecord,
        *,
        input_value: str,
        session_id: str | None,
        tweaks: dict | None,
        idempotency_key: str | None,
        mode: str,
        sync_timeout: float | None = None,
    ) -> tuple[Job, bool]:
        """Create the job and start its FlowRun workflow. A repeated idempotency key returns
        (the first job, False) and starts nothing. Supersedes this user's suspended runs of this
        flow in the same effective session first.

        A ``sync`` run of a flow with no gate runs in this process instead (docs/inline.md): the
        job is created with a lease and ``request.runner = "inline"``, and the call returns once
        the run ended or ``sync_timeout`` (default ``sync_timeout_seconds``) passed."""
        spec = self.inline.spec_for(flow, tweaks) if mode == "sync" and self.settings.inline_sync else None
        job_id = str(uuid.uuid4())
        new = NewJob(
            job_id=job_id,
            flow_id=flow.id,
            flow_version=flow.version,
            user_id=user.id,
            session_id=session_id,
            request={"input_value": input_value, "tweaks": tweaks or {}, "mode": mode, "session_id": session_id,
                     "runner": RUNNER_INLINE if spec is not None else RUNNER_TEMPORAL},
            idempotency_key=idempotency_key,
            lease_until=self.inline.lease_until() if spec is not None else None,
            # an inline run starts at once: born in_progress (one write less than queued → in_progress)
            status=JobStatus.in_progress if spec is not None else JobStatus.queued,
        )
        job, created = await self.store.create_job(new)
        if not created:
            if job.status == JobStatus.queued and not is_inline(job):
                # the first submit may have died between the insert and the start: the retry
                # with its idempotency key finishes the job (starting is idempotent)
                await self._ensure_workflow(job, flow)
            return job, False
        await self.supersede(job)
        if spec is None:
            await self.start_workflow(job, flow)
            return job, True
        self.inline.start(job, flow, spec)
        await self.inline.wait(job.job_id, sync_timeout if sync_timeout is not None else self.settings.sync_timeout_seconds)
        return await self._job(job.job_id), True

    async def _ensure_workflow(self, job: Job, flow: FlowRecord) -> None:
        """Start the job's workflow unless it exists (running or already closed)."""
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self.start_workflow(job, flow)

    async def start_unstarted(self, *, older_than: float | None = None) -> list[str]:
        """Start the workflow of runs still ``queued`` ``older_than`` seconds (default
        ``start_grace_seconds``) after their submit: the process that submitted them died
        between the insert and the start. Returns the job ids handled."""
        grace = self.settings.start_grace_seconds if older_than is None else older_than
        handled = []
        for job in await self.store.list_unstarted(utcnow() - timedelta(seconds=grace)):
            flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
            if flow is None:  # deleted meanwhile: the first layer reports it as the run's failure
                flow = FlowRecord(id=job.flow_id, owner_id=job.user_id, name=job.flow_id, spec={}, version=0,
                                  created_at=job.created_at, updated_at=job.created_at)
            await self._ensure_workflow(job, flow)
            handled.append(job.job_id)
        if handled:
            log.warning("started the workflow of %d run(s) left queued: %s", len(handled), ", ".join(handled))
        return handled

    async def recover(self) -> None:
        """One round of the API's sweep: inline runs whose process died end as ``failed``
        (docs/inline.md), runs left without their workflow get it."""
        await sweep(self.store)
        await self.start_unstarted()

    def sweeping(self) -> contextlib.AbstractAsyncContextManager[None]:
        """``recover()`` now and every ``inline_sweep_seconds`` while the block runs (the API)."""
        return periodically(self.recover, self.settings.inline_sweep_seconds, name="sweep")

    async def start_workflow(self, job: Job, flow: FlowRecord) -> None:
        session = job.effective_session
        with run_context(job.run_id):  # Temporal's spans join the run's trace
            await self._start_workflow(job, flow, session)

    async def _start_workflow(self, job: Job, flow: FlowRecord, session: str) -> None:
        await self.client.start_workflow(
            WORKFLOW_TYPE,
            FlowRunInput(
                job_id=job.job_id,
                flow_id=job.flow_id,
                flow_name=flow.name,
                user_id=job.user_id,
                session_id=job.session_id,
                max_suspend_seconds=self.settings.max_suspend_seconds,
                local_activities=self.local_activities,
            ),
            id=job.job_id,
            task_queue=self.settings.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(SA_FLOW, job.flow_id),
                    SearchAttributePair(SA_SESSION, session),
                    SearchAttributePair(SA_USER, job.user_id),
                    SearchAttributePair(SA_STATUS, JobStatus.queued.value),
                ]
            ),
            static_summary=f"{flow.name} · session {session}",
            static_details=f"Flow `{flow.name}` ({flow.id} v{flow.version}) run by user {job.user_id}",
        )

    async def supersede(self, job: Job) -> list[str]:
        """Cancel this user's suspended runs of this flow in the same effective session (never
        others). Only the winner of the cancel claim cleans up; returns the job ids cancelled."""
        cancelled: list[str] = []
        for old in await self.store.find_suspended(job.flow_id, job.user_id, job.effective_session):
            if old.job_id == job.job_id:
                continue
            event = ("run_cancelled", {"reason": "superseded", "superseded_by": job.job_id})
            if not await self.store.claim_suspended_for_cancel(old.job_id, event=event):
                continue  # a resume (or another cancel) won: leave it alone
            await self._cleanup_cancelled(old.job_id)
            cancelled.append(old.job_id)
        return cancelled

    async def _cleanup_cancelled(self, job_id: str) -> None:
        """After a won cancel claim (which cleared the pending request and wrote ``run_cancelled``
        in its own transaction): delete the checkpoint, stamp the cards, cancel the workflow. Each
        step is idempotent. A crash before the workflow is cancelled leaves the job cancelled with
        its event; the workflow ends at its maximum-suspension timer (its finish sees the job
        already ended, writes nothing and deletes the checkpoint)."""
        job = await self.store.get_job(job_id)
        await self.store.delete_checkpoints(job.run_id if job else job_id)
        await self.store.supersede_cards(job_id)
        await self._cancel_workflow(job_id)

    async def _cancel_workflow(self, job_id: str) -> None:
        try:
            await self.client.get_workflow_handle(job_id).cancel()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _workflow_running(self, job_id: str) -> bool:
        """Whether the job's workflow exists and is still running (a cancel of a closed one is
        accepted by the server and does nothing)."""
        try:
            desc = await self.client.get_workflow_handle(job_id).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return desc.status == temporalio.client.WorkflowExecutionStatus.RUNNING

    async def _close_trace(self, job: Job) -> None:
        """The root span of a run ended here (no workflow did it), with how it ended (same ids:
        replaces the provisional one its first layer wrote), as the activities close it."""
        from signoff.engine.tracing.sdk import collect_spans, install

        install(self.settings)  # idempotent: the span needs the SDK in this process
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        async with collect_spans(self.store):
            tracing.close_run(run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id,
                              name=flow.name if flow else job.flow_id, start=job.created_at,
                              end=job.finished_at or utcnow(), status=job.status.value, error=job.error)
            await tracing.flush()

    # ---- resume ----------------------------------------------------------------------------

    async def resume(self, user: User, job_id: str, request_id: str, decision: Decision) -> Job:
        """Apply a decision through the workflow's ``resume`` Update. Raises, in this order,
        JobNotFound (404), Forbidden (403), InvalidDecision (422), NotResumable (409)."""
        job = await self._owned_job(user, job_id)
        if not await self.store.has_permission(job.flow_id, user.id, "execute"):
            raise Forbidden(job_id=job_id)
        pending = job.pending
        if pending is not None and decision.action_id not in pending.allowed_decisions:
            raise InvalidDecision(
                f"action_id {decision.action_id!r} is not one of {pending.allowed_decisions}", job_id=job_id
            )
        if job.status != JobStatus.suspended or pending is None or pending.request_id != request_id:
            raise NotResumable(job_id=job_id)
        handle = self.client.get_workflow_handle(job_id)
        update_id = f"resume-{uuid.uuid4()}"
        try:
            with run_context(job.run_id):  # the Update's spans join the run's trace
                await handle.execute_update(
                    RESUME,
                    ResumeInput(request_id=request_id, decision=decision, decided_by=user.id),
                    id=update_id,
                    rpc_timeout=timedelta(seconds=self.settings.resume_timeout_seconds),
                )
        except WorkflowUpdateFailedError as err:
            raise self._update_error(err, job_id) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            return await self._settle_update(handle, update_id, job_id)
        except RPCError:
            # the workflow is gone or closed: that is NOT_RESUMABLE unless the job still waits
            if (await self._job(job_id)).status == JobStatus.suspended:
                raise
            raise NotResumable("The run is over", job_id=job_id) from None
        return await self._job(job_id)

    async def _settle_update(self, handle: temporalio.client.WorkflowHandle, update_id: str, job_id: str) -> Job:
        """The Update did not answer in time: find out what became of it, by its own id."""
        try:
            await handle.get_update_handle(update_id).result(rpc_timeout=timedelta(seconds=2))
        except WorkflowUpdateFailedError as err:
            raise self._update_error(err, job_id) from None
        except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as err:
            if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
                # never admitted: the run ended (another decision won) or it is not running
                if (await self._job(job_id)).status != JobStatus.suspended:
                    raise NotResumable("Another decision was applied first", job_id=job_id) from None
            raise Unavailable(
                f"No worker took the decision within {self.settings.resume_timeout_seconds:g} s (is a worker "
                "running?). It has not been applied yet and may still be, once a worker runs: check the job's "
                "status before sending it again.",
                job_id=job_id,
            ) from None
        return await self._job(job_id)

    @staticmethod
    def _update_error(err: WorkflowUpdateFailedError, job_id: str) -> SignoffError:
        cause = err.cause
        while cause is not None and not isinstance(cause, ApplicationError):
            cause = cause.cause
        if isinstance(cause, ApplicationError):
            cls = _ERRORS.get(cause.type or "", NotResumable)
            return cls(cause.message, job_id=job_id)
        return NotResumable(str(err), job_id=job_id)

    # ---- stop --------------------------------------------------------------------------------

    async def stop(self, user: User, job_id: str) -> Job:
        """Suspended: take the cancel claim and clean up. Running: cancel the workflow and wait
        (briefly) for it to record its end. Returns what the job really is afterwards."""
        job = await self._owned_job(user, job_id)
        if job.status.terminal:
            return job
        if is_inline(job):  # no workflow: cancel the task here, or ask its process durably
            await self.inline.stop(job_id)
            job = await self.wait_for_terminal(job_id, timeout=10.0)
            if not job.status.terminal:
                await sweep(self.store)  # its process may be dead: an expired lease ends it now
                job = await self._job(job_id)
            return job
        if job.status == JobStatus.suspended:
            if await self.store.claim_suspended_for_cancel(job_id, event=("run_cancelled", {"reason": "stopped"})):
                await self._cleanup_cancelled(job_id)
                return await self._job(job_id)
            job = await self._job(job_id)  # a resume won the race: it is running now
            if job.status.terminal:
                return job
        if not await self._workflow_running(job_id):
            # No running workflow will ever end this job: its submit died before starting it
            # (queued; the sweep would start it later), or it was ended from Temporal's side
            # (terminated, timed out). End it here, as a stop; a workflow that starts after this
            # finds the job ended at its first layer.
            if await self.store.set_status(job_id, JobStatus.cancelled,
                                           expect=[JobStatus.queued, JobStatus.in_progress, JobStatus.suspended],
                                           event=("run_cancelled", {"reason": "stopped"})):
                job = await self._job(job_id)
                await self._close_trace(job)
                await self.store.delete_checkpoints(job.run_id)
                await self.store.delete_blobs(blob_prefix(job_id))
                await self.store.supersede_cards(job_id)
            return await self._job(job_id)
        await self._cancel_workflow(job_id)
        return await self.wait_for_terminal(job_id, timeout=10.0)

    # ---- status ------------------------------------------------------------------------------

    async def get_job(self, user: User, job_id: str) -> Job:
        return await self._owned_job(user, job_id)

    async def wait_for_pause_or_end(self, job_id: str, timeout: float) -> Job:
        """Poll the job table until the job is suspended or terminal, or ``timeout`` passes
        (then returns the job as it is)."""
        if self.inline.running(job_id) is not None:  # an inline run of this process: no polling
            await self.inline.wait(job_id, timeout)
            return await self._job(job_id)
        return await self._wait(job_id, timeout, lambda j: j.status == JobStatus.suspended or j.status.terminal)

    async def wait_for_terminal(self, job_id: str, timeout: float) -> Job:
        return await self._wait(job_id, timeout, lambda j: j.status.terminal)

    async def _wait(self, job_id: str, timeout: float, done) -> Job:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            job = await self._job(job_id)
            if done(job) or time.monotonic() >= deadline:
                return job
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.1)

    async def _owned_job(self, user: User, job_id: str) -> Job:
        if not _valid_job_id(job_id):
            raise JobNotFound(job_id=job_id)
        job = await self.store.get_job(job_id)
        if job is None or job.user_id != user.id:
            raise JobNotFound(job_id=job_id)
        return job

    async def _job(self, job_id: str) -> Job:
        job = await self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id=job_id)
        return job


__all__ = ["SignoffService", "connect_client", "with_converter"]
