"""A decision attempt in one activity (``resume_run``): the single-flight claim under the
workflow's token, the decision checked, applied and recorded in one store write, then the
instant layers that follow; or, finding an earlier attempt's record under the same token, the
run goes on from it (``_go_on_from``); or, as a probe, a claim left with nothing recorded let
go of. ``rollback_resume`` lets a claim go when the workflow's look at the store failed.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from temporalio import activity

from signoff.activities.failures import refused, to_failure
from signoff.activities.layers import HeldMessages, LayerActivities, _blob_step
from signoff.activities.sender import sender
from signoff.activities.types import (
    ResumeRunInput,
    ResumeRunOutput,
    RollbackResumeInput,
    RunLayerOutput,
    StateRef,
)
from signoff.engine import metrics
from signoff.engine.attempt import DecisionAttempt, attempt_decision, trace_gate
from signoff.engine.carried import Checked, open_checked
from signoff.engine.decisions import (
    check_decision,
    check_remember,
    quick_to_check,
    recorded_decision,
    with_decision,
)
from signoff.engine.errors import (
    InvalidDecision,
    InvalidStandingApproval,
    InvalidValues,
    NotResumable,
    SignoffError,
    StandingApprovalLimit,
)
from signoff.engine.graph import Graph
from signoff.engine.run import final_result
from signoff.engine.models import DecisionClaim, Job, JobStatus, utcnow
from signoff.engine.standing import check_room, remember_decision, rule_id
from signoff.engine.state import RunState
from signoff.engine.store.base import AccessChanged, StoreError


class DecisionActivities(LayerActivities):
    @activity.defn(name="resume_run")
    async def resume_run(self, inp: ResumeRunInput) -> ResumeRunOutput:
        """A decision in one activity: the single-flight claim under the workflow's token, the
        decision applied, then the following layers built here while they are instant
        (``Component.instant``), up to the next pause or the end of the run.

        Safe to retry: the claim is idempotent for its token, the decision events carry dedupe
        keys derived from it, and a retry that finds the run already ended reports that. A
        failure while building the instant layers is not a failure of the decision: the state
        after the decision is returned and the workflow builds that layer with ``run_layer``
        (its retry policy, its ``run_failed``). Raises only when the decision itself cannot be
        applied; the workflow then settles the attempt with a probe (``inp.probe``: go on from
        the decision it recorded, or let its claim go)."""
        if inp.probe:
            try:
                return await self._probe(inp)
            except SignoffError as err:
                raise to_failure(err) from None
        try:
            # the API's check, carried sealed (engine/carried.py), with the job it read: not read
            # again here; the decision's write claims it only while its row is as read (its stamp)
            checked = None if inp.timed_out else self._checked(inp)  # the deadline decides for nobody
            carried = checked.job if checked is not None and checked.job is not None \
                and checked.job.waits_for(inp.request_id) else None
            job = carried if carried is not None else await self._job(inp.job_id)
            person, authority, request = None, None, await self.access.current_request(job, inp.request_id)
            if not inp.timed_out:
                # whoever sends it (the API, the CLI, the Web UI), a decision passes the same
                # checks as that person's HTTP resume: an approver, who may (still) decide it. The
                # API's own check, carried sealed, stands for it (engine/carried.py): not read again,
                # and the decision's write refuses it if their access changed since
                checked = checked if request is not None else None
                if checked is not None:
                    person, authority = _Person(checked.user_id, checked.name), checked.authority
                else:
                    try:
                        person, authority = await self._decider_authority(job, inp.request_id,
                                                                          inp.user or inp.decided_by, request)
                    except SignoffError as err:
                        if err.retryable:
                            raise
                        # refused before any claim: an answer, not a failure (nothing to roll back)
                        return ResumeRunOutput(claimed=False, refused=refused(err))
                if request is not None:  # the values, which the workflow never checks: off the event loop, once
                    try:
                        check = partial(check_decision, request, inp.request_id, inp.decision,
                                        max_items=self.settings.max_value_items,
                                        max_standing=self.settings.max_standing)
                        if quick_to_check(request, inp.decision):  # a few comparisons: no thread hop
                            check()
                        else:
                            await asyncio.to_thread(check)
                        if inp.decision.remember is not None and await self.store.get_standing_approval(
                                rule_id(inp.job_id, inp.request_id)) is None:
                            # a standing approval: within the cap (unless an earlier attempt of this
                            # activity made it already: that one counts, and the retry goes on)
                            await check_room(self.store, person.id, self.settings.max_standing_per_user)
                    except (InvalidDecision, InvalidValues, InvalidStandingApproval, StandingApprovalLimit) as err:
                        return ResumeRunOutput(claimed=False, refused=refused(err))
            sent = None if inp.timed_out else sender(inp)  # the deadline is sent by nobody
            attempt = DecisionAttempt(
                inp.job_id, inp.request_id, inp.token, inp.decision, inp.now, person.id if person else None,
                votes=inp.votes, vote=inp.vote, timed_out=inp.timed_out, sent=sent,
                # whoever decided (and voted, for a quorum) keeps the run in their history and sight
                participants=_took_part(person, inp),
                values_checked=request is not None,  # checked above, before the claim
                decider_name=person.name if person else None, authority=authority,
                access_since=checked.access_since if checked is not None else None,
                # the webhooks (and notifications) its deliveries need: read in its own write
                reads=await self._decision_reads(job, request or job.pending),
                stamp=carried.updated_at if carried is not None else None)

            def paused(job: Job) -> Any:  # the workflow's copy of the pause's state, when it is the job's
                return self._paused_state(job, inp.state, copy_first=True)

            try:
                attempted = await attempt_decision(
                    self.store, attempt, paused, self.receipt_keys,
                    job=job)  # as read: the claim rides in the decision's write while it still waits
            except AccessChanged:
                # the carried check is stale (their access changed since the API looked): nothing
                # was written; the decider is checked from the store now, and the decision applied
                # or refused on what it reads
                try:
                    person, authority = await self._decider_authority(job, inp.request_id,
                                                                      inp.user or inp.decided_by, request)
                except SignoffError as err:
                    if err.retryable:
                        raise
                    # a claim the attempt took before its write was refused is let go of (none: nothing)
                    await self.store.rollback_resume_claim(inp.job_id, inp.token)
                    return ResumeRunOutput(claimed=False, refused=refused(err))
                attempted = await attempt_decision(
                    self.store, replace(attempt, decided_by=person.id, decider_name=person.name, authority=authority,
                                        participants=_took_part(person, inp), access_since=None),
                    paused, self.receipt_keys, job=job)
            if attempted.outcome == "recorded":
                # An earlier attempt under this token applied a decision: this one's (a retried
                # activity), or, when the workflow task that ran it as a local activity was lost,
                # that of another Update the workflow takes first now. Go on from its record.
                assert attempted.claim is not None
                return await self._go_on_from(inp, attempted.claim)
            if attempted.outcome == "not_claimed":
                return ResumeRunOutput(claimed=False)
            job = attempted.job
            assert job is not None
            if attempted.outcome == "not_applied":
                return _not_applied(job)
            applied, written = attempted.applied, attempted.written
            assert applied is not None and attempted.graph is not None and attempted.state is not None
            await self._remember(job, request, inp, person.id if person else None)
            paused_at = job.pending.paused_at if job.pending is not None else None
            asked = request or job.pending
            metrics.decided(seconds_waited=(applied.decided_at - paused_at).total_seconds()
                            if paused_at else None, rerouted=applied.rerouted, timed_out=applied.timed_out,
                            via=(sent or {}).get("via"), flow_id=job.flow_id,
                            kind=asked.kind if asked is not None else None, action_id=applied.action_id,
                            max_flows=self.settings.metrics_max_flows)
            deliveries = await self._decision_deliveries(job, request or job.pending, written, attempt.reads)
            out, final = await self._after_decision(inp, attempted.graph, attempted.state, job)
        except SignoffError as err:
            raise to_failure(err) from None
        return ResumeRunOutput(claimed=True, update_id=inp.update_id, action_id=applied.action_id, out=out,
                               deliveries=deliveries, completed=_completed(out, attempted.graph, final))

    def _checked(self, inp: ResumeRunInput) -> Checked | None:
        """The API's check of this decision's decider, when it carried one that opens
        (engine/carried.py); None: the decider is read and checked here."""
        if not inp.checked or inp.user is not None or not inp.decided_by or inp.vote is not None or inp.votes:
            return None
        try:
            return open_checked(self.receipt_keys.box, inp.checked, job_id=inp.job_id, request_id=inp.request_id,
                                user_id=inp.decided_by)
        except SignoffError:  # no deployment key here: read as before
            return None

    async def _remember(self, job: Job, request: Any, inp: ResumeRunInput, maker_id: str | None) -> None:
        """The standing approval a recorded decision's ``remember`` makes (DESIGN §17), once."""
        if inp.decision.remember is None or request is None or maker_id is None or inp.timed_out:
            return
        remember = check_remember(request, inp.decision)  # checked before the claim
        if remember is not None:
            await remember_decision(self.store, job, request, maker_id, remember)

    async def _probe(self, inp: ResumeRunInput) -> ResumeRunOutput:
        """The workflow's catch-up (no decision of its own): go on from what an earlier attempt
        under ``inp.token`` recorded; an attempt that claimed and recorded nothing (it died
        between the two) has its claim let go of, so the run waits (or ends) as it was."""
        claim = await self.store.claim_decision(inp.job_id, inp.request_id, inp.token, claim=False)
        if claim.job is None:
            return ResumeRunOutput(claimed=False)
        if "decision" in claim.recorded:
            return await self._go_on_from(inp, claim)
        if claim.won:
            await self.store.rollback_resume_claim(inp.job_id, inp.token)
        return ResumeRunOutput(claimed=False)

    async def _go_on_from(self, inp: ResumeRunInput, claim: DecisionClaim) -> ResumeRunOutput:
        """Report what an earlier attempt under the same token did, and finish what it left
        undone, writing nothing twice: the decision it recorded (``update_id``: the Update that
        sent it, which may not be this one), where the run is now (ended; at its next pause,
        with the step and state reference that attempt returned; or still running after the
        decision: the instant layers built again from the record, as that attempt built them),
        and the webhook deliveries of the decision (and of the next pause): a workflow task that
        was lost took that attempt's with it, and a receiver dedupes them by the delivery id."""
        job, decided = claim.job, claim.recorded["decision"]
        assert job is not None
        if inp.decision.remember is not None and decided.data.get("update_id") == inp.update_id:
            # this decision was recorded by an earlier attempt, which may have died before its rule
            before_pending = (await self.codec.load(inp.state)).pending if inp.state is not None else None
            await self._remember(job, before_pending, inp, decided.data.get("decided_by"))
        expired = claim.recorded.get("expired")
        update_id, action_id = decided.data.get("update_id"), str(decided.data.get("action_id"))
        before = await self.codec.load(inp.state) if inp.state is not None else None
        request = before.pending if before is not None else None
        written = [*([("human_input_expired", expired.seq)] if expired is not None else []),
                   ("human_input_decision", decided.seq)]
        deliveries = await self._decision_deliveries(job, request, written)
        if decided.data.get("votes"):  # the vote that completed a quorum: the request's last one
            deliveries += await self._deliveries(job, "human_input_vote", inp.request_id, request)
        if job.status.terminal:
            return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries,
                                   out=_where_it_was(inp, job.status, done=True))
        if job.status == JobStatus.suspended and job.pending is not None and before is not None:
            # it reached the run's next pause (persisted, so the claim is cleared)
            cp = await self.store.load_latest_checkpoint(job.run_id)
            if cp is None:
                raise StoreError("The run waits at its next pause without its checkpoint; asked again")
            state = await self.codec.internalize(cp.data)
            step = inp.step + state.layers - before.layers  # one step per layer built after the decision
            ref, _ = await self.codec.dump(state, _blob_step(state))
            pause = await self._deliveries(job, "human_input_required", job.pending.request_id, job.pending)
            return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries,
                                   out=RunLayerOutput(step=step, state=ref, pending=job.pending, persisted=True,
                                                      deliveries=pause))
        if not claim.won:  # neither its claim nor a pause of the run after it: nothing to go on from
            return ResumeRunOutput(claimed=False)
        # still running after the decision: from the run's latest checkpoint
        try:
            latest, graph = await self._paused_state(job, inp.state)
        except NotResumable:
            # that attempt ended the run since the claim read the job (its end dropped the
            # checkpoint): report the end it reached, as for a job found ended above
            now = await self._job(inp.job_id)
            if not now.status.terminal:
                raise
            return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries,
                                   out=_where_it_was(inp, now.status, done=True))
        if latest.pending is None:
            raise StoreError("The run's checkpoint holds no pause; asked again")
        if latest.pending.request_id != decided.data.get("request_id"):
            # a later pause: that attempt reached the next gate and saved its checkpoint, and did
            # not persist it (its worker died, a write failed): persist it now, never apply the
            # decision again to it (the next gate is decided by its own decision)
            step = inp.step + latest.layers - before.layers if before is not None else inp.step
            return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries,
                                   out=await self._layer_output(
                                       inp.job_id, graph, latest, step, inp.now, [],
                                       blob_step=_blob_step(latest),
                                       persist=inp.persist, job=job))
        # the pause of this decision: the state it made, from the record
        applied = recorded_decision(latest.pending, decided.data, expired.data if expired is not None else None)
        trace_gate(job, graph, latest, applied)
        out, _ = await self._after_decision(inp, graph, with_decision(latest, applied), job)
        return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries, out=out)

    async def _paused_state(self, job: Job, fallback: StateRef | None, *, copy_first: bool = False
                            ) -> tuple[RunState, Graph]:
        """The run's state at its pause (the checkpoint; the workflow's copy if it is gone) and
        its graph. ``copy_first``: the workflow's copy (``fallback``, inline) when it holds the
        very pause the job waits at (the same pending request, stamped at the same instant):
        that pause's checkpoint was written from the same state, so it is not read (issue 33)."""
        if copy_first and fallback is not None and fallback.inline is not None and job.pending is not None:
            state = await self.codec.load(fallback)
            if state.pending is not None and state.pending == job.pending:
                return state, self.graph(state)
        cp = await self.store.load_latest_checkpoint(job.run_id)
        if cp is not None:
            state = await self.codec.internalize(cp.data)
        elif fallback is not None:
            state = await self.codec.load(fallback)
        else:
            raise NotResumable("the checkpoint is gone")
        return state, self.graph(state)

    async def _after_decision(self, inp: ResumeRunInput, graph: Graph, state: RunState, job: Job
                              ) -> tuple[RunLayerOutput, RunState]:
        """The layers that follow the decision, built here while they are instant, up to the next
        pause (persisted with ``inp.persist``) or the end of the run (recorded), and the state
        they left. ``job``: as the claim read it."""
        step, built = inp.step, []
        # Layers built here happen after the decision, in real time: a pause reached here is
        # stamped now (the workflow's time when that is later, e.g. under time skipping).
        clock = lambda: max(inp.now, utcnow())  # noqa: E731
        # their messages held for the end's write: a run that ends here ends in one commit
        held = HeldMessages(self.store)
        try:
            if inp.inline:
                state, step, built = await self._instant_layers(graph, state, step, built, clock, history=held)
        except BaseException:
            await held.flush()
            raise
        return await self._layer_output(inp.job_id, graph, state, step, inp.now, built,
                                        blob_step=_blob_step(state), persist=inp.persist,
                                        job=job, held=held), state

    @activity.defn(name="rollback_resume")
    async def rollback_resume(self, inp: RollbackResumeInput) -> bool:
        """The claim let go of (the job waits again, its request pending): True, also when there
        was nothing of this claim's to let go of (never taken, the run moved on to its next
        pause, another claim, the job ended). False only when a decision recorded under the
        claim holds the job (running under it, its request cleared: Store.rollback_resume_claim
        refuses to undo it), which the workflow cannot carry on: it fails the run."""
        if await self.store.rollback_resume_claim(inp.job_id, inp.claim_token):
            return True
        claim = await self.store.claim_decision(inp.job_id, "", inp.claim_token, claim=False)
        return not (claim.won and "decision" in claim.recorded and claim.job is not None
                    and not claim.job.status.terminal)


