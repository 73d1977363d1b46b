"""The FlowRun activities: thin adapters between the workflow and the engine. All I/O of a run
lives here (component builds, the job table, events, checkpoints, chat cards, blobs); the
rules live in the engine (the steps, :mod:`~signoff.engine.decisions`,
:mod:`~signoff.engine.lifecycle`), and a SignoffError leaves as a Temporal failure in one place
(:mod:`signoff.activities.failures`): retryable or not by the error's ``retryable``
(docs/temporal.md).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from temporalio import activity

from signoff.activities.failures import refused, to_failure
from signoff.activities.sender import sender
from signoff.activities.state import StateCodec
from signoff.activities.types import (
    Delivery,
    FinishInput,
    FinishOutput,
    GateTimerInput,
    GateTimerOutput,
    RecordEventInput,
    RecordVoteInput,
    RecordVoteOutput,
    ResumeRunInput,
    ResumeRunOutput,
    RollbackResumeInput,
    RunLayerInput,
    RunLayerOutput,
    StateRef,
)
from signoff.engine import metrics, tracing, webhooks
from signoff.engine.access import Access
from signoff.engine.context import RunBudget, egress_policy
from signoff.engine.decisions import (
    apply_decision,
    check_decider,
    check_decision,
    decision_event,
    expired_event,
    recorded_decision,
    user_ref,
    with_decision,
    with_defaults,
)
from signoff.engine.errors import (
    FlowNotFound,
    NotAnApprover,
    NotResumable,
    RunBudgetExceeded,
    SignoffError,
    WaitingOnOthersLimit,
)
from signoff.engine.graph import Graph
from signoff.engine.lifecycle import RunEnd, end_run, run_blob_prefix
from signoff.engine.liveness import is_finished, plan_next
from signoff.engine.models import AppliedDecision, DecisionClaim, Job, JobStatus, PendingRequest, User, Vote, utcnow
from signoff.engine.run import apply_layer, build_vertices, context_for, final_result
from signoff.engine.secrets import Vault
from signoff.engine.settings import Settings
from signoff.engine.spec import apply_tweaks, load_flow
from signoff.engine.state import RunState, Spent, new_run_state
from signoff.engine.store.base import Store, StoreError

_GRAPH_CACHE_SIZE = 256
HEARTBEAT_EVERY = 1.0  # seconds; the workflow's heartbeat timeout is 5 s
MAX_INLINE_LAYERS = 64


class FlowActivities:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.codec = StateCodec(store, settings.inline_output_bytes)
        self._graphs: OrderedDict[str, Graph] = OrderedDict()
        self.access = Access(store)
        self.vault = Vault(store, settings)

    def all(self) -> list[Any]:
        return [self.run_layer, self.resume_run, self.rollback_resume, self.finish,
                self.record_event, self.record_vote, self.gate_timer, self.deliver_webhook]

    # ---- activities ----------------------------------------------------------------------

    @activity.defn(name="run_layer")
    async def run_layer(self, inp: RunLayerInput) -> RunLayerOutput:
        """Build the next layer (and the instant ones after it, ``inp.inline``). On a pause the
        checkpoint is saved and, with ``inp.persist``, the pause persisted; after the last layer
        the completion is recorded."""
        try:
            if inp.state is None:
                job = await self._job(inp.job_id)
                if job.status.terminal:
                    # the job ended before its first layer (e.g. cancelled), or a retry of a first
                    # layer that already ran the whole run: report what the job really is, and
                    # its trace says so (same ids: a retry rewrites it)
                    await end_run(self.store, inp.job_id, RunEnd(job.status))
                    return RunLayerOutput(step=inp.step, state=StateRef(), cancelled=True, status=job.status.value)
                state = await self._new_state(job)
            else:
                state = await self.codec.load(inp.state)
            graph = self.graph(state)
            ids = plan_next(graph, state)
            step, built = inp.step + 1, list(ids)
            if ids and inp.state is not None and not all(graph.vertices[v].component_class.instant for v in ids):
                # a layer that dials out, calls a model or runs a flow: not for a run that was
                # stopped meanwhile (the stop ends the job first, then cancels the workflow,
                # which may already have scheduled this layer)
                job = await self._job(inp.job_id)
                if job.status.terminal:
                    return RunLayerOutput(step=inp.step, state=inp.state, cancelled=True, status=job.status.value)
            if ids:
                # the run's budgets go on from what an earlier attempt of this layer spent
                budget = RunBudget.of(_carried(state.spent, activity.info().heartbeat_details), self.settings)
                async with _heartbeating(budget):
                    state = await self._build_layer(graph, state, ids, lambda: inp.now, budget=budget)
                if inp.inline:
                    # stamped now, as resume_run's (the workflow's time when that is later): a gate
                    # built here paused after the layer before it, and its span starts after that
                    # layer's
                    state, step, built = await self._instant_layers(graph, state, step, built,
                                                                    lambda: max(inp.now, utcnow()),
                                                                    over_budget_fails=True)
            return await self._layer_output(inp.job_id, graph, state, step, inp.now, built, persist=inp.persist,
                                            charge=True)
        except SignoffError as err:
            raise to_failure(err) from None

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
        # who sent it is read from Temporal's history while the store is asked the rest (a probe
        # sends nothing: it goes on from what was recorded)
        sending = None if inp.timed_out or inp.probe else asyncio.ensure_future(sender(inp.job_id, inp))
        try:
            return await self._resume_run(inp, sending)
        finally:
            if sending is not None and not sending.done():
                sending.cancel()

    async def _resume_run(self, inp: ResumeRunInput, sending: asyncio.Future[dict[str, Any]] | None
                          ) -> ResumeRunOutput:
        if inp.probe:
            try:
                return await self._probe(inp)
            except SignoffError as err:
                raise to_failure(err) from None
        try:
            job = await self._job(inp.job_id)
            person, request = None, await self.access.current_request(job, inp.request_id)
            if not inp.timed_out:  # the deadline decides for nobody
                # whoever sends it (the API, the CLI, the Web UI), a decision passes the same
                # checks as that person's HTTP resume: an approver, who may (still) decide it
                try:
                    person = await self._decider_may_decide(job, inp.request_id, inp.user or inp.decided_by,
                                                            request)
                except SignoffError as err:
                    if err.retryable:
                        raise
                    # refused before any claim: an answer, not a failure (nothing to roll back)
                    return ResumeRunOutput(claimed=False, refused=refused(err))
            claim = await self.store.claim_decision(inp.job_id, inp.request_id, inp.token)
            if claim.job is None:
                raise NotResumable(f"job {inp.job_id} not found")
            job = claim.job
            if "decision" in claim.recorded:
                # An earlier attempt under this token applied a decision: this one's (a retried
                # activity), or, when the workflow task that ran it as a local activity was lost,
                # that of another Update the workflow takes first now. Go on from its record.
                return await self._go_on_from(inp, claim)
            if not claim.won:
                return ResumeRunOutput(claimed=False)
            if job.status.terminal:  # claimed under this token, then ended (a stop) before the decision
                return _not_applied(job)
            sent = None if sending is None else await sending
            paused, graph = await self._paused_state(job, inp.state)
            votes = [*inp.votes, inp.vote] if inp.vote is not None else inp.votes
            state, applied = apply_decision(paused, inp.request_id, inp.decision, inp.now,
                                            person.id if person else None, votes=votes, timed_out=inp.timed_out)
            self._trace_gate(job, graph, paused, applied)  # "Human In The Loop — {label}"
            # whoever decided (and voted, for a quorum) keeps the run in their history and sight
            written = await self._record(job, paused, applied, inp, sent, _took_part(person, inp))
            if written is None:
                # Not recorded: another run of this attempt recorded its own decision first (a lost
                # task's local activity still running beside the one that runs it again), or a
                # stop ended the job after the claim. Never go on from a decision not recorded.
                claim = await self.store.claim_decision(inp.job_id, inp.request_id, inp.token, claim=False)
                if "decision" in claim.recorded and claim.job is not None:
                    return await self._go_on_from(inp, claim)
                return _not_applied(claim.job or job)
            paused_at = job.pending.paused_at if job.pending is not None else None
            metrics.decided(seconds_waited=(_aware(applied.decided_at) - _aware(paused_at)).total_seconds()
                            if paused_at else None, rerouted=applied.rerouted, timed_out=applied.timed_out,
                            via=(sent or {}).get("via"))
            deliveries = await self._decision_deliveries(job, request or job.pending, written)
            out = await self._after_decision(inp, graph, state, job)
        except SignoffError as err:
            raise to_failure(err) from None
        return ResumeRunOutput(claimed=True, update_id=inp.update_id, action_id=applied.action_id, out=out,
                               deliveries=deliveries)

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
        latest, graph = await self._paused_state(job, inp.state)
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
        self._trace_gate(job, graph, latest, applied)
        return ResumeRunOutput(claimed=True, update_id=update_id, action_id=action_id, deliveries=deliveries,
                               out=await self._after_decision(inp, graph, with_decision(latest, applied), job))

    async def _paused_state(self, job: Job, fallback: StateRef | None) -> tuple[RunState, Graph]:
        """The run's state at its pause (the checkpoint; the workflow's copy if it is gone) and
        its graph."""
        cp = await self.store.load_latest_checkpoint(job.run_id)
        if cp is not None:
            state = await self.codec.internalize(cp.data)
        elif fallback is not None:
            state = await self.codec.load(fallback)
        else:
            raise NotResumable("the checkpoint is gone")
        return state, self.graph(state)

    @staticmethod
    def _trace_gate(job: Job, graph: Graph, paused: RunState, applied: AppliedDecision) -> None:
        """The gate's span, "Human In The Loop — {label}" (its id is the same each time: a decision
        applied again writes it again, not twice)."""
        assert paused.pending is not None and paused.pending_vertex is not None
        tracing.record_gate(run_id=paused.run_id, pending=paused.pending, applied=applied,
                            vertex_id=paused.pending_vertex, job_id=job.job_id, flow_id=paused.flow_id,
                            component_type=graph.vertices[paused.pending_vertex].type)

    async def _record(self, job: Job, paused: RunState, applied: AppliedDecision, inp: ResumeRunInput,
                      sent: dict[str, Any] | None, participants: list[str]) -> list[tuple[str, int]] | None:
        """The decision's records in one store write under the claim (Store.record_decision): the
        vote that completed a quorum (``human_input_vote``, with the resolution),
        ``human_input_expired`` (when rerouted) then ``human_input_decision`` (with how it was
        ``sent``: :mod:`~signoff.activities.sender`), the card stamped, the pending request
        cleared, the ``participants`` recorded. Returns each event's (name, seq); None when the
        claim is no longer the decision's (a stop ended the job), and nothing was written."""
        assert paused.pending is not None
        events: list[tuple[str, dict[str, Any], str]] = []
        if inp.vote is not None:  # the same dedupe key as record_vote's: one event per person, retries included
            events.append(("human_input_vote", {
                **_vote_data(inp.request_id, inp.vote, len(applied.votes), paused.pending.required_approvals),
                **(sent or {})}, f"vote:{inp.request_id}:{inp.vote.user}"))
        if applied.rerouted:
            events.append(("human_input_expired", expired_event(applied), f"{inp.token}:expired"))
        events.append(("human_input_decision", {**decision_event(applied), **(sent or {})}, f"{inp.token}:decision"))
        seqs = await self.store.record_decision(job.job_id, events, token=inp.token, request_id=applied.request_id,
                                                action_id=applied.action_id, participants=participants)
        return None if seqs is None else [(name, seq) for (name, _, _), seq in zip(events, seqs)]

    async def _after_decision(self, inp: ResumeRunInput, graph: Graph, state: RunState, job: Job) -> RunLayerOutput:
        """The layers that follow the decision, built here while they are instant, up to the next
        pause (persisted with ``inp.persist``) or the end of the run (recorded). ``job``: as the
        claim read it."""
        step, built = inp.step, []
        # Layers built here happen after the decision, in real time: a pause reached here is
        # stamped now (the workflow's time when that is later, e.g. under time skipping).
        clock = lambda: max(inp.now, utcnow())  # noqa: E731
        if inp.inline:
            state, step, built = await self._instant_layers(graph, state, step, built, clock)
        return await self._layer_output(inp.job_id, graph, state, step, inp.now, built,
                                        blob_step=_blob_step(state), persist=inp.persist,
                                        job=job)

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

    @activity.defn(name="finish")
    async def finish(self, inp: FinishInput) -> FinishOutput:
        """Record the end of a run; returns what the job really is afterwards (a job already
        ended by someone else, e.g. a stop claim, keeps its status and gets no second event)."""
        status = JobStatus(inp.status)
        if status == JobStatus.completed:
            state = await self.codec.load(inp.state) if inp.state else None
            result = final_result(self.graph(state), state) if state else {}
            return FinishOutput(status=await self._complete(inp.job_id, result, state))
        end = RunEnd(status, error=(inp.error or {"error": "failed", "type": "Error"}) if status == JobStatus.failed
                      else None, max_suspend_seconds=self.settings.max_suspend_seconds, deadline=inp.deadline)
        # a timeout ends only a run that still waits: a decision that got in first goes on
        expect = [JobStatus.suspended] if status == JobStatus.timed_out else None
        ended = await end_run(self.store, inp.job_id, end, expect=expect)
        return FinishOutput(status=ended.job.status.value if ended.job else inp.status)

    @activity.defn(name="record_event")
    async def record_event(self, inp: RecordEventInput) -> None:
        """An event of the run's (a rejected Signal's), unless the job has ended: nothing follows
        its terminal event (a stop ends the job before its workflow hears of it)."""
        job = await self.store.get_job(inp.job_id)
        if job is not None and not job.status.terminal:
            await self.store.append_event(inp.job_id, inp.event, inp.data)

    # ---- helpers ---------------------------------------------------------------------------

    def graph(self, state: RunState) -> Graph:
        g = self._graphs.get(state.flow_hash)
        if g is None:
            g = Graph.from_spec(state.flow)
            self._graphs[state.flow_hash] = g
            while len(self._graphs) > _GRAPH_CACHE_SIZE:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(state.flow_hash)
        return g

    async def _job(self, job_id: str) -> Job:
        job = await self.store.get_job(job_id)
        if job is None:
            raise NotResumable(f"job {job_id} not found")
        return job

    async def _decider_may_decide(self, job: Job, request_id: str, who: str | None,
                                  pending: PendingRequest | None = None) -> User:
        """The person a decision is made for (``who``: a user id or name, default the run's
        owner), checked as their HTTP resume is (DESIGN §9, §13). ``pending``: the request as
        Access.current_request gave it, when the caller read it already."""
        person = await self.access.person(who or job.user_id)
        if person is None:
            raise NotAnApprover(f"No user {who!r}: a decision through Temporal names the person it is for "
                                '("user": a user name or id)', job_id=job.job_id)
        if pending is None:
            pending = await self.access.current_request(job, request_id)
        if pending is not None:
            check_decider(pending, await self.access.decider(job, person, pending))
        return person

    async def _seq_of(self, job_id: str, event: str, request_id: str) -> int | None:
        """The seq of the last ``event`` about ``request_id``."""
        found = [e.seq for e in await self.store.read_events(job_id)
                 if e.event == event and e.data.get("request_id") == request_id]
        return found[-1] if found else None

    async def _deliveries(self, job: Job, event: str, request_id: str, pending: PendingRequest | None,
                          seq: int | None = None) -> list[Delivery]:
        """The webhooks that get the last ``event`` about ``request_id``: those of the run's owner
        and of the people who may decide the request (DESIGN §9). Nothing is read when nobody
        has a webhook for that event."""
        people = {job.user_id}
        if pending is not None:
            refs = await self.store.request_approvers(job.job_id, pending.request_id) or pending.approver_refs
            people |= await self.access.people(refs)
        hooks = await self.store.webhooks_for(sorted(await self._not_muting(job, people)), event)
        if not hooks:
            return []
        seq = seq if seq is not None else await self._seq_of(job.job_id, event, request_id)
        if seq is None:
            return []
        return [Delivery(webhook_id=h.id, job_id=job.job_id, seq=seq) for h in hooks]

    @activity.defn(name="record_vote")
    async def record_vote(self, inp: RecordVoteInput) -> RecordVoteOutput:
        """One approver's vote on a request that needs several: checked as their HTTP resume is,
        then the ``human_input_vote`` event, written only while the request still waits (one
        transaction), once per person (a retry finds its own vote). ``check_only`` (the vote that
        completes the quorum): checked, not written; resume_run writes it with the resolution."""
        try:
            job = await self._job(inp.job_id)
            person = await self._decider_may_decide(job, inp.request_id, inp.user or inp.decided_by)
            votes = await self.access.votes(job.job_id, inp.request_id)
            mine = next((v for v in votes if v.user == person.id), None)
            if mine is None:
                pending = await self.access.current_request(job, inp.request_id)
                check_decision(pending, inp.request_id, inp.decision, waiting=job.status == JobStatus.suspended,
                               decider=await self.access.decider(job, person, pending), votes=votes,
                               max_items=self.settings.max_value_items)
                assert pending is not None
                mine = Vote(user=person.id, action_id=inp.decision.action_id,
                            values=with_defaults(pending, inp.decision.action_id, inp.decision.values), at=inp.now)
                if inp.check_only:
                    return RecordVoteOutput(vote=mine)
                data = {**_vote_data(inp.request_id, mine, len(votes) + 1, pending.required_approvals),
                        **await sender(job.job_id, inp)}
                if await self.store.append_event_if_waiting(job.job_id, inp.request_id, "human_input_vote", data,
                                                            dedupe_key=f"vote:{inp.request_id}:{person.id}") is None:
                    raise NotResumable("The request no longer waits for votes", job_id=job.job_id)
            # also on a retry that found its vote (the first attempt may have died before this)
            await self.store.add_participants(job.job_id, [person.id])
            return RecordVoteOutput(vote=mine, deliveries=await self._deliveries(
                job, "human_input_vote", inp.request_id, job.pending))
        except SignoffError as err:
            raise to_failure(err) from None

    @activity.defn(name="gate_timer")
    async def gate_timer(self, inp: GateTimerInput) -> GateTimerOutput:
        """A timer of a waiting request fired (DESIGN §9): a reminder, the escalation (its
        approvers added once), or the deadline of ``on_timeout: fail`` (``human_input_expired``
        before the run ends). Each event is written only while the request waits, once."""
        job = await self._job(inp.job_id)
        pending = await self.access.current_request(job, inp.request_id)
        refs: list[str] = []
        if inp.kind == "reminder":
            event, data, key = "human_input_reminder", {"request_id": inp.request_id, "reminder": inp.n}, f"remind:{inp.n}"
        elif inp.kind == "escalation":
            owner = await self._flow_owner(job)
            added = await self.access.approver_refs(owner, inp.escalate_to)
            if pending is not None and not (pending.approvers or pending.approver_refs):
                # nobody named: the run's owner decided; the escalation adds people to the owner
                added = [user_ref(job.user_id), *added]
            refs = await self.store.add_request_approvers(job.job_id, inp.request_id, added)
            event, data, key = "human_input_escalated", {"request_id": inp.request_id, "added": inp.escalate_to}, "escalate"
        else:
            event, key = "human_input_expired", "expired"
            data = {"request_id": inp.request_id, "requested_action": None, "rerouted_to": None,
                    "timeout_seconds": pending.timeout_seconds if pending else None}
        seq = await self.store.append_event_if_waiting(job.job_id, inp.request_id, event, data,
                                                       dedupe_key=f"{key}:{inp.request_id}")
        deliveries = await self._deliveries(job, event, inp.request_id, pending, seq) if seq is not None else []
        return GateTimerOutput(written=seq is not None, approver_refs=refs, deliveries=deliveries)

    @activity.defn(name="deliver_webhook")
    async def deliver_webhook(self, inp: Delivery) -> None:
        """One event to one webhook (retried with backoff by the workflow's policy); every
        attempt is logged. A webhook deleted meanwhile gets nothing."""
        hook = await self.store.get_webhook(inp.webhook_id)
        job = await self.store.get_job(inp.job_id)
        events = await self.store.read_events(inp.job_id, after_seq=inp.seq - 1, limit=1)
        if hook is None or job is None or not events:
            return
        event = events[0]
        body = webhooks.payload(event, job, webhooks.card_url(self.settings.effective_api_url, job.job_id,
                                                              event.data.get("request_id")))
        attempt = activity.info().attempt
        try:
            status = await webhooks.post(hook.url, body, self.vault.box.open(hook.secret_ciphertext),
                                         event=event.event, delivery_id=f"{job.job_id}:{event.seq}:{hook.id}",
                                         policy=egress_policy(self.settings.egress_allow))
        except webhooks.DeliveryFailed as err:
            await self.store.log_delivery(hook.id, event=event.event, job_id=job.job_id, seq=event.seq,
                                          attempt=attempt, status_code=err.details.get("status_code"),
                                          error=err.message, delivered=False)
            raise to_failure(err) from None
        await self.store.log_delivery(hook.id, event=event.event, job_id=job.job_id, seq=event.seq, attempt=attempt,
                                      status_code=status, error=None, delivered=True)

    async def _decision_deliveries(self, job: Job, request: PendingRequest | None,
                                   written: list[tuple[str, int]]) -> list[Delivery]:
        """The webhook deliveries of a decision's events (``written``: (name, seq) of the vote
        that completed a quorum, expired, decided), to the owner's webhooks and those of the
        people who could decide ``request`` (its approvers as they were read for the check)."""
        people = {job.user_id}
        if request is not None and request.approver_refs:
            people |= await self.access.people(request.approver_refs)
        people = await self._not_muting(job, people)
        out: list[Delivery] = []
        for event, seq in written:
            out += [Delivery(webhook_id=h.id, job_id=job.job_id, seq=seq)
                    for h in await self.store.webhooks_for(sorted(people), event)]
        return out

    async def _not_muting(self, job: Job, people: set[str]) -> set[str]:
        """``people`` but those who muted the run's owner (their webhooks get none of the owner's
        requests; docs/security.md, "Fan-out and approvers"). The owner always gets their own."""
        others = sorted(people - {job.user_id})
        return people - await self.store.muted_by(job.user_id, others) if others else people

    async def _flow_owner(self, job: Job) -> str | None:
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        return flow.owner_id if flow else None

    async def _new_state(self, job: Job) -> RunState:
        # the version the job was created with, not a later edit of the flow
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        if flow is None:
            raise FlowNotFound(f"flow {job.flow_id} was deleted")
        spec = load_flow(apply_tweaks(flow.spec, job.request.get("tweaks")))
        if job.status == JobStatus.queued:
            await self.store.set_status(job.job_id, JobStatus.in_progress, expect=[JobStatus.queued])
        state = new_run_state(spec, run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, user_id=job.user_id,
                              owner_id=flow.owner_id, session_id=job.session_id,
                              input_value=job.request.get("input_value"))
        # the run's provisional root span: the trace lists as running from the first layer
        await tracing.open_run(self.store, run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, name=flow.name,
                               start=job.created_at)
        return state

    async def _build_layer(self, graph: Graph, state: RunState, ids: list[str], clock: Callable[[], datetime],
                           budget: RunBudget | None = None) -> RunState:
        ctx = context_for(state, history=self.store, flow_loader=self.access.flow_loader(state.user_id),
                          secrets=self.vault.value, clock=clock,
                          settings=self.settings,  # egress, caps, budgets, an Agent's model defaults
                          **({"budget": budget} if budget is not None else {}),
                          **tracing.RunTracer(graph, state).hooks())  # a span per built vertex
        layer = await build_vertices(graph, state, ids, ctx)
        return apply_layer(graph, state, layer)

    async def _instant_layers(self, graph: Graph, state: RunState, step: int, built: list[str],
                              clock: Callable[[], datetime], *, over_budget_fails: bool = False
                              ) -> tuple[RunState, int, list[str]]:
        """The layers that follow, built here while they are instant (``Component.instant``: no
        I/O beyond the store, so a retry that builds them again repeats nothing outside), up to
        a pause or the end of the run. A failure leaves the state before that layer: the workflow
        builds it with ``run_layer``, its retry policy and its ``run_failed``; with
        ``over_budget_fails`` (``run_layer``'s own), a layer over the run's budgets fails the
        activity at once, as ``run_layer`` building it would."""
        for _ in range(MAX_INLINE_LAYERS):
            if state.pending is not None:
                break
            ids = plan_next(graph, state)
            if not ids or not all(graph.vertices[v].component_class.instant for v in ids):
                break
            try:
                state = await self._build_layer(graph, state, ids, clock)
            except RunBudgetExceeded:
                if over_budget_fails:
                    raise
                break
            except Exception:  # noqa: BLE001 - run_layer builds it again, with its retry policy
                break
            step += 1
            built = [*built, *ids]
        return state, step, built

    async def _persist_pause(self, job: Job, pending: PendingRequest, dedupe_key: str | None) -> list[Delivery]:
        """The pause made visible: who may decide (the request's approvers), the
        ``human_input_required`` event and ``suspended`` with the pending request; returns the
        webhook deliveries of the event."""
        await tracing.flush()  # the spans of what was built before the pause: in the trace as it shows
        if pending.approver_refs:  # before the status: an approver's inbox lists it as it shows
            await self.store.set_request_approvers(job.job_id, pending.request_id, pending.approver_refs)
        if not (job.status == JobStatus.suspended and job.pending and job.pending.request_id == pending.request_id):
            # the event and the status in one conditional write: a stop that ended the job since
            # it was read (the workflow's finish(cancelled) runs alongside) gets no
            # ``human_input_required`` after its ``run_cancelled``; a retry of an attempt that
            # already persisted this pause writes nothing
            await self.store.mark_suspended(job.job_id, pending,
                                            event=("human_input_required", pending.model_dump(mode="json")),
                                            dedupe_key=dedupe_key)
        return await self._deliveries(job, "human_input_required", pending.request_id, pending)

    async def _layer_output(self, job_id: str, graph: Graph, state: RunState, step: int, now: datetime,
                            built: list[str], blob_step: int | None = None, *, persist: bool = False,
                            job: Job | None = None, charge: bool = False) -> RunLayerOutput:
        """Where the run is after a layer: the state handed back (inline or by reference); on a
        pause the request's approvers resolved and the checkpoint saved, and with ``persist`` the
        pause persisted (the job ``suspended``: the workflow then waits); at the end the completion recorded. With ``charge`` (a layer's activity), a
        state stored as a blob counts against the run's output bytes (StateCodec.dump)."""
        if state.pending is not None and state.pending.approvers and not state.pending.approver_refs:
            refs = await self.access.approver_refs(state.owner_id, state.pending.approvers)
            state.pending = state.pending.model_copy(update={"approver_refs": refs})
        if state.pending is not None and state.pending.approver_refs:
            await self._may_wait_on_others(job_id, state.user_id, state.pending.approver_refs)
        ref, data = await self.codec.dump(state, step if blob_step is None else blob_step,
                                          budget=RunBudget.of(state.spent, self.settings) if charge else None)
        if state.pending is not None:
            ttl = self.settings.checkpoint_ttl_seconds
            await self.store.save_checkpoint(
                state.run_id, data, job_id=job_id,
                expires_at=(now + timedelta(seconds=ttl)) if ttl else None,
            )
        done = state.pending is None and is_finished(graph, state)
        if done:
            status = await self._complete(job_id, final_result(graph, state), state, job)
            return RunLayerOutput(step=step, state=ref, done=True, built=built, status=status)
        # A layer that outlived its run (stopped, superseded, timed out meanwhile: a layer's
        # activity may go on after its workflow was cancelled and closed) must not leave the
        # checkpoint and blobs it just wrote: the run's cleanup may already be over. If the job
        # ends after this read, that cleanup runs after these writes and deletes them. The
        # workflow (if it still runs) then ends with the job's real status.
        job = await self.store.get_job(job_id)
        if job is not None and job.status.terminal:
            await self.store.delete_checkpoints(job.run_id)
            await self.store.delete_blobs(run_blob_prefix(job_id))
            return RunLayerOutput(step=step, state=ref, built=built, cancelled=True, status=job.status.value)
        if persist and job is not None and state.pending is not None:
            # one event, retries included (its dedupe key)
            deliveries = await self._persist_pause(job, state.pending, f"pause:{step}:{state.pending.request_id}")
            return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built, persisted=True,
                                  deliveries=deliveries)
        return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built)

    async def _may_wait_on_others(self, job_id: str, user_id: str, refs: list[str]) -> None:
        """A request of ``user_id``'s run that names someone else (another user, a group) may wait
        only while fewer than SIGNOFF_MAX_WAITING_FOR_OTHERS of their other requests do: asking
        is bounded per requester (docs/security.md, "Fan-out and approvers"). Over it the run
        fails with WAITING_ON_OTHERS_LIMIT before anyone is asked (no event, no webhook)."""
        if not any(ref.startswith("group:") or (ref.startswith("user:") and ref != f"user:{user_id}")
                   for ref in refs):
            return
        limit = self.settings.max_waiting_for_others
        waiting = [j for j in await self.store.waiting_on_others(user_id, limit=limit + 1) if j != job_id]
        if len(waiting) >= limit:
            raise WaitingOnOthersLimit(
                f"{len(waiting)} of this user's requests already wait on other people, as many as this deployment "
                f"allows (SIGNOFF_MAX_WAITING_FOR_OTHERS={limit}): this run asks nobody more and fails")

    async def _complete(self, job_id: str, result: dict[str, Any], state: RunState | None,
                        job: Job | None = None) -> str:
        """in_progress → completed with the result and the ``end`` event; returns the job's real
        status (a run cancelled meanwhile stays cancelled). The trace's root span is named after
        the flow, whose name is in the run's spec (the flow record's, as saved)."""
        name = state.flow.get("name") if state is not None else None
        ended = await end_run(self.store, job_id, RunEnd(JobStatus.completed, result=result),
                              expect=[JobStatus.in_progress], name=name if isinstance(name, str) and name else None,
                              job=job)
        return ended.job.status.value if ended.job else JobStatus.completed.value


