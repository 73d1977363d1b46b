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

from signoff.activities.failures import to_failure
from signoff.activities.sender import sender
from signoff.activities.state import StateCodec
from signoff.activities.types import (
    Delivery,
    FinishInput,
    FinishOutput,
    GateTimerInput,
    GateTimerOutput,
    PersistPauseInput,
    PersistPauseOutput,
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
from signoff.engine.decisions import apply_decision, check_decider, check_decision, user_ref, with_defaults
from signoff.engine.errors import NotAnApprover
from signoff.engine.models import PendingRequest, Vote
from signoff.engine.context import egress_policy
from signoff.engine.errors import FlowNotFound, NotResumable, SignoffError
from signoff.engine.graph import Graph
from signoff.engine.lifecycle import RunEnd, end_run, run_blob_prefix
from signoff.engine.liveness import is_finished, plan_next
from signoff.engine.models import AppliedDecision, Decision, Job, JobStatus, User, utcnow
from signoff.engine.run import apply_layer, build_vertices, context_for, final_result
from signoff.engine.secrets import Vault
from signoff.engine.settings import Settings
from signoff.engine.spec import apply_tweaks, load_flow
from signoff.engine.state import RunState, new_run_state
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
        return [self.run_layer, self.persist_pause, self.resume_run, self.rollback_resume, self.finish,
                self.record_event, self.record_vote, self.gate_timer, self.deliver_webhook]

    # ---- activities ----------------------------------------------------------------------

    @activity.defn(name="run_layer")
    async def run_layer(self, inp: RunLayerInput) -> RunLayerOutput:
        """Build the next layer. On a pause the checkpoint is saved (the workflow then persists
        the pending request); after the last layer the completion is recorded."""
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
                async with _heartbeating():
                    state = await self._build_layer(graph, state, ids, lambda: inp.now)
                if inp.inline:
                    # stamped now, as resume_run's (the workflow's time when that is later): a gate
                    # built here paused after the layer before it, and its span starts after that
                    # layer's
                    state, step, built = await self._instant_layers(graph, state, step, built,
                                                                    lambda: max(inp.now, utcnow()))
            return await self._layer_output(inp.job_id, graph, state, step, inp.now, built, persist=inp.persist)
        except SignoffError as err:
            raise to_failure(err) from None

    @activity.defn(name="persist_pause")
    async def persist_pause(self, inp: PersistPauseInput) -> PersistPauseOutput | None:
        """After the checkpoint (run_layer) and once the workflow waits: who may decide (the
        request's approvers), the ``human_input_required`` event, then the pending request with
        ``suspended``; returns the webhook deliveries of the event."""
        job = await self.store.get_job(inp.job_id)
        if job is None or job.status.terminal:
            return None
        return PersistPauseOutput(deliveries=await self._persist_pause(job, inp.pending, inp.dedupe_key))

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
        applied; the workflow then rolls the claim back."""
        # who sent it is read from Temporal's history while the store is asked the rest
        sending = None if inp.timed_out else asyncio.ensure_future(sender(inp.job_id, inp))
        try:
            return await self._resume_run(inp, sending)
        finally:
            if sending is not None and not sending.done():
                sending.cancel()

    async def _resume_run(self, inp: ResumeRunInput, sending: asyncio.Future[dict[str, Any]] | None
                          ) -> ResumeRunOutput:
        try:
            job = await self._job(inp.job_id)
            if not inp.timed_out:  # the deadline decides for nobody
                # whoever sends it (the API, the CLI, the Web UI), a decision passes the same
                # checks as that person's HTTP resume: an approver, who may (still) decide it
                await self._decider_may_decide(job, inp.request_id, inp.user or inp.decided_by)
        except SignoffError as err:
            raise to_failure(err) from None
        token = await self.store.claim_suspended_for_resume(inp.job_id, inp.request_id, token=inp.token)
        if token is None:
            # Lost the claim, or an earlier attempt of this very decision won it, applied it and
            # reached the run's next pause (which clears the claim) before its result was lost
            # (its worker died, or its workflow task failed: a local activity runs again).
            try:
                return await self._applied_before(inp) or ResumeRunOutput(claimed=False)
            except SignoffError as err:
                raise to_failure(err) from None
        try:
            job = await self._job(inp.job_id)
            person = None if inp.timed_out else await self.access.person(inp.user or inp.decided_by or job.user_id)
            if job.status.terminal:  # a retry: our first attempt ran to the end (it may have died
                # before it recorded who took part)
                await self.store.add_participants(job.job_id, _took_part(person, inp))
                return ResumeRunOutput(claimed=True, action_id=inp.decision.action_id, out=RunLayerOutput(
                    step=inp.step, state=inp.state or StateRef(), done=True, status=job.status.value))
            sent = None if sending is None else await sending
            state, graph, applied = await self._apply(job, inp.request_id, inp.decision, inp.now,
                                                      person.id if person else None, inp.state, dedupe=inp.token,
                                                      votes=inp.votes, timed_out=inp.timed_out, sent=sent,
                                                      vote=inp.vote)
            paused_at = job.pending.paused_at if job.pending is not None else None
            metrics.decided(seconds_waited=(_aware(applied.decided_at) - _aware(paused_at)).total_seconds()
                            if paused_at else None, rerouted=applied.rerouted, timed_out=applied.timed_out,
                            via=(sent or {}).get("via"))
            # whoever decided (and voted, for a quorum) keeps the run in their history and sight
            await self.store.add_participants(job.job_id, _took_part(person, inp))
            deliveries = await self._decision_deliveries(job, applied, vote=inp.vote is not None)
            step, built = inp.step, []
            # Layers built here happen after the decision, in real time: a pause reached here is
            # stamped now (the workflow's time when that is later, e.g. under time skipping).
            clock = lambda: max(inp.now, utcnow())  # noqa: E731
            if inp.inline:
                state, step, built = await self._instant_layers(graph, state, step, built, clock)
            out = await self._layer_output(inp.job_id, graph, state, step, inp.now, built,
                                           blob_step=len(state.decisions) * 100000 + state.layers,
                                           persist=inp.persist)
        except SignoffError as err:
            raise to_failure(err) from None
        return ResumeRunOutput(claimed=True, action_id=applied.action_id, out=out, deliveries=deliveries)

    async def _applied_before(self, inp: ResumeRunInput) -> ResumeRunOutput | None:
        """Where the run is, when an earlier attempt of this decision (same claim token) applied
        it and took the run on to its next pause; None when no attempt of it was applied. Reports
        what that attempt did, writing nothing: the next pause as it was persisted (same step,
        same state reference), the webhook deliveries of the decision and of the pause (a
        workflow task that failed took the first attempt's with it; a receiver dedupes by the
        delivery id)."""
        decided = await self.store.event_by_key(inp.job_id, f"{inp.token}:decision")
        if decided is None:
            return None
        job = await self._job(inp.job_id)
        action_id = str(decided.data.get("action_id") or inp.decision.action_id)
        if job.status.terminal:
            return ResumeRunOutput(claimed=True, action_id=action_id, out=RunLayerOutput(
                step=inp.step, state=inp.state or StateRef(), done=True, status=job.status.value))
        cp = await self.store.load_latest_checkpoint(job.run_id)
        if job.status != JobStatus.suspended or job.pending is None or cp is None or inp.state is None:
            raise StoreError("The decision was applied and its run is between two states; asked again")
        state, before = await self.codec.internalize(cp.data), await self.codec.load(inp.state)
        step = inp.step + state.layers - before.layers  # one step per layer built after the decision
        ref, _ = await self.codec.dump(state, len(state.decisions) * 100000 + state.layers)
        rerouted = await self.store.event_by_key(inp.job_id, f"{inp.token}:expired") is not None
        events = (("human_input_vote",) if inp.vote else ()) + (("human_input_expired",) if rerouted else ())
        deliveries = []
        for event in (*events, "human_input_decision"):
            deliveries += await self._deliveries(job, event, inp.request_id, before.pending)
        return ResumeRunOutput(claimed=True, action_id=action_id, deliveries=deliveries, out=RunLayerOutput(
            step=step, state=ref, pending=job.pending, persisted=True,
            deliveries=await self._deliveries(job, "human_input_required", job.pending.request_id, job.pending)))

    @activity.defn(name="rollback_resume")
    async def rollback_resume(self, inp: RollbackResumeInput) -> None:
        await self.store.rollback_resume_claim(inp.job_id, inp.claim_token)

    @activity.defn(name="finish")
    async def finish(self, inp: FinishInput) -> FinishOutput:
        """Record the end of a run; returns what the job really is afterwards (a job already
        ended by someone else, e.g. a stop claim, keeps its status and gets no second event)."""
        status = JobStatus(inp.status)
        if status == JobStatus.completed:
            state = await self.codec.load(inp.state) if inp.state else None
            result = final_result(self.graph(state), state) if state else {}
            return FinishOutput(status=await self._complete(inp.job_id, result))
        end = RunEnd(status, error=(inp.error or {"error": "failed", "type": "Error"}) if status == JobStatus.failed
                      else None, max_suspend_seconds=self.settings.max_suspend_seconds, deadline=inp.deadline)
        # a timeout ends only a run that still waits: a decision that got in first goes on
        expect = [JobStatus.suspended] if status == JobStatus.timed_out else None
        ended = await end_run(self.store, inp.job_id, end, expect=expect)
        return FinishOutput(status=ended.job.status.value if ended.job else inp.status)

    @activity.defn(name="record_event")
    async def record_event(self, inp: RecordEventInput) -> None:
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

    async def _decider_may_decide(self, job: Job, request_id: str, who: str | None) -> User:
        """The person a decision is made for (``who``: a user id or name, default the run's
        owner), checked as their HTTP resume is (DESIGN §9, §13)."""
        person = await self.access.person(who or job.user_id)
        if person is None:
            raise NotAnApprover(f"No user {who!r}: a decision through Temporal names the person it is for "
                                '("user": a user name or id)', job_id=job.job_id)
        pending = await self.access.current_request(job, request_id)
        if pending is not None:
            check_decider(pending, await self.access.decider(job, person))
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
        hooks = await self.store.webhooks_for(sorted(people), event)
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
                               decider=await self.access.decider(job, person), votes=votes)
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

    async def _decision_deliveries(self, job: Job, applied: AppliedDecision, *, vote: bool = False) -> list[Delivery]:
        """The webhook deliveries of a decision's events (the vote that completed a quorum,
        expired, then decided)."""
        out: list[Delivery] = []
        events = (("human_input_vote",) if vote else ()) + (("human_input_expired",) if applied.rerouted else ())
        for event in events + ("human_input_decision",):
            out += await self._deliveries(job, event, applied.request_id, job.pending)
        return out

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

    async def _build_layer(self, graph: Graph, state: RunState, ids: list[str], clock: Callable[[], datetime]) -> RunState:
        ctx = context_for(state, history=self.store, flow_loader=self.access.flow_loader(state.user_id),
                          secrets=self.vault.value, clock=clock,
                          settings=self.settings,  # egress, caps, budgets, an Agent's model defaults
                          **tracing.RunTracer(graph, state).hooks())  # a span per built vertex
        layer = await build_vertices(graph, state, ids, ctx)
        return apply_layer(graph, state, layer)

    async def _instant_layers(self, graph: Graph, state: RunState, step: int, built: list[str],
                              clock: Callable[[], datetime]) -> tuple[RunState, int, list[str]]:
        """The layers that follow, built here while they are instant (``Component.instant``: no
        I/O beyond the store, so a retry that builds them again repeats nothing outside), up to
        a pause or the end of the run. A failure leaves the state before that layer: the workflow
        builds it with ``run_layer``, its retry policy and its ``run_failed``."""
        for _ in range(MAX_INLINE_LAYERS):
            if state.pending is not None:
                break
            ids = plan_next(graph, state)
            if not ids or not all(graph.vertices[v].component_class.instant for v in ids):
                break
            try:
                state = await self._build_layer(graph, state, ids, clock)
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
                            built: list[str], blob_step: int | None = None, *, persist: bool = False
                            ) -> RunLayerOutput:
        """Where the run is after a layer: the state handed back (inline or by reference); on a
        pause the request's approvers resolved and the checkpoint saved, and with ``persist`` the
        pause persisted (the job ``suspended``: the workflow then waits without a ``persist_pause``
        activity); at the end the completion recorded."""
        if state.pending is not None and state.pending.approvers and not state.pending.approver_refs:
            refs = await self.access.approver_refs(state.owner_id, state.pending.approvers)
            state.pending = state.pending.model_copy(update={"approver_refs": refs})
        ref, data = await self.codec.dump(state, step if blob_step is None else blob_step)
        if state.pending is not None:
            ttl = self.settings.checkpoint_ttl_seconds
            await self.store.save_checkpoint(
                state.run_id, data, job_id=job_id,
                expires_at=(now + timedelta(seconds=ttl)) if ttl else None,
            )
        done = state.pending is None and is_finished(graph, state)
        if done:
            status = await self._complete(job_id, final_result(graph, state))
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
            # the same dedupe key as the workflow's persist_pause: one event, retries included
            deliveries = await self._persist_pause(job, state.pending, f"pause:{step}:{state.pending.request_id}")
            return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built, persisted=True,
                                  deliveries=deliveries)
        return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built)

    async def _complete(self, job_id: str, result: dict[str, Any]) -> str:
        """in_progress → completed with the result and the ``end`` event; returns the job's real
        status (a run cancelled meanwhile stays cancelled)."""
        ended = await end_run(self.store, job_id, RunEnd(JobStatus.completed, result=result),
                              expect=[JobStatus.in_progress])
        return ended.job.status.value if ended.job else JobStatus.completed.value

    async def _apply(self, job: Job, request_id: str, decision: Decision, now: datetime, decided_by: str | None,
                     fallback: StateRef | None, dedupe: str, *, votes: list[Vote], timed_out: bool,
                     sent: dict[str, Any] | None = None, vote: Vote | None = None
                     ) -> tuple[RunState, Graph, AppliedDecision]:
        """Restore the checkpoint, apply the decision (timeout reroute), record the ``vote`` that
        completes a quorum (``human_input_vote``, with the resolution), ``human_input_expired``
        (when rerouted) then ``human_input_decision``, stamp the card, clear the pending request.
        ``dedupe``: prefix of the events' dedupe keys; ``sent``: how the decision came
        (:mod:`~signoff.activities.sender`), recorded in its event."""
        cp = await self.store.load_latest_checkpoint(job.run_id)
        if cp is not None:
            state = await self.codec.internalize(cp.data)
        elif fallback is not None:
            state = await self.codec.load(fallback)
        else:
            raise NotResumable("the checkpoint is gone")
        graph = self.graph(state)
        votes = [*votes, vote] if vote is not None else votes
        new, applied = apply_decision(state, request_id, decision, now, decided_by, votes=votes, timed_out=timed_out)
        assert state.pending is not None and state.pending_vertex is not None
        tracing.record_gate(run_id=state.run_id, pending=state.pending, applied=applied, vertex_id=state.pending_vertex,
                            job_id=job.job_id, flow_id=state.flow_id,
                            component_type=graph.vertices[state.pending_vertex].type)  # "Human In The Loop — {label}"
        if vote is not None:  # the same dedupe key as record_vote's: one event per person, retries included
            await self.store.append_event(job.job_id, "human_input_vote", {
                **_vote_data(request_id, vote, len(votes), state.pending.required_approvals), **(sent or {})},
                dedupe_key=f"vote:{request_id}:{vote.user}")
        if applied.rerouted:
            await self.store.append_event(job.job_id, "human_input_expired", {
                "request_id": applied.request_id,
                "requested_action": applied.requested_action or None,
                "rerouted_to": applied.action_id,
                "timeout_seconds": applied.timeout_seconds,
            }, dedupe_key=f"{dedupe}:expired")
        data: dict[str, Any] = {
            "request_id": applied.request_id,
            "action_id": applied.action_id,
            "values": applied.values,
            "decided_by": applied.decided_by,
            "decided_at": applied.decided_at.isoformat(),
        }
        if applied.timed_out:
            data["timed_out"] = True
        if applied.votes:
            data["votes"] = [v.model_dump(mode="json") for v in applied.votes]
        data.update(sent or {})
        await self.store.append_event(job.job_id, "human_input_decision", data, dedupe_key=f"{dedupe}:decision")
        await self.store.stamp_card(applied.request_id, applied.action_id)
        await self.store.clear_pending(job.job_id)
        return new, graph, applied


def _took_part(person: Any, inp: ResumeRunInput) -> list[str]:
    """Who took part in a decision: the decider and every voter of its quorum."""
    return [*([person.id] if person else []), *(v.user for v in inp.votes), *([inp.vote.user] if inp.vote else [])]


def _vote_data(request_id: str, vote: Vote, n: int, required: int) -> dict[str, Any]:
    """The data of a ``human_input_vote`` event: the ``n``-th vote of ``required``."""
    return {"request_id": request_id, "user": vote.user, "action_id": vote.action_id, "values": vote.values,
            "at": vote.at.isoformat(), "votes": n, "required": required}


class _heartbeating:
    """Heartbeat while a layer builds (when the activity has a heartbeat timeout), so a layer lost
    with its worker is retried elsewhere within seconds, and a stop reaches it."""

    async def __aenter__(self) -> None:
        self._task = asyncio.create_task(self._beat()) if activity.info().heartbeat_timeout else None

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    @staticmethod
    async def _beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
