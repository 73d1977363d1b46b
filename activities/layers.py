"""A run's layers: ``run_layer`` builds the next layer and the instant ones after it (with a
heartbeat that carries what the run has spent of its budgets), saves the checkpoint and
persists a pause it reaches, or records the completion; ``finish`` records the other ends;
``record_event`` a rejected Signal's event. The decision's activity (activities/decision.py)
builds the layers after a decision through the same helpers.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Callable

from temporalio import activity

from signoff.activities.failures import to_failure
from signoff.activities.types import (
    Delivery,
    FinishInput,
    FinishOutput,
    RecordEventInput,
    RunLayerInput,
    RunLayerOutput,
    StateRef,
)
from signoff.activities.notify import NotifyActivities
from signoff.activities.webhooks import RunOwner
from signoff.engine import tracing
from signoff.engine.tracing.sdk import keep_spans, take_spans
from signoff.engine.context import RunBudget
from signoff.engine.errors import (
    FlowNotFound,
    NotResumable,
    RunBudgetExceeded,
    SignoffError,
    WaitingOnOthersLimit,
)
from signoff.engine.graph import Graph
from signoff.engine.aio import to_the_end
from signoff.engine.lifecycle import RunEnd, end_run, run_blob_prefix
from signoff.engine.liveness import is_finished, plan_next
from signoff.engine.models import FlowRecord, Job, JobStatus, Message, PendingRequest, utcnow
from signoff.engine.run import apply_layer, build_vertices, context_for, final_result
from signoff.engine.spec import apply_tweaks, load_flow
from signoff.engine.standing import StandingLookup
from signoff.engine.store.base import DecisionReads, PauseCheckpoint
from signoff.engine.state import RunState, Spent, new_run_state

HEARTBEAT_EVERY = 1.0  # seconds; the workflow's heartbeat timeout is 5 s
MAX_INLINE_LAYERS = 64


class LayerActivities(NotifyActivities):
    @activity.defn(name="run_layer")
    async def run_layer(self, inp: RunLayerInput) -> RunLayerOutput:
        """Build the next layer (and the instant ones after it, ``inp.inline``). On a pause the
        checkpoint is saved and, with ``inp.persist``, the pause persisted; after the last layer
        the completion is recorded."""
        try:
            if inp.state is None:
                job, flow = await self.store.get_job_with_flow(inp.job_id)  # one read (issue 33)
                if job is None:
                    raise NotResumable(f"job {inp.job_id} not found")
                if job.status.terminal:
                    # the job ended before its first layer (e.g. cancelled), or a retry of a first
                    # layer that already ran the whole run: report what the job really is, and
                    # its trace says so (same ids: a retry rewrites it)
                    await end_run(self.store, inp.job_id, RunEnd(job.status))
                    return RunLayerOutput(step=inp.step, state=StateRef(), cancelled=True, status=job.status.value)
                state = await self._new_state(job, flow if flow is not None and flow.version == job.flow_version
                                              else None)
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
                    # an earlier attempt of this layer may have written its pause after the run's
                    # cleanup and died (its worker killed) before it looked at the job
                    await self._drop_leftovers(job)
                    return RunLayerOutput(step=inp.step, state=inp.state, cancelled=True, status=job.status.value)
            if ids and activity.info().attempt > 1 and (done := await self._paused_by_earlier_attempt(
                    inp.job_id, state, ids)) is not None:
                # an earlier attempt built this layer and wrote its pause, and died (its worker
                # killed) before Temporal heard of it: go on from that pause, building nothing
                # again (resume is not a re-run: the layer's calls were made once)
                paused, done_step, done_built = done
                return await self._layer_output(inp.job_id, graph, paused, inp.step + done_step, inp.now,
                                                done_built, persist=inp.persist)
            # the layers' messages held for the write that ends this activity: a pause's (its card,
            # the User's message before it) or the end's, one commit (issue 33)
            held = HeldMessages(self.store)
            try:
                if ids:
                    # the run's budgets go on from what an earlier attempt of this layer spent
                    budget = RunBudget.of(_carried(state.spent, activity.info().heartbeat_details), self.settings)
                    async with _heartbeating(budget):
                        state = await self._build_layer(graph, state, ids, lambda: inp.now, budget=budget,
                                                        history=held)
                    if inp.inline:
                        # stamped now, as resume_run's (the workflow's time when that is later): a gate
                        # built here paused after the layer before it, and its span starts after that
                        # layer's
                        state, step, built = await self._instant_layers(graph, state, step, built,
                                                                        lambda: max(inp.now, utcnow()),
                                                                        over_budget_fails=True, history=held)
            except BaseException:
                await to_the_end(held.flush())  # what was built is stored as it would have been
                raise
            return await self._layer_output(inp.job_id, graph, state, step, inp.now, built, persist=inp.persist,
                                            charge=True, held=held)
        except SignoffError as err:
            raise to_failure(err) from None

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
        notes = await self._ended_closing(ended.job, inp.request_id) if inp.deadline is None else []
        return FinishOutput(status=ended.job.status.value if ended.job else inp.status, deliveries=notes)

    @activity.defn(name="record_event")
    async def record_event(self, inp: RecordEventInput) -> None:
        """An event of the run's (a rejected Signal's), unless the job has ended: nothing follows
        its terminal event (a stop ends the job before its workflow hears of it)."""
        job = await self.store.get_job(inp.job_id)
        if job is not None and not job.status.terminal:
            await self.store.append_event(inp.job_id, inp.event, inp.data)

    async def _new_state(self, job: Job, flow: FlowRecord | None = None) -> RunState:
        """The run's first state, the job ``in_progress`` with its provisional root span. ``flow``:
        the job's flow when read with it at the job's version (else read here)."""
        # the version the job was created with, not a later edit of the flow
        if flow is None:
            flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        if flow is None:
            raise FlowNotFound(f"flow {job.flow_id} was deleted")
        spec = load_flow(apply_tweaks(flow.spec, job.request.get("tweaks")))
        # the run's provisional root span: the trace lists as running from the first layer. It
        # rides in the start's status write (issue 33: one commit), saved whether or not the row
        # changed (a retry of a first layer that found the job in_progress writes it on its own)
        root = tracing.run_root(run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, name=flow.name,
                                start=job.created_at)
        if job.status == JobStatus.queued:
            await self.store.set_status(job.job_id, JobStatus.in_progress, expect=[JobStatus.queued], spans=[root])
        else:
            await self.store.save_spans([root])
        return new_run_state(spec, run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, user_id=job.user_id,
                             owner_id=flow.owner_id, session_id=job.session_id,
                             input_value=job.request.get("input_value"))

    async def _build_layer(self, graph: Graph, state: RunState, ids: list[str], clock: Callable[[], datetime],
                           budget: RunBudget | None = None, history: Any = None) -> RunState:
        ctx = context_for(state, history=history if history is not None else self.store, flow_loader=self.access.flow_loader(state.user_id),
                          secrets=self.vault.value, clock=clock,
                          settings=self.settings,  # egress, caps, budgets, an Agent's model defaults
                          # an Agent's gated call approved by a standing approval (DESIGN §17)
                          standing=StandingLookup(self.store, self.access, job_id=state.job_id,
                                                  again=_retried(), keys=self.receipt_keys),
                          **({"budget": budget} if budget is not None else {}),
                          **tracing.RunTracer(graph, state).hooks())  # a span per built vertex
        layer = await build_vertices(graph, state, ids, ctx)
        return apply_layer(graph, state, layer)

    async def _paused_by_earlier_attempt(self, job_id: str, state: RunState,
                                         ids: list[str]) -> tuple[RunState, int, list[str]] | None:
        """The pause an earlier attempt of this layer reached and persisted (the job suspended at
        it, its checkpoint past ``state`` with the layer's vertices built, or paused: an Agent
        asking for a tool's approval pauses in the layer that builds it, and a vertex that paused
        is not among the built), with the layers it took and the vertices it built; None when
        there is none (build the layer)."""
        job = await self.store.get_job(job_id)
        if job is None or job.status != JobStatus.suspended or job.pending is None:
            return None
        cp = await self.store.load_latest_checkpoint(job.run_id)
        if cp is None:
            return None
        paused = RunState.model_validate(cp.data)
        if (paused.pending is None or paused.pending.request_id != job.pending.request_id
                or paused.layers <= state.layers
                or not set(ids) <= {*paused.built, *paused.dead, paused.pending_vertex}):
            return None
        built = [v for v in paused.built if v not in state.built]
        if paused.pending_vertex is not None and paused.pending_vertex not in built:
            built.append(paused.pending_vertex)  # the gate that paused, last as it was built
        return paused, paused.layers - state.layers, built

    async def _instant_layers(self, graph: Graph, state: RunState, step: int, built: list[str],
                              clock: Callable[[], datetime], *, over_budget_fails: bool = False,
                              history: Any = None) -> tuple[RunState, int, list[str]]:
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
                state = await self._build_layer(graph, state, ids, clock, history=history)
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
        if pending.approver_refs:  # before the status: an approver's inbox lists it as it shows
            await self.store.set_request_approvers(job.job_id, pending.request_id, pending.approver_refs)
        if not job.waits_for(pending.request_id):
            # the event and the status in one conditional write: a stop that ended the job since
            # it was read (the workflow's finish(cancelled) runs alongside) gets no
            # ``human_input_required`` after its ``run_cancelled``; a retry of an attempt that
            # already persisted this pause writes nothing. The spans of what was built before the
            # pause ride in it (in the trace as it shows; one commit for the pause, issue 33).
            spans = take_spans()
            try:
                await self.store.mark_suspended(job.job_id, pending,
                                                event=("human_input_required", pending.model_dump(mode="json")),
                                                dedupe_key=dedupe_key, spans=spans)
            except BaseException:
                keep_spans(spans)  # not written: the collector writes them as before
                raise
        else:
            await tracing.flush()  # the spans of what was built before the pause: in the trace as it shows
        return await self._deliveries(job, "human_input_required", pending.request_id, pending)

    async def _layer_output(self, job_id: str, graph: Graph, state: RunState, step: int, now: datetime,
                            built: list[str], blob_step: int | None = None, *, persist: bool = False,
                            job: Job | None = None, charge: bool = False,
                            held: HeldMessages | None = None) -> RunLayerOutput:
        """Where the run is after a layer: the state handed back (inline or by reference); on a
        pause the request's approvers resolved and the checkpoint saved, and with ``persist`` the
        pause persisted (the job ``suspended``: the workflow then waits); at the end the completion
        recorded. With ``charge`` (a layer's activity), a state stored as a blob counts against the
        run's output bytes (StateCodec.dump). ``held``: the messages the layers built here left to
        this write (HeldMessages): the end's write stores them, any other outcome before it."""
        try:
            return await self._checked_layer_output(job_id, graph, state, step, now, built, blob_step,
                                                    persist=persist, job=job, charge=charge, held=held)
        finally:
            if held is not None:  # what the end's write did not take (a failure): stored on their own
                await to_the_end(held.flush())

    async def _checked_layer_output(self, job_id: str, graph: Graph, state: RunState, step: int, now: datetime,
                                    built: list[str], blob_step: int | None, *, persist: bool, job: Job | None,
                                    charge: bool, held: HeldMessages | None) -> RunLayerOutput:
        if state.pending is not None and state.pending.approvers and not state.pending.approver_refs:
            refs = await self.access.approver_refs(state.owner_id, state.pending.approvers)
            state.pending = state.pending.model_copy(update={"approver_refs": refs})
        if state.pending is not None and state.pending.approver_refs:
            await self._may_wait_on_others(job_id, state.user_id, state.pending.approver_refs)
        # The writes below run to their end, a cancel (a stop's, of the activity) honoured after
        # them: cancelled between the checkpoint and the look at the job, the layer of a run that
        # ended meanwhile left its checkpoint for good (the run's cleanup was over by then).
        return await to_the_end(self._write_layer_output(job_id, graph, state, step, now, built, blob_step,
                                                         persist=persist, job=job, charge=charge, held=held))

    async def _write_layer_output(self, job_id: str, graph: Graph, state: RunState, step: int, now: datetime,
                                  built: list[str], blob_step: int | None, *, persist: bool, job: Job | None,
                                  charge: bool, held: HeldMessages | None = None) -> RunLayerOutput:
        ref, data = await self.codec.dump(state, step if blob_step is None else blob_step,
                                          budget=RunBudget.of(state.spent, self.settings) if charge else None)
        checkpoint = None
        if state.pending is not None:
            ttl = self.settings.checkpoint_ttl_seconds
            checkpoint = PauseCheckpoint(state.run_id, data, expires_at=(now + timedelta(seconds=ttl)) if ttl else None)
        done = state.pending is None and is_finished(graph, state)
        if done:  # the messages held for it ride in the end's one write (issue 33)
            status = await self._complete(job_id, final_result(graph, state), state, job,
                                          messages=held.take() if held is not None else ())
            return RunLayerOutput(step=step, state=ref, done=True, built=built, status=status)
        if persist and state.pending is not None and checkpoint is not None:
            # The pause in one write (issue 33): its checkpoint, the messages held (its card, and
            # what came before it), who may decide, its event, ``suspended`` and the spans, in the
            # transaction of the conditional status change. When it changes nothing (the job ended
            # meanwhile, or an earlier attempt of this layer persisted the pause), the job is read
            # and the pause is written as before, a write at a time.
            deliveries = await self._pause_in_one_write(job_id, state, state.pending, checkpoint,
                                                        f"pause:{step}:{state.pending.request_id}", held)
            if deliveries is not None:
                return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built, persisted=True,
                                      deliveries=deliveries)
        if checkpoint is not None:
            await self.store.save_checkpoint(state.run_id, checkpoint.data, job_id=job_id,
                                             expires_at=checkpoint.expires_at)
        if held is not None:  # a pause's card (and what came before it), before its event
            await held.flush()
        # A layer that outlived its run (stopped, superseded, timed out meanwhile: a layer's
        # activity may go on after its workflow was cancelled and closed) must not leave the
        # checkpoint and blobs it just wrote: the run's cleanup may already be over. If the job
        # ends after this read, that cleanup runs after these writes and deletes them. The
        # workflow (if it still runs) then ends with the job's real status.
        job = await self.store.get_job(job_id)
        if job is not None and job.status.terminal:
            await self._drop_leftovers(job)
            return RunLayerOutput(step=step, state=ref, built=built, cancelled=True, status=job.status.value)
        if persist and job is not None and state.pending is not None:
            # one event, retries included (its dedupe key)
            deliveries = await self._persist_pause(job, state.pending, f"pause:{step}:{state.pending.request_id}")
            return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built, persisted=True,
                                  deliveries=deliveries)
        return RunLayerOutput(step=step, state=ref, pending=state.pending, built=built)

    async def _pause_in_one_write(self, job_id: str, state: RunState, pending: PendingRequest,
                                  checkpoint: PauseCheckpoint, dedupe_key: str,
                                  held: HeldMessages | None) -> list[Delivery] | None:
        """The pause persisted in one store call and one commit (Store.mark_suspended with the
        checkpoint, the held messages and the approvers; issue 33), and its event's webhook
        deliveries; None when the write changed nothing (the job is not running: ended, or
        already waiting), with the messages left to the caller, held."""
        owner = RunOwner(job_id=job_id, user_id=state.user_id, pending=pending)
        # who gets the event's webhooks (the owner and the people the request names, but those
        # muting the owner): their webhooks are read in the write (no round trip of their own)
        reads = DecisionReads(owners=await self._webhook_owners(owner, pending))
        messages = held.take() if held is not None else []
        spans = take_spans()
        try:
            changed = await self.store.mark_suspended(
                job_id, pending, event=("human_input_required", pending.model_dump(mode="json")),
                dedupe_key=dedupe_key, spans=spans, checkpoint=checkpoint, messages=messages,
                approvers=pending.approver_refs or None, reads=reads)
        except BaseException:
            keep_spans(spans)  # not written: the collector writes them as before
            if held is not None:
                held.messages = messages + held.messages  # stored on their own (_layer_output)
            raise
        if not changed:  # the spans were saved all the same; the messages were not
            if held is not None:
                held.messages = messages + held.messages
            return None
        # the approvers are those just written (an escalation adds to them only once the run waits)
        return await self._deliveries(owner, "human_input_required", pending.request_id, pending, reads=reads)

    async def _drop_leftovers(self, job: Job) -> None:
        """What a layer of the ended run ``job`` wrote after its cleanup: its checkpoint, its blobs."""
        await self.store.delete_checkpoints(job.run_id)
        await self.store.delete_blobs(run_blob_prefix(job.job_id))

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
                        job: Job | None = None, messages: Sequence[Message] = ()) -> str:
        """in_progress → completed with the result and the ``end`` event; returns the job's real
        status (a run cancelled meanwhile stays cancelled). The trace's root span is named after
        the flow, whose name is in the run's spec (the flow record's, as saved)."""
        name = state.flow.get("name") if state is not None else None
        ended = await end_run(self.store, job_id, RunEnd(JobStatus.completed, result=result),
                              expect=[JobStatus.in_progress], name=name if isinstance(name, str) and name else None,
                              job=job, reread=False, messages=messages)  # only its status is answered
        return ended.job.status.value if ended.job else JobStatus.completed.value