def _where_it_was(inp: ResumeRunInput, status: JobStatus, *, done: bool = False, cancelled: bool = False
                  ) -> RunLayerOutput:
    """The run left where the decision found it (nothing built): it ended (``done``: a stop got in
    after the claim) or the decision was not recorded (``cancelled``); ``status``: the job's."""
    return RunLayerOutput(step=inp.step, state=inp.state or StateRef(), done=done, cancelled=cancelled,
                          status=status.value)


def _not_applied(job: Job) -> ResumeRunOutput:
    """A decision that claimed the job and was not recorded: the job ended first (a stop, after
    the claim) or the claim was let go of. Refused, never answered as applied: the decision
    took no effect (DESIGN §1: a decision answered as applied is a decision recorded). Nothing
    to roll back (the claim is no longer the job's, or the job is over)."""
    why = f"was {job.status.value}" if job.status.terminal else "let go of the decision's claim"
    return ResumeRunOutput(claimed=False, refused=refused(NotResumable(
        f"The run {why} before the decision was recorded: it was not applied", job_id=job.job_id)))


def _blob_step(state: RunState) -> int:
    """The step in the blob key of a state stored after a decision (StateCodec.dump): one key per
    (decisions taken, layers built), so a state stored after a later decision never overwrites
    the blob an earlier reference still names."""
    return len(state.decisions) * 100000 + state.layers


