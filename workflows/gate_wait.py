"""The wait at a gate: for a decision, bounded by the deployment's maximum suspension and by
the gate's own durable timers (its deadline and what ``on_timeout`` does, reminders, the
escalation); the end of a wait that is over, which a decision that got in first (or a store
ahead of the workflow) turns back."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import (
        Delivery,
        FinishInput,
        GateTimerInput,
        GateTimerOutput,
    )
    from signoff.engine.decisions import deadline, deadline_decision
    from signoff.engine.models import TERMINAL_STATUSES, JobStatus, PendingRequest
    from signoff.workflows.policies import (
        CATCH_UP_RETRY,
    )
    from signoff.workflows.types import (
        FlowRunInput,
        ResumeInput,
    )
# the parts of FlowRun: imported in the sandbox, as this module is (replayed in the strict one)
from signoff.workflows.attempt import DecisionAttempt


class GateWait(DecisionAttempt):
    async def _wait_for_decision(self, inp: FlowRunInput, pending: PendingRequest,
                                 deliveries: list[Delivery]) -> str | None:
        """Wait until a decision has been applied; None then, else the terminal status.

        The layer's activity already made the pause visible (the job shows ``suspended``), and a
        decision that came before this workflow had the layer's result was held
        (``_layer_running``), so it finds the run waiting now. ``deliveries``: the webhooks of
        its ``human_input_required``."""
        self._pending = pending
        self._votes = []
        self._deliver(deliveries)
        self._set_status(JobStatus.suspended.value, request_id=pending.request_id)
        workflow.set_current_details(self._details(pending))
        if pending.acts_on_timeout or pending.remind_every_seconds or pending.escalate_after_seconds:
            ended = await self._wait_with_gate_timers(inp, pending)
        else:
            ended = await self._wait(inp)
        if ended is not None:
            return ended
        self._pending = None
        self._votes = []
        workflow.set_current_details("Running")
        return None

    async def _wait(self, inp: FlowRunInput) -> str | None:
        """A gate with no timers of its own: wait for the decision, bounded by the deployment's
        maximum suspension."""
        timeout = timedelta(seconds=inp.max_suspend_seconds) if inp.max_suspend_seconds else None
        while not self._applied:
            try:
                await workflow.wait_condition(lambda: self._applied, timeout=timeout)
            except asyncio.TimeoutError:
                ended = await self._end_waiting(inp)
                if ended is not None:
                    return ended
                timeout = None  # a claim is being applied: its outcome resumes the run
        return None

    async def _end_waiting(self, inp: FlowRunInput, gate: dict[str, Any] | None = None, *,
                           locked: bool = False) -> str | None:
        """The maximum suspension (or an ``on_timeout: fail`` deadline: ``gate`` says which request's,
        for ``run_timed_out``) is over: end the run as ``timed_out`` unless a decision got in first
        (None then: the run goes on). ``locked``: the caller holds the decision lock (the deadline)."""
        caught_up = False
        while True:
            await workflow.wait_condition(lambda: not self._applying)
            if self._applied:
                return None
            before = self._decision
            fin = await self._finish(FinishInput(job_id=inp.job_id, status=JobStatus.timed_out.value,
                                                 state=self._state, deadline=gate, request_id=self._pending_id))
            self._deliver(fin.deliveries)  # (the maximum suspension) the request's closing notes
            if fin.status in TERMINAL_STATUSES:
                self._pending = None
                self._set_status(fin.status)
                workflow.set_current_details(f"Ended: {fin.status}")
                return fin.status
            # A claim got in before finish wrote. Its decision goes on (the run continues) or fails
            # and is rolled back: the job is suspended again, and the wait is still over, so
            # finish again once that decision is settled.
            if self._decision is not before or self._applying:
                continue
            # No decision of this workflow's: the store is ahead of it (a decision recorded in a
            # workflow task lost with its Update). Go on from it, or, a claim with nothing
            # recorded being let go of, end the wait again; nothing at all: ask again later.
            if await self._catch_up(locked=locked):
                return None
            if not caught_up:
                caught_up = True
                continue
            await workflow.sleep(CATCH_UP_RETRY)

    async def _wait_with_gate_timers(self, inp: FlowRunInput, pending: PendingRequest) -> str | None:
        """A gate whose deadline acts (``on_timeout``), that reminds (``remind_every``) or
        escalates (``escalate_after``): durable timers from the pause, none after the decision."""
        base = pending.paused_at  # UTC: engine.models.UTCDateTime
        wakes: dict[str, datetime] = {}
        if inp.max_suspend_seconds:
            wakes["max"] = workflow.now() + timedelta(seconds=inp.max_suspend_seconds)
        due = deadline(pending)
        if pending.acts_on_timeout and due is not None:
            wakes["deadline"] = due
        reminders = 1
        cap = inp.max_reminders  # at most this many reminders
        if pending.remind_every_seconds and cap > 0:
            wakes["reminder"] = base + timedelta(seconds=pending.remind_every_seconds)
        if pending.escalate_after_seconds and pending.escalate_to:
            wakes["escalation"] = base + timedelta(seconds=pending.escalate_after_seconds)
        while not self._applied:
            kind, at = min(wakes.items(), key=lambda item: item[1]) if wakes else (None, None)
            timeout = max((at - workflow.now()).total_seconds(), 0.001) if at is not None else None
            try:
                await workflow.wait_condition(lambda: self._applied, timeout=timeout)
                continue
            except asyncio.TimeoutError:
                pass
            if kind == "reminder":
                await self._gate_timer(inp, pending, "reminder", n=reminders)
                reminders += 1
                if reminders > cap:
                    del wakes["reminder"]  # the cap is reached: the request waits on, unreminded
                    continue
                # the next period after now: a run that waited for a worker (an outage) sends one
                # reminder for the periods it missed, not one each in a burst
                every = pending.remind_every_seconds
                period = max(reminders, int((workflow.now() - base).total_seconds() // every) + 1)
                wakes["reminder"] = base + timedelta(seconds=every * period)
            elif kind == "escalation":
                out = await self._gate_timer(inp, pending, "escalation")
                if out.approver_refs:
                    pending.approver_refs = list(out.approver_refs)
                del wakes["escalation"]
            elif kind == "deadline":
                del wakes["deadline"]
                ended = await self._deadline(inp, pending)
                if ended is not None:
                    return ended
            else:  # the deployment's maximum suspension
                wakes.pop("max", None)
                ended = await self._end_waiting(inp)
                if ended is not None:
                    return ended
        return None

    async def _deadline(self, inp: FlowRunInput, pending: PendingRequest) -> str | None:
        """Nobody answered in time: ``on_timeout`` acts (DESIGN §9). ``fail`` ends the run
        ``timed_out`` after ``human_input_expired``; ``fallback`` and ``default`` are a decision
        the deadline makes, applied through the same single-flight path as a person's. A decision
        that got in first wins."""
        async with self._lock:
            if self._applied or self._applying or self._pending is None:
                return None
            if pending.on_timeout == "fail":
                out = await self._gate_timer(inp, pending, "expired")
                if not out.written:
                    # not waiting, and this workflow applies nothing (it holds the lock): a claim it
                    # did not make holds the job. Go on from its decision, or, let go of, expire.
                    if await self._catch_up(locked=True):
                        return None
                    out = await self._gate_timer(inp, pending, "expired")
                if not out.written:
                    return None
                return await self._end_waiting(inp, {"request_id": pending.request_id,
                                                     "timeout_seconds": pending.timeout_seconds}, locked=True)
            try:
                await self._apply(ResumeInput(request_id=pending.request_id, decision=deadline_decision(pending)),
                                  timed_out=True)
            except ApplicationError:
                pass  # another decision won the claim, or the run ended meanwhile
        return None

    async def _gate_timer(self, inp: FlowRunInput, pending: PendingRequest, kind: str, *, n: int = 0
                          ) -> GateTimerOutput:
        out: GateTimerOutput = await self._store_activity(FlowActivities.gate_timer, GateTimerInput(
            job_id=inp.job_id, request_id=pending.request_id, kind=kind, n=n, escalate_to=pending.escalate_to,
            now=workflow.now()))
        self._deliver(out.deliveries)
        return out
