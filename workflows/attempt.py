"""The decisions of a FlowRun: each checked by the engine's one rule, one at a time (a quorum's
votes queue), then applied by one local activity (``resume_run``: claim, apply, record, or go
on from an earlier attempt's record) under the run's n-th attempt's claim token; a failed
attempt settled by a look at the store under that token; the catch-up with a store that is
ahead of the workflow (a decision recorded in a workflow task that was lost)."""

from __future__ import annotations

import contextlib

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from signoff.activities.failures import failure_error, refusal, refusal_of
    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import (
        FinishInput,
        RecordVoteInput,
        RecordVoteOutput,
        ResumeRunInput,
        ResumeRunOutput,
        RollbackResumeInput,
        RunLayerOutput,
        StateRef,
    )
    from signoff.engine.decisions import check_decision, count_vote
    from signoff.engine.errors import AlreadyVoted, SignoffError
    from signoff.engine.models import TERMINAL_STATUSES, Decision, JobStatus, Vote
    from signoff.workflows.caller import caller
    from signoff.workflows.policies import (
        LAYER_RETRY,
        STORE_TIMEOUT,
    )
    from signoff.workflows.types import (
        ResumeInput,
        ResumeResult,
    )
# the parts of FlowRun: imported in the sandbox, as this module is (replayed in the strict one)
from signoff.workflows.core import (
    RunCore,
    claim_token,
    DecisionSlot,
    is_stop,
    current_update_id,
)


class DecisionAttempt(RunCore):
    def _check(self, inp: ResumeInput, *, validating: bool = False) -> None:
        """The engine's one decision check against what this run waits for (SignoffError). Who
        decides is checked by the activities (it needs the store); a second vote of the same
        person is refused here when the decision names them by id. ``validating`` (the Update's
        validator): a decision that comes while another is being applied is let in, to wait for
        that one to settle and be checked then (_decide): the one being applied may turn out to
        be this Update's own, applied in a workflow task that was lost (_apply). The values are
        never checked in workflow code (shape, request id, action id only): checking them against
        a schema is the API's (before it sends the Update) and the activity's (resume_run before
        its claim, record_vote), a cost no workflow task pays (a validator writes no history:
        replay-safe)."""
        if self._layer_running and self._pending is None:
            return  # the layer under way may be reaching this pause: checked once it has (_decide)
        check_decision(self._pending, inp.request_id, inp.decision,
                       waiting=self._undecided or (validating and self._applying), values=False)
        if self._voted(inp):
            raise AlreadyVoted()

    def _voted(self, inp: ResumeInput) -> bool:
        return any(v.user in (inp.decided_by, inp.user) for v in self._votes)

    async def _decide(self, inp: ResumeInput) -> ResumeResult:
        """One decision at a time (the votes of a quorum queue here, in the order they came):
        checked again now that the ones before it have settled, then one vote more, or the
        decision applied."""
        if self._layer_running:  # (only then: no extra yield)
            await workflow.wait_condition(lambda: not self._layer_running)
        async with self._lock:
            answered = self._answered.pop(current_update_id() or "", None)
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
                user=inp.user, via=inp.via, now=workflow.now(), update_id=current_update_id(), check_only=completes,
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
                    FlowActivities.resume_run, self._probe(pending.request_id, claim_token(self._attempts)),
                    start_to_close_timeout=STORE_TIMEOUT, retry_policy=LAYER_RETRY)
            except FailureError as err:  # the store out past the retries: nothing caught up, the run waits on
                workflow.logger.warning("catching up with the store failed: %s", err)
                return False
            if not res.claimed or res.out is None:
                return False
            self._attempts += 1
            self._decision = DecisionSlot(out=res.out)
            self._deliver(res.deliveries)
            if self._status not in TERMINAL_STATUSES:
                self._set_status(JobStatus.in_progress.value)
            if res.update_id is not None:  # its Update gets the answer if it comes again
                self._answered[res.update_id] = ResumeResult(
                    job_id=self._inp.job_id, request_id=pending.request_id, action_id=res.action_id or "",
                    votes=len(self._votes), required=pending.required_approvals)
            return True

    async def _apply(self, inp: ResumeInput, *, timed_out: bool = False, vote: Vote | None = None) -> ResumeResult:
        """Claim + apply (+ the instant layers that follow) in one local activity (in the workflow
        task that took the decision: no activity dispatch, no second workflow task before the
        Update answers). The claim token is deterministic (:func:`claim_token`), so a retried or
        re-run activity finds its own claim and the dedupe keys of its events; the store's
        conditional claim lets exactly one decision win, whichever surface (API, CLI, Web UI)
        sent it, or the deadline."""
        assert self._inp is not None
        job_id = self._inp.job_id
        token = claim_token(self._attempts)
        decision = self._decision = DecisionSlot()
        run = ResumeRunInput(job_id=job_id, token=token, request_id=inp.request_id, decision=inp.decision,
                             decided_by=inp.decided_by, user=inp.user, via=inp.via, checked=inp.checked,
                             now=workflow.now(),
                             state=self._state,
                             step=self._step, votes=list(self._votes), timed_out=timed_out,
                             update_id=current_update_id(), vote=vote, persist=True,
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
            if is_stop(err):
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
                              required=self._pending.required_approvals if self._pending else 1,
                              completed=res.completed)
        if res.update_id != current_update_id():
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
            if is_stop(err):
                raise  # a stop (of a deadline's decision, in the run's own task): run() records it
            workflow.logger.warning("settling a failed decision with the store failed: %s", err)
            if await self._rollback(token) is not False:
                return None  # let go of, or nothing of this claim's to let go of
            assert self._inp is not None
            fin = await self._finish(FinishInput(job_id=self._inp.job_id, status=JobStatus.failed.value,
                                                 state=self._state, error=failure_error(failure)))
            return ResumeRunOutput(claimed=True, update_id=current_update_id(), action_id=action_id, out=RunLayerOutput(
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
