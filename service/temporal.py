"""The Temporal backend: each run is a FlowRun workflow whose id is the job id (DESIGN §2, §7).

A decision is the workflow's ``resume`` Update, whose handler takes the same single-flight
claim as any other caller, so the API, the CLI and the Web UI can never apply two decisions.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from datetime import timedelta
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import temporalio.client
import temporalio.runtime
import temporalio.service
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import (
    Priority,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from signoff.activities.failures import failure_code, from_failure
from signoff.engine.errors import (
    AlreadyVoted,
    Forbidden,
    InvalidDecision,
    InvalidValues,
    NotAnApprover,
    NotResumable,
    SignoffError,
    Unavailable,
)
from signoff.engine.models import Decision, FlowRecord, Job, JobStatus, utcnow
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.engine.tracing import run_context
from signoff.service.backend import Resumed, RunBackend
from signoff.workflows.types import (
    CATCH_UP,
    RESUME,
    SA_FLOW,
    SA_SESSION,
    SA_STATUS,
    SA_USER,
    WORKFLOW_TYPE,
    FlowRunInput,
    ResumeInput,
    ResumeResult,
)

log = logging.getLogger("signoff.service")

# What a decision's Update may be refused with, answered to the caller as such (anything else:
# NOT_RESUMABLE, the decision was not applied).
DECISION_REFUSALS = (NotResumable, InvalidDecision, InvalidValues, Forbidden, NotAnApprover, AlreadyVoted)


def client_interceptors() -> list[Any]:
    """Temporal's OpenTelemetry interceptor, for ``Client.connect(interceptors=...)``: client,
    workflow and activity spans, propagated through Temporal headers (docs/tracing.md)."""
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


async def connect_client(settings: Settings) -> temporalio.client.Client:
    """A Temporal client with the data converter the workflow and activities expect, over TLS
    (mutual TLS with a client certificate, Temporal Cloud's API key) when the settings say so."""
    try:
        return await temporalio.client.Client.connect(
            settings.effective_temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            interceptors=client_interceptors(),  # Temporal's spans, in the run's trace
            tls=tls_config(settings),
            api_key=settings.temporal_api_key,
            runtime=sdk_runtime(settings),
        )
    except RuntimeError as err:  # the SDK's connection error: say where and what to check
        raise Unavailable(f"Temporal is not reachable at {settings.effective_temporal_address}"
                          f"{' over TLS' if settings.temporal_tls_enabled else ''}: {err}") from err


_runtimes: dict[tuple[str, int], temporalio.runtime.Runtime] = {}


def sdk_runtime(settings: Settings) -> temporalio.runtime.Runtime | None:
    """With SIGNOFF_TEMPORAL_METRICS_PORT, a Temporal runtime whose metrics (the SDK's client and
    worker metrics: task latencies, slots, poll results...) are served in Prometheus' format on
    that port (one per process and address); else the default runtime."""
    if settings.temporal_metrics_port is None:
        return None
    key = (settings.api_host, settings.temporal_metrics_port)
    if key not in _runtimes:
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        _runtimes[key] = Runtime(telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=f"{key[0]}:{key[1]}")))
    return _runtimes[key]


def tls_config(settings: Settings) -> temporalio.service.TLSConfig | bool:
    """The client's TLS (False: plain). The CA defaults to the system's roots."""
    if not settings.temporal_tls_enabled:
        return False

    def read(path: Any) -> bytes | None:
        return Path(path).read_bytes() if path else None

    return temporalio.service.TLSConfig(
        server_root_ca_cert=read(settings.temporal_tls_ca),
        client_cert=read(settings.temporal_tls_cert),
        client_private_key=read(settings.temporal_tls_key),
        domain=settings.temporal_tls_server_name,
    )


def with_converter(client: temporalio.client.Client) -> temporalio.client.Client:
    """The same connection, using signoff's (pydantic) data converter."""
    if client.data_converter is pydantic_data_converter:
        return client
    config = client.config()
    config["data_converter"] = pydantic_data_converter
    return temporalio.client.Client(**config)


def with_tracing(client: temporalio.client.Client) -> temporalio.client.Client:
    """The same connection with Temporal's tracing interceptor (unchanged when it has one)."""
    from temporalio.contrib.opentelemetry import TracingInterceptor

    config = client.config()
    if any(isinstance(i, TracingInterceptor) for i in config.get("interceptors", [])):
        return client
    config["interceptors"] = [*config.get("interceptors", []), *client_interceptors()]
    return temporalio.client.Client(**config)


# What a call gets while the frontend is down or restarting (the SDK retried it for a while).
_AWAY = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})