def _where_it_was(inp: ResumeRunInput, status: JobStatus, *, done: bool = False, cancelled: bool = False
                  ) -> RunLayerOutput:
    """The run left where the decision found it (nothing built): it ended (``done``: a stop got in
    after the claim) or the decision was not recorded (``cancelled``); ``status``: the job's."""
    return RunLayerOutput(step=inp.step, state=inp.state or StateRef(), done=done, cancelled=cancelled,
                          status=status.value)


# the largest result (its JSON) the Update's answer carries; a larger one is read by the API
RESULT_BYTES = 8 * 1024


def _completed(out: RunLayerOutput, graph: Graph, state: RunState) -> dict[str, Any] | None:
    """The result the run's completion recorded (final_result, as _complete wrote it), when this
    attempt completed the run and the result is small enough to ride in the Update's answer."""
    if not out.done or out.status != JobStatus.completed.value:
        return None
    result = final_result(graph, state)
    return result if len(json.dumps(result, separators=(",", ":"), default=str)) <= RESULT_BYTES else None


def _not_applied(job: Job) -> ResumeRunOutput:
    """A decision that claimed the job and was not recorded: the job ended first (a stop, after
    the claim) or the claim was let go of. Refused, never answered as applied: the decision
    took no effect (DESIGN §1: a decision answered as applied is a decision recorded). Nothing
    to roll back (the claim is no longer the job's, or the job is over)."""
    why = f"was {job.status.value}" if job.status.terminal else "let go of the decision's claim"
    return ResumeRunOutput(claimed=False, refused=refused(NotResumable(
        f"The run {why} before the decision was recorded: it was not applied", job_id=job.job_id)))


@dataclass(frozen=True)
class _Person:
    """The decider as the API's carried check names them (engine/carried.py)."""

    id: str
    name: str


def _took_part(person: Any, inp: ResumeRunInput) -> list[str]:
    """Who took part in a decision: the decider and every voter of its quorum."""
    return [*([person.id] if person else []), *(v.user for v in inp.votes), *([inp.vote.user] if inp.vote else [])]

