"""FlowRun: one durable workflow per run (id = job id). It only coordinates: every side effect
(building vertices, the job table, events, checkpoints) is an activity in ``activities/``.

Loop: run one layer (activity) → when the layer asked for a pause (the checkpoint is saved),
persist the pause and wait for the decision by Update or Signal ``resume``, bounded by the
deployment's maximum suspension (a durable timer). A decision is one activity (``resume_run``:
claim, apply, and the following instant layers inline) → next layer → ... → the last layer
records the completion; finish (status + terminal event) for the other ends.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from signoff.engine.models import PendingRequest
    from signoff.workflows.types import (
        PENDING_QUERY,
        REJECTED_QUERY,
        RESUME,
        WORKFLOW_TYPE,
        FinishInput,
        FinishOutput,
        FlowRunInput,
        PersistPauseInput,
        RecordEventInput,
        ResumeInput,
        ResumeResult,
        ResumeRunInput,
        ResumeRunOutput,
        RollbackResumeInput,
        RunLayerInput,
        RunLayerOutput,
        StateRef,
    )

SA_FLOW = SearchAttributeKey.for_keyword("SignoffFlowId")
SA_SESSION = SearchAttributeKey.for_keyword("SignoffSessionId")
SA_USER = SearchAttributeKey.for_keyword("SignoffUserId")
SA_STATUS = SearchAttributeKey.for_keyword("SignoffStatus")
SA_REQUEST = SearchAttributeKey.for_keyword("SignoffRequestId")

# Retry policy (docs/temporal.md): component errors marked non-retryable and validation errors
# fail at once; a retryable component error or an infrastructure error (database, network) is
# retried with backoff, 5 attempts at most, so a failing component is never retried forever.
LAYER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=["NON_RETRYABLE", "FLOW_INVALID", "NESTED_GATE", "NOT_RESUMABLE", "INVALID_DECISION"],
)
# A layer heartbeats (activities/flow.py) so that a layer lost with its worker is retried on
# another worker within seconds, not after the start-to-close timeout.
LAYER_HEARTBEAT = timedelta(seconds=5)
# Bookkeeping activities only touch the store: retry longer (the database may restart).
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
    non_retryable_error_types=["NON_RETRYABLE", "NOT_RESUMABLE", "INVALID_DECISION"],
)

# A rejected ``resume`` Signal is recorded (``resume_rejected``, one activity) at most this many
# times per pending request; the rest are counted in the workflow and logged, so a client
# spamming bad Signals cannot grow the workflow's history without bound (docs/temporal.md).
MAX_RECORDED_REJECTIONS = 20

_ENDED = frozenset({"completed", "failed", "cancelled", "timed_out"})


@workflow.defn(name=WORKFLOW_TYPE)
class FlowRun:
    def __init__(self) -> None:
        self._inp: FlowRunInput | None = None
        self._pending: PendingRequest | None = None
        self._state: StateRef | None = None
        self._resumed: RunLayerOutput | None = None  # where the run is after the applied decision
        self._step = 0
        self._in_flight = 0  # resume handlers between claim and outcome
        self._settled = 0  # resume handlers done (applied, refused or rolled back)
        self._status = "queued"
        self._rejections: dict[str | None, int] = {}  # rejected resume Signals per pending request id

    # ---- the run -----------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: FlowRunInput) -> dict[str, Any]:
        self._inp = inp
        try:
            status = await self._drive(inp)
        except (asyncio.CancelledError, CancelledError):
            # Stop (or supersede) of this run: record it, then end the workflow as cancelled.
            await self._cancelled(inp)
            raise
        except ActivityError as err:
            # The stop came while a bookkeeping activity ran (persist_pause, finish): its
            # cancellation surfaces as an ActivityError. Record it as a stop too, or the job stays
            # in_progress with no workflow left.
            if not isinstance(err.cause, CancelledError):
                raise
            await self._cancelled(inp)
            raise
        await workflow.wait_condition(workflow.all_handlers_finished)
        return {"job_id": inp.job_id, "status": status}

    async def _cancelled(self, inp: FlowRunInput) -> None:
        fin = await self._finish(FinishInput(job_id=inp.job_id, status="cancelled", state=self._state))
        self._set_status(fin.status)
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _drive(self, inp: FlowRunInput) -> str:
        self._set_status("in_progress")
        out: RunLayerOutput | None = None
        while True:
            if out is None:
                try:
                    out = await self._activity(
                        "run_layer",
                        RunLayerInput(job_id=inp.job_id, step=self._step, state=self._state, now=workflow.now()),
                        RunLayerOutput,
                        timeout=inp.layer_timeout_seconds,
                        retry=LAYER_RETRY,
                        heartbeat=LAYER_HEARTBEAT,
                    )
                except ActivityError as err:
                    if isinstance(err.cause, CancelledError):
                        raise asyncio.CancelledError() from err
                    return await self._fail(inp, err)
            if out.cancelled:  # the job had already ended: keep what it really is
                ended = out.status or "cancelled"
                self._set_status(ended)
                return ended
            self._step, self._state = out.step, out.state
            if out.done:  # the last layer already recorded the completion (one activity less)
                status = out.status or (await self._finish(
                    FinishInput(job_id=inp.job_id, status="completed", state=self._state))).status
                self._set_status(status)
                return status
            if out.pending is None:
                out = None  # next layer
                continue
            ended = await self._wait_for_decision(inp, out.pending)
            if ended is not None:
                return ended
            out = self._take_resumed()  # where the decision left the run (maybe further layers on)

    async def _wait_for_decision(self, inp: FlowRunInput, pending: PendingRequest) -> str | None:
        """Wait until a decision has been applied; None then, else the terminal status."""
        # Waiting starts now: the job becomes `suspended` in the store only after this workflow
        # knows its pending request, so a decision sent as soon as the job shows `suspended`
        # always finds the run waiting.
        self._pending = pending
        await self._activity("persist_pause", PersistPauseInput(
            job_id=inp.job_id, pending=pending, dedupe_key=f"pause:{self._step}:{pending.request_id}"), None,
            retry=STORE_RETRY)
        self._set_status("suspended", request_id=pending.request_id)
        workflow.set_current_details(self._details(pending))
        timeout = timedelta(seconds=inp.max_suspend_seconds) if inp.max_suspend_seconds else None
        while self._resumed is None:
            try:
                await workflow.wait_condition(lambda: self._resumed is not None, timeout=timeout)
            except asyncio.TimeoutError:
                while True:
                    # The maximum suspension is over. Ends the run unless a resume claim won first.
                    await workflow.wait_condition(lambda: not self._resuming)
                    if self._resumed is not None:
                        break
                    settled = self._settled
                    fin = await self._finish(FinishInput(job_id=inp.job_id, status="timed_out", state=self._state))
                    if fin.status in _ENDED:
                        self._pending = None
                        self._set_status(fin.status)
                        workflow.set_current_details(f"Ended: {fin.status}")
                        return fin.status
                    # A claim got in before finish wrote. Its decision goes on (the run continues)
                    # or fails and is rolled back: the job is suspended again, and its maximum
                    # suspension is still over, so finish again once that handler is done.
                    if self._resuming or self._settled != settled:
                        continue
                    timeout = None  # a claim is being applied: its outcome resumes the run
                    break
        self._pending = None
        workflow.set_current_details("Running")
        return None

    def _take_resumed(self) -> RunLayerOutput:
        out, self._resumed = self._resumed, None
        assert out is not None
        return out

    async def _fail(self, inp: FlowRunInput, err: ActivityError) -> str:
        cause = err.cause
        error: dict[str, Any] = {"error": str(cause or err), "type": "ActivityError"}
        if isinstance(cause, ApplicationError):
            error["type"] = cause.type or "ApplicationError"
            if cause.details and isinstance(cause.details[0], dict):
                error.update({k: v for k, v in cause.details[0].items() if k in ("vertex_id", "type", "error")})
        fin = await self._finish(FinishInput(job_id=inp.job_id, status="failed", state=self._state, error=error))
        self._set_status(fin.status)
        return fin.status

    @property
    def _resuming(self) -> bool:
        return self._in_flight > 0

    # ---- decisions -----------------------------------------------------------------------

    def _problem(self, inp: ResumeInput) -> tuple[str, str] | None:
        """(code, message) when this decision cannot be applied now, else None."""
        pending = self._pending
        if pending is None or self._resuming:
            return "NOT_RESUMABLE", "The run is not waiting for a decision"
        if inp.request_id != pending.request_id:
            return "NOT_RESUMABLE", f"Stale request_id {inp.request_id!r}: the run waits for {pending.request_id!r}"
        if inp.decision.action_id not in pending.allowed_decisions:
            return (
                "INVALID_DECISION",
                f"action_id {inp.decision.action_id!r} is not one of {pending.allowed_decisions}",
            )
        return None

    @workflow.update(name=RESUME)
    async def resume(self, inp: ResumeInput) -> ResumeResult:
        return await self._apply(inp)

    @resume.validator
    def _validate_resume(self, inp: ResumeInput) -> None:
        problem = self._problem(inp)
        if problem is not None:
            raise ApplicationError(problem[1], type=problem[0], non_retryable=True)

    @workflow.signal(name=RESUME)
    async def resume_signal(self, inp: ResumeInput) -> None:
        problem = self._problem(inp)
        if problem is None:
            try:
                await self._apply(inp)
                return
            except ApplicationError as err:
                problem = (err.type or "NOT_RESUMABLE", err.message)
        assert self._inp is not None
        key = self._pending.request_id if self._pending is not None else None
        seen = self._rejections[key] = self._rejections.get(key, 0) + 1
        if seen > MAX_RECORDED_REJECTIONS:
            # recorded often enough for this request: count it, log it, add nothing to the history
            workflow.logger.warning("resume Signal rejected (%s, %d for pending request %s): %s",
                                    problem[0], seen, key, problem[1])
            return
        await self._activity(
            "record_event",
            RecordEventInput(
                job_id=self._inp.job_id,
                event="resume_rejected",
                data={"request_id": inp.request_id, "action_id": inp.decision.action_id, "via": "signal",
                      "code": problem[0], "message": problem[1]},
            ),
            None,
            retry=STORE_RETRY,
        )

    async def _apply(self, inp: ResumeInput) -> ResumeResult:
        """Claim + apply (+ the instant layers that follow) in one activity. The claim token is
        deterministic (the workflow's seeded uuid), so a retried activity finds its own claim
        and the dedupe keys of its events; concurrent handlers have different tokens, and the
        store's conditional claim lets exactly one of them win."""
        assert self._inp is not None
        job_id = self._inp.job_id
        token = f"wf-{workflow.uuid4().hex}"
        self._in_flight += 1
        try:
            try:
                res: ResumeRunOutput = await self._activity(
                    "resume_run",
                    ResumeRunInput(job_id=job_id, token=token, request_id=inp.request_id, decision=inp.decision,
                                   decided_by=inp.decided_by, now=workflow.now(), state=self._state,
                                   step=self._step),
                    ResumeRunOutput,
                    retry=LAYER_RETRY,
                )
            except ActivityError as err:
                await self._activity("rollback_resume", RollbackResumeInput(job_id=job_id, claim_token=token),
                                     None, retry=STORE_RETRY)
                cause = err.cause
                code = cause.type if isinstance(cause, ApplicationError) and cause.type else "DECISION_FAILED"
                raise ApplicationError(f"Applying the decision failed: {cause or err}", type=code,
                                       non_retryable=True) from None
            if not res.claimed or res.out is None:
                raise ApplicationError("Another decision won the claim, or the job is no longer suspended",
                                       type="NOT_RESUMABLE", non_retryable=True)
            self._resumed = res.out
            self._decision_applied()
            return ResumeResult(job_id=job_id, request_id=inp.request_id, action_id=res.action_id or "")
        finally:
            self._in_flight -= 1
            self._settled += 1

    def _decision_applied(self) -> None:
        """The run goes on: ``in_progress``, unless it ended while the decision was being applied
        (stopped meanwhile: the workflow's cancellation recorded the end first), whose status
        stays."""
        if self._status in _ENDED:
            return
        self._set_status("in_progress")

    @workflow.query(name=REJECTED_QUERY)
    def rejected(self) -> dict[str, int]:
        """Rejected resume Signals per pending request id ("" when none was pending), including
        those beyond MAX_RECORDED_REJECTIONS that were not recorded as events."""
        return {k or "": v for k, v in self._rejections.items()}

    @workflow.query(name=PENDING_QUERY)
    def pending(self) -> PendingRequest | None:
        return self._pending

    # ---- helpers -------------------------------------------------------------------------

    async def _finish(self, fin: FinishInput) -> FinishOutput:
        return await self._activity("finish", fin, FinishOutput, retry=STORE_RETRY)

    async def _activity(self, name: str, arg: Any, result_type: Any, *, timeout: float = 30.0,
                        retry: RetryPolicy = STORE_RETRY, heartbeat: timedelta | None = None) -> Any:
        assert self._inp is not None
        if self._inp.local_activities:
            return await workflow.execute_local_activity(
                name, arg, result_type=result_type, start_to_close_timeout=timedelta(seconds=timeout),
                retry_policy=retry,
            )
        return await workflow.execute_activity(
            name, arg, result_type=result_type, start_to_close_timeout=timedelta(seconds=timeout),
            retry_policy=retry, heartbeat_timeout=heartbeat,
        )

    def _set_status(self, status: str, *, request_id: str | None = None) -> None:
        self._status = status
        updates: list[Any] = [SA_STATUS.value_set(status)]
        updates.append(SA_REQUEST.value_set(request_id) if request_id else SA_REQUEST.value_unset())
        workflow.upsert_search_attributes(updates)

    @staticmethod
    def _details(pending: PendingRequest) -> str:
        options = ", ".join(o.label for o in pending.options) or ", ".join(pending.allowed_decisions)
        lines = [
            f"**Waiting for a decision** on `{pending.request_id}` ({pending.kind})",
            f"Prompt: {pending.prompt}" if pending.prompt else "",
            f"Options: {options}",
            "Answer: Update `resume` with "
            f'{{"request_id": "{pending.request_id}", "decision": {{"action_id": "..."}}}}',
        ]
        return "\n".join(x for x in lines if x)

