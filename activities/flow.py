"""The FlowRun activities: all I/O of a run lives here (component builds, the job table, events,
checkpoints, chat cards, blobs).

Errors become ApplicationErrors whose ``type`` drives the workflow's retry policy
(docs/temporal.md): signoff errors that retrying cannot fix are non-retryable; a
``ComponentError(retryable=True)`` and infrastructure errors (database, network) are retried
with backoff, a bounded number of times.
"""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from signoff.engine.errors import SignoffError
from signoff.engine.graph import Graph
from signoff.engine.models import JobStatus, utcnow
from signoff.engine.decisions import apply_decision
from signoff.engine.liveness import is_finished, plan_next
from signoff.engine.run import apply_layer, build_vertices, context_for, final_result
from signoff.engine.state import RunState, new_run_state
from signoff.engine.settings import Settings
from signoff.engine.spec import load_flow
from signoff.engine.store.base import Store
from signoff.engine import tracing
from signoff.activities.state import StateCodec, blob_prefix
from signoff.workflows.types import (
    FinishInput,
    FinishOutput,
    PersistPauseInput,
    RecordEventInput,
    ResumeRunInput,
    ResumeRunOutput,
    RollbackResumeInput,
    RunLayerInput,
    RunLayerOutput,
)

_GRAPH_CACHE_SIZE = 256
HEARTBEAT_EVERY = 1.0  # seconds; the workflow's heartbeat timeout is 5 s
MAX_INLINE_LAYERS = 64


def to_application_error(err: SignoffError) -> ApplicationError:
    vertex_id = getattr(err, "vertex_id", None) or err.details.get("vertex_id")
    retryable = err.retryable  # ComponentError(retryable=True), StoreError (the database)
    details = {"error": err.message, "type": err.__class__.__name__, "vertex_id": vertex_id}
    return ApplicationError(
        err.message,
        details,
        type=err.code if not retryable else f"{err.code}_RETRYABLE",
        non_retryable=not retryable,
    )


def apply_tweaks(spec: dict[str, Any], tweaks: dict[str, Any] | None) -> dict[str, Any]:
    """``{node_id: {param: value}}`` merged into the nodes' params (unknown nodes are an error)."""
    if not tweaks:
        return spec
    spec = copy.deepcopy(spec)
    nodes = {n.get("id"): n for n in spec.get("nodes", [])}
    for node_id, params in tweaks.items():
        if node_id not in nodes or not isinstance(params, dict):
            raise ApplicationError(
                f"tweaks: no node '{node_id}' in the flow (or its value is not an object)",
                {"error": "bad tweak", "type": "FlowInvalid", "vertex_id": node_id},
                type="FLOW_INVALID",
                non_retryable=True,
            )
        nodes[node_id].setdefault("params", {}).update(params)
    return spec