def _took_part(person: Any, inp: ResumeRunInput) -> list[str]:
    """Who took part in a decision: the decider and every voter of its quorum."""
    return [*([person.id] if person else []), *(v.user for v in inp.votes), *([inp.vote.user] if inp.vote else [])]


def _vote_data(request_id: str, vote: Vote, n: int, required: int) -> dict[str, Any]:
    """The data of a ``human_input_vote`` event: the ``n``-th vote of ``required``."""
    return {"request_id": request_id, "user": vote.user, "action_id": vote.action_id, "values": vote.values,
            "at": vote.at.isoformat(), "votes": n, "required": required}


def _carried(spent: Spent, details: Any) -> Spent:
    """What the run has spent: its state's figures, or what an earlier attempt of this layer
    heartbeated (``details``: that attempt's last heartbeat) when more, so a retry of a layer does
    not start from a fresh budget."""
    if not details or not isinstance(details[0], dict):
        return spent
    try:
        earlier = Spent.model_validate(details[0])
    except ValueError:
        return spent
    return Spent(output_bytes=max(spent.output_bytes, earlier.output_bytes), calls=max(spent.calls, earlier.calls),
                 tokens=max(spent.tokens, earlier.tokens))


class _heartbeating:
    """Heartbeat while a layer builds (when the activity has a heartbeat timeout), so a layer lost
    with its worker is retried elsewhere within seconds, and a stop reaches it. Each heartbeat
    carries what the run has spent of its budgets (``budget``), the last one too as the layer
    ends, so that a retry goes on from it (:func:`_carried`)."""

    def __init__(self, budget: RunBudget | None = None) -> None:
        self._budget = budget

    def _details(self) -> tuple[Any, ...]:
        return (self._budget.spent().model_dump(),) if self._budget is not None else ()

    async def __aenter__(self) -> None:
        self._task = asyncio.create_task(self._beat()) if activity.info().heartbeat_timeout else None

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            activity.heartbeat(*self._details())

    async def _beat(self) -> None:
        while True:
            activity.heartbeat(*self._details())
            await asyncio.sleep(HEARTBEAT_EVERY)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