def _not_ready(err: RPCError) -> bool:
    """Whether Temporal refused an Update because the workflow could not take it: its workflow
    task failed (a worker's deadlock detector, a bug, a lost worker) and waits to be retried
    (FAILED_PRECONDITION with WorkflowNotReadyFailure). Nothing was applied; a retry later may be."""
    if err.status != RPCStatusCode.FAILED_PRECONDITION:
        return False
    try:
        return any(d.type_url.endswith("WorkflowNotReadyFailure") for d in err.grpc_status.details)
    except Exception:  # details that do not parse: not this refusal
        return False


@contextlib.contextmanager
def reaching_temporal(what: str, job_id: str | None = None) -> Iterator[None]:
    """Temporal's unavailability as :class:`Unavailable` (503 with Retry-After, never a 500):
    nothing was done that a retry would repeat (``what`` says what was not)."""
    try:
        yield
    except RPCError as err:
        if err.status in _AWAY:
            raise Unavailable(f"Temporal is not reachable right now ({what}): {err.message}; try again",
                              job_id=job_id) from None
        raise


def fair_share(user_id: str) -> Priority:
    """The run's place in the task queue: its user's id as Temporal's fairness key, so that a
    server with task-queue fairness on (``signoff dev``'s: signoff/devserver.py) dispatches the
    backlogs of different users in turn, not first in first out (one user's hundred queued tasks
    never sit in front of another's one). Activities inherit it from their workflow. A server
    without fairness ignores it. Keys are at most 64 bytes: a user id is a UUID."""
    return Priority(fairness_key=user_id[:64])