class FlowActivities:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.codec = StateCodec(store, settings.inline_output_bytes)
        self._graphs: OrderedDict[str, Graph] = OrderedDict()

    def all(self) -> list[Any]:
        return [self.run_layer, self.persist_pause, self.resume_run, self.rollback_resume, self.finish,
                self.record_event]

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

    async def _flow_loader(self, flow_id: str) -> dict[str, Any] | None:
        flow = await self.store.get_flow(flow_id)
        return flow.spec if flow else None

    async def _new_state(self, job_id: str) -> RunState | None:
        job = await self.store.get_job(job_id)
        if job is None:
            raise ApplicationError(f"job {job_id} not found", type="NON_RETRYABLE", non_retryable=True)
        if job.status.terminal:
            return None
        # the version the job was created with, not a later edit of the flow
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        if flow is None:
            raise ApplicationError(
                f"flow {job.flow_id} was deleted", {"error": "flow deleted", "type": "FlowNotFound"},
                type="FLOW_NOT_FOUND", non_retryable=True,
            )
        try:
            spec = load_flow(apply_tweaks(flow.spec, job.request.get("tweaks")))
        except SignoffError as err:
            raise to_application_error(err) from None
        except ValueError as err:
            raise ApplicationError(str(err), {"error": str(err), "type": "FlowInvalid"}, type="FLOW_INVALID",
                                   non_retryable=True) from None
        if job.status == JobStatus.queued:
            await self.store.set_status(job_id, JobStatus.in_progress, expect=[JobStatus.queued])
        return new_run_state(
            spec, run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, user_id=job.user_id,
            session_id=job.session_id, input_value=job.request.get("input_value"),
        )

    # ---- activities ----------------------------------------------------------------------

    @activity.defn(name="run_layer")
    async def run_layer(self, inp: RunLayerInput) -> RunLayerOutput:
        """Build the next layer. On a pause, persist (in this order) the checkpoint, the
        ``human_input_required`` event, then the pending request with ``suspended``."""
        if inp.state is None:
            state = await self._new_state(inp.job_id)
            if state is None:
                # the job ended before its first layer (e.g. cancelled): its trace is still the
                # root span, with the status it ended with (same ids: a retry rewrites it)
                # (or a retry of a first layer that already ran the whole run: report what the
                # job really is, never 'cancelled' for a completed job)
                ended = await self.store.get_job(inp.job_id)
                if ended is not None:
                    await self._close_trace(ended)
                return RunLayerOutput(step=inp.step, state=inp.state or _empty(), cancelled=True,
                                      status=ended.status.value if ended is not None else None)
            await self._open_trace(inp.job_id, state, inp.now)
        else:
            state = await self.codec.load(inp.state)
        graph = self.graph(state)
        ids = plan_next(graph, state)
        if ids:
            beat = asyncio.create_task(_heartbeat()) if activity.info().heartbeat_timeout else None
            try:
                state = await self._build_layer(graph, state, ids, lambda: inp.now)
            except SignoffError as err:
                raise to_application_error(err) from None
            finally:
                if beat is not None:
                    beat.cancel()
        return await self._layer_output(inp.job_id, graph, state, inp.step + 1, inp.now, list(ids))

    async def _build_layer(self, graph: Graph, state: RunState, ids: list[str], clock: Any) -> RunState:
        ctx = context_for(state, history=self.store, flow_loader=self._flow_loader, clock=clock,
                          settings=self.settings,  # an Agent's model defaults (openai_*)
                          **tracing.RunTracer(graph, state).hooks())  # a span per built vertex
        layer = await build_vertices(graph, state, ids, ctx)
        return apply_layer(graph, state, layer)

    async def _layer_output(self, job_id: str, graph: Graph, state: RunState, step: int, now: Any,
                            built: list[str], blob_step: int | None = None) -> RunLayerOutput:
        """Where the run is after a layer: the state handed back (inline or by reference); on a
        pause the checkpoint saved; at the end the completion recorded."""
        try:
            ref, data = await self.codec.dump(state, step if blob_step is None else blob_step)
        except SignoffError as err:
            raise to_application_error(err) from None
        if state.pending is not None:
            ttl = self.settings.checkpoint_ttl_seconds
            await self.store.save_checkpoint(
                state.run_id, data, job_id=job_id,
                expires_at=(now + timedelta(seconds=ttl)) if ttl else None,
            )
        done = state.pending is None and is_finished(graph, state)
        status = None
        if done:
            status = await self._complete(job_id, final_result(graph, state))
        else:
            # A layer that outlived its run (stopped, superseded, timed out meanwhile: a layer's
            # activity may go on after its workflow was cancelled and closed) must not leave the
            # checkpoint and blobs it just wrote: the run's cleanup may already be over. If the
            # job ends after this read, that cleanup runs after these writes and deletes them.
            # The workflow (if it still runs) then ends with the job's real status.
            job = await self.store.get_job(job_id)
            if job is not None and job.status.terminal:
                await self.store.delete_checkpoints(job.run_id)
                await self.store.delete_blobs(blob_prefix(job_id))
                return RunLayerOutput(step=step, state=ref, built=built, cancelled=True, status=job.status.value)
        return RunLayerOutput(step=step, state=ref, done=done, pending=state.pending, built=built, status=status)

    @activity.defn(name="persist_pause")
    async def persist_pause(self, inp: PersistPauseInput) -> None:
        """After the checkpoint (run_layer) and once the workflow waits: the
        ``human_input_required`` event, then the pending request with ``suspended``."""
        job = await self.store.get_job(inp.job_id)
        if job is None or job.status.terminal:
            return
        if job.status == JobStatus.suspended and job.pending and job.pending.request_id == inp.pending.request_id:
            return  # a retry of an attempt that already persisted this pause
        # the event and the status in one conditional write: a stop that ended the job since the
        # read above (the workflow's finish(cancelled) runs alongside this activity) gets no
        # ``human_input_required`` after its ``run_cancelled``
        await self.store.mark_suspended(inp.job_id, inp.pending,
                                        event=("human_input_required", inp.pending.model_dump(mode="json")),
                                        dedupe_key=inp.dedupe_key)

    @activity.defn(name="resume_run")
    async def resume_run(self, inp: ResumeRunInput) -> ResumeRunOutput:
        """A decision in one activity: the single-flight claim under the workflow's token, the
        decision applied (as ``apply_decision``), then the following layers built inline while
        they are instant (``Component.instant``), up to the next pause or the end of the run.

        Safe to retry: the claim is idempotent for its token, the decision events carry dedupe
        keys derived from it, and a retry that finds the run already ended reports that. A
        failure while building the inline layers is not a failure of the decision: the state
        after the decision is returned and the workflow builds that layer with ``run_layer``
        (its retry policy, its ``run_failed``). Raises only when the decision itself cannot be
        applied; the workflow then rolls the claim back."""
        token = await self.store.claim_suspended_for_resume(inp.job_id, inp.request_id, token=inp.token)
        if token is None:
            return ResumeRunOutput(claimed=False)
        job = await self.store.get_job(inp.job_id)
        if job is not None and job.status.terminal:  # a retry: our first attempt ran to the end
            return ResumeRunOutput(claimed=True, action_id=inp.decision.action_id, out=RunLayerOutput(
                step=inp.step, state=inp.state or _empty(), done=True, status=job.status.value))
        state, graph, applied = await self._apply(job, inp.job_id, inp.request_id, inp.decision, inp.now,
                                                  inp.decided_by, inp.state, dedupe=inp.token)
        step, built = inp.step, []
        # Layers built here happen after the decision, in real time: a pause reached inline is
        # stamped now (the workflow's time when that is later, e.g. under time skipping).
        clock = lambda: max(inp.now, utcnow())  # noqa: E731
        if inp.inline:
            for _ in range(MAX_INLINE_LAYERS):
                ids = plan_next(graph, state)
                if not ids or not all(graph.vertices[v].component_class.instant for v in ids):
                    break
                try:
                    state = await self._build_layer(graph, state, ids, clock)
                except Exception:  # noqa: BLE001 - run_layer builds it again, with its retry policy
                    break
                step += 1
                built += ids
                if state.pending is not None:
                    break
        out = await self._layer_output(inp.job_id, graph, state, step, inp.now, built,
                                       blob_step=len(state.decisions) * 100000 + state.layers)
        return ResumeRunOutput(claimed=True, action_id=applied.action_id, out=out)

    async def _apply(self, job: Any, job_id: str, request_id: str, decision: Any, now: Any, decided_by: str | None,
                     fallback: Any, dedupe: str | None = None) -> tuple[RunState, Graph, Any]:
        """Restore the checkpoint, apply the decision (timeout reroute), record
        ``human_input_expired`` (when rerouted) then ``human_input_decision``, stamp the card,
        clear the pending request. ``dedupe``: prefix of the events' dedupe keys."""
        run_id = job.run_id if job else job_id
        cp = await self.store.load_latest_checkpoint(run_id)
        if cp is not None:
            state = await self.codec.internalize(cp.data)
        elif fallback is not None:
            state = await self.codec.load(fallback)
        else:
            raise ApplicationError("the checkpoint is gone", type="NOT_RESUMABLE", non_retryable=True)
        graph = self.graph(state)
        try:
            new, applied = apply_decision(state, request_id, decision, now, decided_by)
        except SignoffError as err:
            raise ApplicationError(err.message, type=err.code, non_retryable=True) from None
        tracing.record_gate(run_id=state.run_id, pending=state.pending, applied=applied, vertex_id=state.pending_vertex,
                            job_id=job_id, flow_id=state.flow_id)  # "Human In The Loop — {label}"
        if applied.rerouted:
            await self.store.append_event(job_id, "human_input_expired", {
                "request_id": applied.request_id,
                "requested_action": applied.requested_action,
                "rerouted_to": applied.action_id,
                "timeout_seconds": applied.timeout_seconds,
            }, dedupe_key=f"{dedupe}:expired" if dedupe else None)
        await self.store.append_event(job_id, "human_input_decision", {
            "request_id": applied.request_id,
            "action_id": applied.action_id,
            "values": applied.values,
            "decided_by": applied.decided_by,
            "decided_at": applied.decided_at.isoformat(),
        }, dedupe_key=f"{dedupe}:decision" if dedupe else None)
        await self.store.stamp_card(applied.request_id, applied.action_id)
        await self.store.clear_pending(job_id)
        return new, graph, applied

    @activity.defn(name="rollback_resume")
    async def rollback_resume(self, inp: RollbackResumeInput) -> None:
        await self.store.rollback_resume_claim(inp.job_id, inp.claim_token)

    @activity.defn(name="finish")
    async def finish(self, inp: FinishInput) -> FinishOutput:
        """Record the end of a run; returns what the job really is afterwards (a job already
        ended by someone else, e.g. a stop claim, keeps its status and gets no second event)."""
        job_id = inp.job_id
        status = JobStatus(inp.status)
        if status == JobStatus.completed:
            state = await self.codec.load(inp.state) if inp.state else None
            return FinishOutput(status=await self._complete(job_id, final_result(self.graph(state), state) if state else {}))
        # the trace is whole before the status says the run ended (docs/tracing.md)
        emitted = await self._end_trace(job_id, status.value, inp.error)
        if status == JobStatus.failed:
            error = inp.error or {"error": "failed", "type": "Error"}
            # the status and its event in one transaction: a retry (or a crash in between) can
            # neither write the event twice nor lose it
            await self.store.set_status(job_id, status, error=error, event=("run_failed", {
                "error": error.get("error"), "type": error.get("type"), "vertex_id": error.get("vertex_id")}))
        elif status == JobStatus.cancelled:
            if await self.store.set_status(job_id, status, event=("run_cancelled", {"reason": "stopped"})):
                await self.store.supersede_cards(job_id)
        elif status == JobStatus.timed_out:
            if await self.store.set_status(job_id, status, expect=[JobStatus.suspended], event=(
                    "run_timed_out", {"max_suspend_seconds": self.settings.max_suspend_seconds})):
                await self.store.supersede_cards(job_id)
        return FinishOutput(status=await self._cleanup_if_ended(job_id, inp.status, emitted))

    async def _complete(self, job_id: str, result: dict[str, Any]) -> str:
        """in_progress → completed with the result, then the ``end`` event; cleanup. Returns the
        job's real status (a run cancelled meanwhile stays cancelled)."""
        emitted = await self._end_trace(job_id, JobStatus.completed.value)
        await self.store.set_status(job_id, JobStatus.completed, expect=[JobStatus.in_progress], result=result,
                                    event=("end", {"status": "completed"}))  # one write: no double, no lost `end`
        return await self._cleanup_if_ended(job_id, JobStatus.completed.value, emitted)

    async def _cleanup_if_ended(self, job_id: str, default: str, traced: str | None = None) -> str:
        job = await self.store.get_job(job_id)
        if job is None:
            return default
        if job.status.terminal:
            if job.pending is not None:
                await self.store.clear_pending(job_id)
            await self.store.delete_checkpoints(job.run_id)
            await self.store.delete_blobs(blob_prefix(job_id))
            if job.status.value != traced:  # the run ended otherwise than the root span said
                await self._close_trace(job)
        return job.status.value

    async def _trace_name(self, job: Any) -> str:
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        return flow.name if flow else job.flow_id

    async def _open_trace(self, job_id: str, state: RunState, now: Any) -> None:
        """The run's provisional root span (the trace lists as running from the first layer)."""
        job = await self.store.get_job(job_id)
        if job is not None:
            await tracing.open_run(self.store, run_id=job.run_id, job_id=job_id, flow_id=job.flow_id,
                                   name=await self._trace_name(job), start=job.created_at)

    async def _end_trace(self, job_id: str, status: str, error: dict[str, Any] | None = None) -> str | None:
        """Emit the run's root span with the status about to be written, and flush every span of
        the run to the store, so a reader who sees the run ended sees its whole trace."""
        job = await self.store.get_job(job_id)
        if job is None or job.status.terminal:
            return None
        tracing.close_run(run_id=job.run_id, job_id=job_id, flow_id=job.flow_id, name=await self._trace_name(job),
                          start=job.created_at, end=utcnow(), status=status, error=error)
        await tracing.flush()
        return status

    async def _close_trace(self, job: Any) -> None:
        """The run's root span with the status the run really ended with (same ids: it replaces
        the one emitted before)."""
        tracing.close_run(run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id,
                          name=await self._trace_name(job), start=job.created_at,
                          end=job.finished_at or job.updated_at, status=job.status.value, error=job.error)

    @activity.defn(name="record_event")
    async def record_event(self, inp: RecordEventInput) -> None:
        await self.store.append_event(inp.job_id, inp.event, inp.data)


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY)


def _empty():
    from signoff.workflows.types import StateRef

    return StateRef()
