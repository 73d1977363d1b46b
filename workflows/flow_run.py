"""FlowRun: one durable workflow per run (id = job id). It only coordinates: every side effect
(building vertices, the job table, events, checkpoints) is an activity in ``activities/``.

Loop: run one layer (activity) → when the layer asked for a pause (the checkpoint is saved),
persist the pause and wait for the decision by Update or Signal ``resume``, bounded by the
deployment's maximum suspension (a durable timer). A decision is one activity (``resume_run``:
claim, apply, and the following instant layers) → next layer → ... → the last layer records the
completion; ``finish`` (status + terminal event) for the other ends.

A decision is checked by the engine's one rule (:func:`~signoff.engine.decisions.check_decision`)
in the Update's validator, so a refused one writes no history (its values excepted: the API
checks them before it sends the Update, the handler and the activity again; the validator's
checks are the cheap ones); at most one decision is in flight at a time (:class:`_Decision`,
one slot).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from signoff.activities.failures import failure_error, refusal, refusal_of
    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import (
        Delivery,
        FinishInput,
        FinishOutput,
        GateTimerInput,
        GateTimerOutput,
        RecordVoteInput,
        RecordVoteOutput,
        RecordEventInput,
        ResumeRunInput,
        ResumeRunOutput,
        RollbackResumeInput,
        RunLayerInput,
        RunLayerOutput,
        StateRef,
    )
    from signoff.engine.decisions import check_decision, count_vote, deadline, deadline_decision
    from signoff.engine.errors import AlreadyVoted, NotResumable, SignoffError
    from signoff.engine.models import TERMINAL_STATUSES, Decision, JobStatus, PendingRequest, Vote
    from signoff.workflows.caller import caller
    from signoff.workflows.types import (
        CATCH_UP,
        PENDING_QUERY,
        REJECTED_QUERY,
        RESUME,
        SA_REQUEST,
        SA_STATUS,
        WORKFLOW_TYPE,
        FlowRunInput,
        ResumeInput,
        ResumeResult,
    )

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
STORE_TIMEOUT = timedelta(seconds=30)
# A webhook delivery: backoff from 1 s to 2 min, for about 15 minutes in all; each attempt is
# logged, and a dead endpoint changes nothing for the run.
WEBHOOK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=12,
)

# How long a run that is over waits for an Update whose decision it took from the store (its own
# workflow task was lost) to come again for its answer, before it closes (FlowRun.run); also how
# long a run stopped while its decision was applied waits, in a task of its own, for the stop's
# cancel (FlowRun._drive).
ANSWER_WAIT = timedelta(seconds=10)
# After a catch-up that found nothing to go on from, the wait's end is tried again at once (the
# catch-up may have let go of a claim with nothing recorded), then, if it loses again, this much
# later each time.
CATCH_UP_RETRY = timedelta(seconds=60)
# Catch-up Updates let in per pending request (each runs a look at the store); more are refused
# without history, so a client cannot grow the run's history with them.
MAX_CATCH_UPS = 10

# A rejected ``resume`` Signal is recorded (``resume_rejected``, one activity) at most this many
# times per pending request; the rest are counted in the workflow and logged, so a client
# spamming bad Signals cannot grow the workflow's history without bound (docs/temporal.md).
MAX_RECORDED_REJECTIONS = 20


def _update_id() -> str | None:
    """The id of the Update being handled (None in a Signal handler or the run's own code),
    recorded with the decision (DESIGN §9)."""
    info = workflow.current_update_info()
    return info.id if info is not None else None


def _stopped(err: BaseException) -> bool:
    """An activity's failure that is its cancellation (a stop of the run: a regular activity's
    is an ActivityError caused by it, a local one's the cancellation itself)."""
    return isinstance(err, CancelledError) or isinstance(getattr(err, "cause", None), CancelledError)


def _claim_token(attempt: int) -> str:
    """The claim token of the run's ``attempt``-th decision attempt (counted from 0; an attempt
    counts once its activity's result, or failure, is in the history): the same on replay and in
    every retry of the activity, different for every attempt. It names the attempt, not the
    Update: when the workflow task that ran a decision as a local activity is lost (a
    speculative task the server dropped, a worker that died), Temporal delivers its Updates
    again, maybe in another order, and whichever is taken first then runs the same attempt,
    finding the lost one's claim and record in the store instead of losing against them."""
    return f"wf-{workflow.info().run_id}-d{attempt}"


@dataclass
class _Decision:
    """The run's one decision slot: the decision being applied, applied (``out``: where the run is
    after it, until the run loop takes it) or failed (rolled back; the run waits again). The
    validator refuses a decision while the slot holds one that is not failed; a new decision
    replaces a failed one, so "a decision came and went" is "the slot holds another object"."""

    out: RunLayerOutput | None = None
    failed: bool = False


@workflow.defn(name=WORKFLOW_TYPE)
class FlowRun:
    def __init__(self) -> None:
        self._inp: FlowRunInput | None = None
        self._pending: PendingRequest | None = None
        self._state: StateRef | None = None
        self._step = 0
        self._decision: _Decision | None = None
        self._votes: list[Vote] = []  # the votes on the pending request (a quorum), in order
        self._lock = asyncio.Lock()  # one decision (or vote, or deadline) handled at a time
        self._outbox: list[Any] = []  # webhook deliveries under way
        self._status = JobStatus.queued.value
        self._rejections: dict[str | None, int] = {}  # rejected resume Signals per pending request id
        self._attempts = 0  # decision attempts whose activity result is in the history (_claim_token)
        # The answers of Updates whose decision was applied by an attempt another Update's handler
        # finished (its own workflow task was lost): given to that Update when it comes again.
        self._answered: dict[str, ResumeResult] = {}
        self._catch_ups: dict[str | None, int] = {}  # catch-up Updates let in per pending request id
        # A layer's activity is under way that may persist a pause: the store may show the job
        # ``suspended`` before this workflow has the layer's result, so a decision arriving now
        # is held until it has (then checked), not refused.
        self._layer_running = False

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
            if not _stopped(err):
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
        fin = await self._finish(FinishInput(job_id=inp.job_id, status=JobStatus.cancelled.value, state=self._state))
        self._set_status(fin.status)
        await workflow.wait_condition(workflow.all_handlers_finished)

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
                    if _stopped(err):
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
                                                 state=self._state, deadline=gate))
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
        base = pending.paused_at if pending.paused_at.tzinfo else pending.paused_at.replace(tzinfo=timezone.utc)
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

    @property
    def _applying(self) -> bool:
        return self._decision is not None and self._decision.out is None and not self._decision.failed

    @property
    def _applied(self) -> bool:
        return self._decision is not None and self._decision.out is not None

    @property
    def _undecided(self) -> bool:
        """No decision taken on the pending request, or the last one failed (rolled back)."""
        return self._decision is None or self._decision.failed

    @property
    def _pending_id(self) -> str | None:
        return self._pending.request_id if self._pending is not None else None

    def _take_decision(self) -> RunLayerOutput:
        assert self._decision is not None and self._decision.out is not None
        out, self._decision = self._decision.out, None
        return out

    # ---- decisions -----------------------------------------------------------------------

    def _check(self, inp: ResumeInput, *, validating: bool = False) -> None:
        """The engine's one decision check against what this run waits for (SignoffError). Who
        decides is checked by the activities (it needs the store); a second vote of the same
        person is refused here when the decision names them by id. ``validating`` (the Update's
        validator): a decision that comes while another is being applied is let in, to wait for
        that one to settle and be checked then (_decide): the one being applied may turn out to
        be this Update's own, applied in a workflow task that was lost (_apply). The validator
        leaves the values out (shape, request id, action id only): checking them against a schema
        is the API's (before it sends the Update) and the activity's (resume_run, record_vote),
        never a cost the workflow task pays before it is accepted (a validator writes no history:
        replay-safe)."""
        if self._layer_running and self._pending is None:
            return  # the layer under way may be reaching this pause: checked once it has (_decide)
        check_decision(self._pending, inp.request_id, inp.decision,
                       waiting=self._undecided or (validating and self._applying), values=not validating)
        if self._voted(inp):
            raise AlreadyVoted()

    def _voted(self, inp: ResumeInput) -> bool:
        return any(v.user in (inp.decided_by, inp.user) for v in self._votes)

    @workflow.update(name=RESUME)
    async def resume(self, inp: ResumeInput) -> ResumeResult:
        return await self._decide(inp)

    @resume.validator
    def _validate_resume(self, inp: ResumeInput) -> None:
        if _update_id() in self._answered:
            return
        try:
            self._check(inp, validating=True)
        except SignoffError as err:
            raise refusal(err) from None

    async def _decide(self, inp: ResumeInput) -> ResumeResult:
        """One decision at a time (the votes of a quorum queue here, in the order they came):
        checked again now that the ones before it have settled, then one vote more, or the
        decision applied."""
        if self._layer_running:  # (only then: no extra yield)
            await workflow.wait_condition(lambda: not self._layer_running)
        async with self._lock:
            answered = self._answered.pop(_update_id() or "", None)
            if answered is not None:  # applied already, by an attempt another Update's handler finished
                return answered
            try:
                self._check(inp)
            except SignoffError as err:
                raise refusal(err) from None
            assert self._pending is not None
            if inp.decision.action_id != self._pending.quorum_action:
                return await self._apply(inp)  # any other decision resolves at once
            return await self._vote(inp, completes=count_vote(self._pending, inp.decision, self._votes))

    async def _vote(self, inp: ResumeInput, *, completes: bool) -> ResumeResult:
        """Record one approver's vote (``human_input_vote``); durable in history, so a worker
        restart between two votes loses neither. The vote that ``completes`` the quorum is only
        checked here (who votes, however named); resume_run records it with the resolution, under
        its claim, so a vote whose resolution loses the claim (a stop, a supersede) leaves no trace."""
        assert self._inp is not None and self._pending is not None
        try:
            out: RecordVoteOutput = await self._store_activity(FlowActivities.record_vote, RecordVoteInput(
                job_id=self._inp.job_id, request_id=inp.request_id, decision=inp.decision, decided_by=inp.decided_by,
                user=inp.user, now=workflow.now(), update_id=_update_id(), check_only=completes,
                client_identity=caller()))
        except ActivityError as err:
            cause = err.cause
            raise ApplicationError(str(getattr(cause, "message", cause) or err), *getattr(cause, "details", ()),
                                   type=cause.type if isinstance(cause, ApplicationError) and cause.type
                                   else "NOT_RESUMABLE", non_retryable=True) from None
        if any(v.user == out.vote.user for v in self._votes):
            raise refusal(AlreadyVoted())  # the same person by another name
        if completes:
            return await self._apply(inp, vote=out.vote)
        self._votes.append(out.vote)
        self._deliver(out.deliveries)
        return ResumeResult(job_id=self._inp.job_id, status="vote_recorded", request_id=inp.request_id,
                            action_id=out.vote.action_id, votes=len(self._votes),
                            required=self._pending.required_approvals)

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

    async def _catch_up(self, *, locked: bool = False) -> bool:
        """Run the current decision attempt with no decision of its own (``probe``): the run goes
        on from what it recorded, as from any decision (a claim it took with nothing recorded is
        let go of). Whether the run went on. ``locked``: the caller holds the decision lock (a
        deadline ending the run; the lock is not re-entrant: taking it again waited for good)."""
        assert self._inp is not None
        async with contextlib.nullcontext() if locked else self._lock:
            if self._pending is None or not self._undecided:
                return self._applied
            pending = self._pending
            try:
                res: ResumeRunOutput = await workflow.execute_local_activity_method(
                    FlowActivities.resume_run, self._probe(pending.request_id, _claim_token(self._attempts)),
                    start_to_close_timeout=STORE_TIMEOUT, retry_policy=LAYER_RETRY)
            except FailureError as err:  # the store out past the retries: nothing caught up, the run waits on
                workflow.logger.warning("catching up with the store failed: %s", err)
                return False
            if not res.claimed or res.out is None:
                return False
            self._attempts += 1
            self._decision = _Decision(out=res.out)
            self._deliver(res.deliveries)
            if self._status not in TERMINAL_STATUSES:
                self._set_status(JobStatus.in_progress.value)
            if res.update_id is not None:  # its Update gets the answer if it comes again
                self._answered[res.update_id] = ResumeResult(
                    job_id=self._inp.job_id, request_id=pending.request_id, action_id=res.action_id or "",
                    votes=len(self._votes), required=pending.required_approvals)
            return True

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

    async def _apply(self, inp: ResumeInput, *, timed_out: bool = False, vote: Vote | None = None) -> ResumeResult:
        """Claim + apply (+ the instant layers that follow) in one local activity (in the workflow
        task that took the decision: no activity dispatch, no second workflow task before the
        Update answers). The claim token is deterministic (:func:`_claim_token`), so a retried or
        re-run activity finds its own claim and the dedupe keys of its events; the store's
        conditional claim lets exactly one decision win, whichever surface (API, CLI, Web UI)
        sent it, or the deadline."""
        assert self._inp is not None
        job_id = self._inp.job_id
        token = _claim_token(self._attempts)
        decision = self._decision = _Decision()
        run = ResumeRunInput(job_id=job_id, token=token, request_id=inp.request_id, decision=inp.decision,
                             decided_by=inp.decided_by, user=inp.user, now=workflow.now(), state=self._state,
                             step=self._step, votes=list(self._votes), timed_out=timed_out,
                             update_id=_update_id(), vote=vote, persist=True,
                             client_identity=caller())
        try:
            try:
                res: ResumeRunOutput = await workflow.execute_local_activity_method(
                    FlowActivities.resume_run, run, start_to_close_timeout=STORE_TIMEOUT, retry_policy=LAYER_RETRY)
            finally:
                self._attempts += 1
        except FailureError as err:  # a local activity's failure: its cause, or an ActivityError
            # Settled by a look at the store under its token, not a bare rollback: the attempt may
            # have recorded the decision before a later write failed past its retries (the next
            # pause, the completion), and rolling that back would leave the job suspended with its
            # pending request cleared. The run goes on from such a record.
            settled = None
            try:  # until settled, the run takes no other decision
                settled = await self._settle(inp.request_id, token, err, inp.decision.action_id)
            finally:
                decision.failed = settled is None
            if _stopped(err):
                # the run's own task (a deadline's decision) was cancelled by a stop: settled, and
                # still a stop (run() records it), not a failed decision the deadline passes over
                raise err
            if settled is None:
                cause = err.cause if isinstance(err, ActivityError) else err
                code = cause.type if isinstance(cause, ApplicationError) and cause.type else "DECISION_FAILED"
                raise ApplicationError(f"Applying the decision failed: {cause or err}", type=code,
                                       non_retryable=True) from None
            res = settled
        if res.refused is not None:  # refused before anything was claimed: nothing to roll back
            decision.failed = True
            raise refusal_of(res.refused)
        if not res.claimed or res.out is None:
            decision.failed = True
            raise ApplicationError("Another decision won the claim, or the job is no longer suspended",
                                   type="NOT_RESUMABLE", non_retryable=True)
        decision.out = res.out
        self._deliver(res.deliveries)
        # The run goes on: in_progress, unless it ended while the decision was being applied
        # (stopped meanwhile: the workflow's cancellation recorded the end first).
        if self._status not in TERMINAL_STATUSES:
            self._set_status(JobStatus.in_progress.value)
        result = ResumeResult(job_id=job_id, request_id=inp.request_id, action_id=res.action_id or "",
                              votes=len(self._votes) + (vote is not None),
                              required=self._pending.required_approvals if self._pending else 1)
        if res.update_id != _update_id():
            # the store recorded another Update's (or a Signal's) decision for this attempt, made in
            # a workflow task that was lost: the run goes on from it; that Update gets its answer
            # when it comes again, this one is refused as any decision that came second
            if res.update_id is not None:
                self._answered[res.update_id] = result
            raise ApplicationError("Another decision was applied first", type="NOT_RESUMABLE", non_retryable=True)
        return result

    async def _settle(self, request_id: str, token: str, failure: FailureError,
                      action_id: str) -> ResumeRunOutput | None:
        """A decision attempt under ``token`` failed (``failure``). It may have failed after it
        recorded the decision (a write after the record, the store out past the attempt's
        retries): the run goes on from that record, as from a catch-up (the result, when it
        did). An attempt that recorded nothing has its claim let go of by the same look (the job
        waits as it was, its pending request kept): None. When the look itself fails past its
        (longer) retries, the claim is rolled back, which the store refuses once a decision is
        recorded under it (the job would wait for no request): the run then fails with the
        attempt's error, the decision it recorded kept."""
        try:
            res: ResumeRunOutput = await self._store_activity(FlowActivities.resume_run,
                                                              self._probe(request_id, token))
        except ActivityError as err:
            if _stopped(err):
                raise  # a stop (of a deadline's decision, in the run's own task): run() records it
            workflow.logger.warning("settling a failed decision with the store failed: %s", err)
            if await self._rollback(token) is not False:
                return None  # let go of, or nothing of this claim's to let go of
            assert self._inp is not None
            fin = await self._finish(FinishInput(job_id=self._inp.job_id, status=JobStatus.failed.value,
                                                 state=self._state, error=failure_error(failure)))
            return ResumeRunOutput(claimed=True, update_id=_update_id(), action_id=action_id, out=RunLayerOutput(
                step=self._step, state=self._state or StateRef(), cancelled=True, status=fin.status))
        return res if res.claimed and res.out is not None else None

    async def _rollback(self, token: str) -> bool | None:
        """The claim ``token`` let go of. False only when a decision recorded under it holds the
        job, which no rollback undoes (activities: rollback_resume)."""
        assert self._inp is not None
        return await self._store_activity(FlowActivities.rollback_resume,
                                          RollbackResumeInput(job_id=self._inp.job_id, claim_token=token))

    def _probe(self, request_id: str, token: str) -> ResumeRunInput:
        """The decision attempt ``token`` run with no decision of its own (ResumeRunInput.probe)."""
        assert self._inp is not None
        return ResumeRunInput(job_id=self._inp.job_id, token=token, request_id=request_id,
                              decision=Decision(action_id="catch_up"), now=workflow.now(), state=self._state,
                              step=self._step, persist=True, probe=True)

    def _deliver(self, deliveries: list[Delivery]) -> None:
        """Start the webhook deliveries of an event: retried with backoff by Temporal, never
        waited for by the run (a failing endpoint never blocks it); the workflow waits for them
        only once the run is over."""
        for d in deliveries:
            self._outbox.append(workflow.start_activity_method(
                FlowActivities.deliver_webhook, d, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=WEBHOOK_RETRY))

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

    # ---- helpers -------------------------------------------------------------------------

    async def _finish(self, fin: FinishInput) -> FinishOutput:
        return await self._store_activity(FlowActivities.finish, fin)

    @staticmethod
    async def _store_activity(activity: Callable[..., Any], arg: Any) -> Any:
        """A bookkeeping activity: it only touches the store, so it is retried longer."""
        return await workflow.execute_activity_method(activity, arg, start_to_close_timeout=STORE_TIMEOUT,
                                                      retry_policy=STORE_RETRY)

    def _set_status(self, status: str, *, request_id: str | None = None) -> None:
        self._status = status
        workflow.upsert_search_attributes([
            SA_STATUS.value_set(status),
            SA_REQUEST.value_set(request_id) if request_id else SA_REQUEST.value_unset(),
        ])

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
