"""FlowRun: one durable workflow per run (id = job id). It only coordinates: every side effect
(building vertices, the job table, events, checkpoints) is an activity in ``activities/``.

Loop: run one layer (activity) → when the layer asked for a pause (the checkpoint is saved),
persist the pause and wait for the decision by Update or Signal ``resume``, bounded by the
deployment's maximum suspension (a durable timer). A decision is one activity (``resume_run``:
claim, apply, and the following instant layers) → next layer → ... → the last layer records the
completion; ``finish`` (status + terminal event) for the other ends.

A decision is checked by the engine's one rule (:func:`~signoff.engine.decisions.check_decision`)
in the Update's validator, so a refused one writes no history; its values are never checked in
workflow code (the API checks them before it sends the Update, the ``resume_run`` activity
before its claim: a schema's cost is no workflow task's); at most one decision is in flight at a time (:class:`DecisionSlot`,
one slot).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from signoff.activities.failures import failure_error, refusal
    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import (
        FinishInput,
        RecordEventInput,
        RunLayerInput,
        RunLayerOutput,
    )
    from signoff.engine.errors import NotResumable, SignoffError
    from signoff.engine.models import TERMINAL_STATUSES, JobStatus, PendingRequest
    from signoff.workflows.policies import (
        ANSWER_WAIT,
        CATCH_UP_RETRY,
        LAYER_HEARTBEAT,
        LAYER_RETRY,
        MAX_CATCH_UPS,
        MAX_RECORDED_REJECTIONS,
    )
    from signoff.workflows.types import (
        CATCH_UP,
        PENDING_QUERY,
        REJECTED_QUERY,
        RESUME,
        WORKFLOW_TYPE,
        FlowRunInput,
        ResumeInput,
        ResumeResult,
    )
# the parts of FlowRun: imported in the sandbox, as this module is (replayed in the strict one)
from signoff.workflows.core import is_stop, current_update_id
from signoff.workflows.gate_wait import GateWait

__all__ = ["FlowRun", "LAYER_RETRY", "MAX_CATCH_UPS", "CATCH_UP_RETRY", "MAX_RECORDED_REJECTIONS"]


@workflow.defn(name=WORKFLOW_TYPE)
class FlowRun(GateWait):
    """One run's workflow: the loop (workflows/gate_wait.py waits at each gate,
    workflows/attempt.py applies its decision) and the handlers: Update and Signal ``resume``,
    Update ``catch_up``, the queries."""

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
            # The stop came while a bookkeeping activity ran (finish, a gate's timer): its
            # cancellation surfaces as an ActivityError. Record it as a stop too, or the job stays
            # in_progress with no workflow left.
            if not is_stop(err):
                raise
            await self._cancelled(inp)
            raise
        if self._answered:
            # an Update whose decision was applied in a lost workflow task has not come again
            # yet: it is admitted, so Temporal delivers it soon; closing now would abort it
            try:
                await workflow.wait_condition(lambda: not self._answered, timeout=ANSWER_WAIT)
            except asyncio.TimeoutError:
                pass  # it was refused before its decision was known to be its own (it never comes)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._outbox:  # the run is over; its last webhook deliveries get their retries
            await asyncio.gather(*self._outbox, return_exceptions=True)
        return {"job_id": inp.job_id, "status": status}

    async def _cancelled(self, inp: FlowRunInput) -> None:
        fin = await self._finish(FinishInput(job_id=inp.job_id, status=JobStatus.cancelled.value, state=self._state,
                                             request_id=self._pending_id))
        self._set_status(fin.status)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if fin.deliveries:  # the closing notes of the request it waited on get their retries
            before = len(self._outbox)
            self._deliver(fin.deliveries)
            await asyncio.gather(*self._outbox[before:], return_exceptions=True)

    async def _drive(self, inp: FlowRunInput) -> str:
        self._set_status(JobStatus.in_progress.value)
        out: RunLayerOutput | None = None
        while True:
            if out is None:
                self._layer_running = True
                try:
                    out = await workflow.execute_activity_method(
                        FlowActivities.run_layer,
                        RunLayerInput(job_id=inp.job_id, step=self._step, state=self._state, now=workflow.now(),
                                      inline=True, persist=True),
                        start_to_close_timeout=timedelta(seconds=inp.layer_timeout_seconds),
                        retry_policy=LAYER_RETRY,
                        heartbeat_timeout=LAYER_HEARTBEAT,
                    )
                except ActivityError as err:
                    self._layer_running = False
                    if is_stop(err):
                        raise asyncio.CancelledError() from err
                    fin = await self._finish(FinishInput(job_id=inp.job_id, status=JobStatus.failed.value,
                                                         state=self._state, error=failure_error(err)))
                    self._set_status(fin.status)
                    return fin.status
                finally:
                    self._layer_running = False
            if out.cancelled:  # the job had already ended: keep what it really is
                ended = out.status or JobStatus.cancelled.value
                self._set_status(ended)
                return ended
            self._step, self._state = out.step, out.state
            if out.done:  # the last layer already recorded the completion (one activity less)
                status = out.status or (await self._finish(
                    FinishInput(job_id=inp.job_id, status=JobStatus.completed.value, state=self._state))).status
                self._set_status(status)
                return status
            if out.pending is None:
                out = None  # next layer
                continue
            ended = await self._wait_for_decision(inp, out.pending, deliveries=out.deliveries)
            if ended is not None:
                return ended
            out = self._take_decision()  # where the decision left the run (maybe further layers on)
            if (out.cancelled or out.done) and out.status == JobStatus.cancelled.value:
                # Stopped while the decision was applied (the completion it reached was refused):
                # answer it in this task, close in another. The stop's cancel request, arriving
                # during this task, would fail a task that closes the workflow (UnhandledCommand)
                # and the Update's answer with it, although its decision was recorded; it ends
                # this wait instead (run() records the stop).
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(lambda: False, timeout=ANSWER_WAIT)

    @workflow.update(name=RESUME)
    async def resume(self, inp: ResumeInput) -> ResumeResult:
        return await self._decide(inp)

    @resume.validator
    def _validate_resume(self, inp: ResumeInput) -> None:
        if current_update_id() in self._answered:
            return
        try:
            self._check(inp, validating=True)
        except SignoffError as err:
            raise refusal(err) from None

    @workflow.update(name=CATCH_UP)
    async def catch_up(self) -> bool:
        """Go on from a decision the store recorded for this run's current attempt in a workflow
        task that was lost with its Update (the API sends this when the job shows the run further
        on than this workflow is; an operator may too). Whether the run went on."""
        key = self._pending_id
        self._catch_ups[key] = self._catch_ups.get(key, 0) + 1
        return await self._catch_up()

    @catch_up.validator
    def _validate_catch_up(self) -> None:
        key = self._pending_id
        if key is None or not self._undecided:
            raise refusal(NotResumable("The run is not waiting for a decision"))
        if self._catch_ups.get(key, 0) >= MAX_CATCH_UPS:
            raise refusal(NotResumable(f"This run caught up {MAX_CATCH_UPS} times on this request already"))

    @workflow.signal(name=RESUME)
    async def resume_signal(self, inp: ResumeInput) -> None:
        if self._layer_running:  # (only then: no extra yield)
            await workflow.wait_condition(lambda: not self._layer_running)
        try:
            self._check(inp)
            await self._decide(inp)
            return
        except SignoffError as err:
            problem = (err.code, err.message)
        except ApplicationError as err:
            problem = (err.type or "NOT_RESUMABLE", err.message)
        assert self._inp is not None
        key = self._pending_id
        seen = self._rejections[key] = self._rejections.get(key, 0) + 1
        if self._status in TERMINAL_STATUSES:  # the run is over (the workflow waits for deliveries)
            workflow.logger.warning("resume Signal after the run ended, not recorded (%s): %s", *problem)
            return
        if seen > MAX_RECORDED_REJECTIONS:
            # recorded often enough for this request: count it, log it, add nothing to the history
            workflow.logger.warning("resume Signal rejected (%s, %d for pending request %s): %s",
                                    problem[0], seen, key, problem[1])
            return
        await self._store_activity(FlowActivities.record_event, RecordEventInput(
            job_id=self._inp.job_id,
            event="resume_rejected",
            data={"request_id": inp.request_id, "action_id": inp.decision.action_id, "via": "signal",
                  "code": problem[0], "message": problem[1]},
        ))

    @workflow.query(name=REJECTED_QUERY)
    def rejected(self) -> dict[str, int]:
        """Rejected resume Signals per pending request id ("" when none was pending), including
        those beyond MAX_RECORDED_REJECTIONS that were not recorded as events."""
        return {k or "": v for k, v in self._rejections.items()}

    @workflow.query(name=PENDING_QUERY)
    def pending(self) -> PendingRequest | None:
        """The request the run waits on, once this workflow has taken the result of the activity
        that reached the pause (the store shows the job suspended a workflow task earlier)."""
        return self._pending