class HeldMessages:
    """The store as the history of layers built in one activity, its ``add_message`` held back
    (issue 33): a run that ends in that activity stores them in its end's write
    (Store.set_status with ``messages``: one commit, not one per message). Every other call goes
    to the store, what is held stored first (a component that reads the history reads it as it
    would have been); ``flush`` stores what is still held, in order."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.messages: list[Message] = []

    async def add_message(self, message: Message) -> Message:
        self.messages = [m for m in self.messages if m.id != message.id] + [message]  # idempotent by id
        return message

    def take(self) -> list[Message]:
        taken, self.messages = self.messages, []
        return taken

    async def flush(self) -> None:
        while self.messages:
            await self._store.add_message(self.messages[0])
            self.messages.pop(0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def after_flush(*args: Any, **kw: Any) -> Any:
            await self.flush()
            return await attr(*args, **kw)
        return after_flush


def _blob_step(state: RunState) -> int:
    """The step in the blob key of a state stored after a decision (StateCodec.dump): one key per
    (decisions taken, layers built), so a state stored after a later decision never overwrites
    the blob an earlier reference still names."""
    return len(state.decisions) * 100000 + state.layers


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


def _retried() -> bool:
    """Whether this is a retry of the activity (False outside one)."""
    try:
        return activity.info().attempt > 1
    except RuntimeError:  # not in an activity
        return False