class TemporalBackend(RunBackend):
    name: ClassVar[str] = "temporal"
    # Ask for eager workflow start (docs/temporal.md, "Dev server tuning"): when a worker of this
    # connection polls the task queue in this process (`signoff dev`) and the server allows it
    # (`system.enableEagerWorkflowStart`), the start's reply carries the first workflow task and
    # skips the trip through matching; otherwise the start is an ordinary one. The workflow id,
    # the id policies and an existing workflow's error are the same either way.
    eager_start: ClassVar[bool] = True

    def __init__(self, settings: Settings, store: Store, client: temporalio.client.Client) -> None:
        self.settings = settings
        self.store = store
        self.client = with_converter(client)

    # ---- start -------------------------------------------------------------------------------

    async def start(self, job: Job, flow: FlowRecord) -> None:
        session = job.effective_session
        with run_context(job.run_id), contextlib.suppress(WorkflowAlreadyStartedError), \
                reaching_temporal("the run is queued; it starts when Temporal is back, or when the submit is sent "
                                  "again with its idempotency key", job.job_id):
            # the start's spans join the run's trace; a workflow that exists (running or closed)
            # is this job's: starting is idempotent
            await self.client.start_workflow(
                WORKFLOW_TYPE,
                FlowRunInput(
                    job_id=job.job_id,
                    flow_id=job.flow_id,
                    flow_name=flow.name,
                    user_id=job.user_id,
                    session_id=job.session_id,
                    max_suspend_seconds=self.settings.max_suspend_seconds,
                    max_reminders=self.settings.max_reminders,
                ),
                id=job.job_id,
                task_queue=self.settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(SA_FLOW, job.flow_id),
                    SearchAttributePair(SA_SESSION, session),
                    SearchAttributePair(SA_USER, job.user_id),
                    SearchAttributePair(SA_STATUS, JobStatus.queued.value),
                ]),
                static_summary=f"{flow.name} · session {session}",
                static_details=f"Flow `{flow.name}` ({flow.id} v{flow.version}) run by user {job.user_id}",
                request_eager_start=self.eager_start,
                priority=fair_share(job.user_id),
            )

    async def recover(self, *, older_than: float | None = None) -> list[str]:
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
            await self.start(job, flow)
            handled.append(job.job_id)
        if handled:
            log.warning("started the workflow of %d run(s) left queued: %s", len(handled), ", ".join(handled))
        return handled

    # ---- decisions ---------------------------------------------------------------------------

    async def resume(self, job: Job, request_id: str, decision: Decision, decided_by: str, *,
                     via: str | None = None, checked: str | None = None) -> Resumed:
        return await self._resume(job, request_id, decision, decided_by, catch_up=True, via=via, checked=checked)

    async def _behind(self, job_id: str, request_id: str) -> bool:
        """Whether the run caught up with its job, which waits for ``request_id``."""
        now = await self.store.get_job(job_id)
        if now is None or not now.waits_for(request_id):
            return False
        try:
            return bool(await self.client.get_workflow_handle(job_id).execute_update(
                CATCH_UP, rpc_timeout=timedelta(seconds=self.settings.resume_timeout_seconds)))
        except (WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            return False  # not waiting, caught up enough already, or gone: the refusal stands

    async def _resume(self, job: Job, request_id: str, decision: Decision, decided_by: str, *,
                      catch_up: bool = False, via: str | None = None, checked: str | None = None) -> Resumed:
        update_id = f"resume-{uuid.uuid4()}"
        try:
            return await self._send(job, request_id, decision, decided_by, update_id, catch_up=catch_up, via=via,
                                    checked=checked)
        except (SignoffError, RPCError):
            # The Update's answer is not the last word: its decision may be recorded though the
            # answer was lost. A stop that reaches the workflow while the Update's task applies the
            # decision fails that task (the cancel is an event it did not handle); Temporal retries
            # the Update, which may find the workflow closed by the stop ("The run is over"), or
            # refused ("Another decision was applied first") by a run that went on from the
            # decision the lost task recorded. The store says what took effect: a decision recorded
            # under this Update's id is answered as applied (DESIGN §1: a decision event means a
            # decision took effect, and its caller is told so).
            try:
                recorded = await self._recorded(job.job_id, update_id)
            except SignoffError:
                recorded = None  # the store is away too: the Update's own answer stands
            if recorded is None:
                raise
            log.info("job %s: the decision of Update %s was recorded, its answer lost; answered as applied",
                     job.job_id, update_id)
            return recorded

    async def _recorded(self, job_id: str, update_id: str) -> Resumed | None:
        """The decision the Update ``update_id`` carried, as the store recorded it (None: not
        recorded). A quorum's decision is recorded with the vote that completed it."""
        for event in await self.store.read_events_named(job_id, "human_input_decision"):
            if event.data.get("update_id") == update_id:
                votes = len(event.data.get("votes") or ())
                return Resumed("resuming", votes, max(votes, 1))
        return None

    async def _send(self, job: Job, request_id: str, decision: Decision, decided_by: str, update_id: str, *,
                    catch_up: bool, via: str | None = None, checked: str | None = None) -> Resumed:
        handle = self.client.get_workflow_handle(job.job_id)
        try:
            with run_context(job.run_id):  # the Update's spans join the run's trace
                result: ResumeResult = await handle.execute_update(
                    RESUME,
                    ResumeInput(request_id=request_id, decision=decision, decided_by=decided_by, via=via,
                                checked=checked),
                    id=update_id,
                    rpc_timeout=timedelta(seconds=self.settings.resume_timeout_seconds),
                    result_type=ResumeResult,
                )
        except WorkflowUpdateFailedError as err:
            # Refused as not waiting for this request (that refusal only, not a decision that
            # failed) while the store shows the run waiting for exactly it: the workflow is behind
            # its job (a decision recorded in a workflow task lost with its Update). It catches
            # up, and the decision is sent once more.
            if catch_up and failure_code(err) == NotResumable.code and await self._behind(job.job_id, request_id):
                return await self._resume(job, request_id, decision, decided_by, via=via, checked=checked)
            raise from_failure(err, DECISION_REFUSALS, job_id=job.job_id) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            return await self._settle_update(handle, update_id, job.job_id)
        except RPCError as err:
            if err.status in _AWAY:
                raise Unavailable(f"Temporal is not reachable right now: {err.message}. The decision was not "
                                  "applied; send it again", job_id=job.job_id) from None
            if _not_ready(err):  # 503 with Retry-After, not a 500: the run is there, just not ready
                raise Unavailable("The run could not take the decision right now (its workflow task failed and "
                                  "is being retried). The decision was not applied; send it again shortly",
                                  job_id=job.job_id) from None
            # the workflow is gone or closed: that is NOT_RESUMABLE unless the job still waits
            if (await self._job(job.job_id)).status == JobStatus.suspended:
                raise
            raise NotResumable("The run is over", job_id=job.job_id) from None
        completed = None
        if result.completed is not None and result.status == "resuming":  # the step that took it ended the run
            completed = job.model_copy(update={"status": JobStatus.completed, "result": result.completed,
                                               "error": None, "pending": None})
        return Resumed(result.status, result.votes, result.required, completed=completed)

    async def _settle_update(self, handle: temporalio.client.WorkflowHandle, update_id: str, job_id: str) -> Resumed:
        """The Update did not answer in time: find out what became of it, by its own id."""
        try:
            result = await handle.get_update_handle(update_id, result_type=ResumeResult).result(
                rpc_timeout=timedelta(seconds=2))
        except WorkflowUpdateFailedError as err:
            raise from_failure(err, DECISION_REFUSALS, job_id=job_id) from None
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
        return Resumed(result.status, result.votes, result.required)

    # ---- stop --------------------------------------------------------------------------------

    async def release(self, job_id: str) -> None:
        """Cancel the workflow of a job the service ended. A crash before this leaves the job
        ended with its event; the workflow ends at its maximum-suspension timer (its finish sees
        the job already ended and writes nothing)."""
        try:
            with reaching_temporal("the workflow was not cancelled yet", job_id):
                await self.client.get_workflow_handle(job_id).cancel()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def _job(self, job_id: str) -> Job:
        job = await self.store.get_job(job_id)
        if job is None:
            raise NotResumable(f"Job {job_id!r} is gone", job_id=job_id)
        return job


__all__ = ["TemporalBackend", "client_interceptors", "connect_client", "with_converter", "with_tracing"]
