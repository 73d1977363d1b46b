"""One AG-UI run of a flow (DESIGN §12, docs/agui.md): a submit, or a decision on the thread's
waiting run, then the run followed from the store (its log by :func:`~signoff.api.sse.follow_job`,
its trace's spans) until it pauses or ends, each told as api/agui/translate.py says."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
)

from signoff.engine.components.human_input import HumanInput
from signoff.engine.decisions import deadline
from signoff.engine.errors import NotResumable, SignoffError
from signoff.engine.models import Event, Job, JobStatus, PendingRequest, SpanRecord, User, utcnow
from signoff.engine.store.base import Store
from signoff.engine.tracing import A_COMPONENT, hex_span, root_span_id
from signoff.service import RunService

from signoff.api.errors import STATUS_BY_CODE, InvalidRequest
from signoff.api.errors import _jsonable as jsonable  # an error detail as JSON, as the HTTP answers carry it
from signoff.api.models import workflow_response
from signoff.api.sse import follow_job
from signoff.api.agui.translate import (
    INTERNAL_ERROR,
    INTERRUPT_EXPIRED,
    RUN_FAILED,
    RUN_TIMED_OUT,
    _UUID,
    Steps,
    _ms,
    _uid,
    announce,
    decision_of,
    iso,
    shows,
    gate_vertex,
    interrupt_of,
    last_user_text,
)

log = logging.getLogger("signoff.api.agui")

POLL_SECONDS = 0.1


class AguiRun:
    """One AG-UI run of a flow (see the module's docstring). :meth:`events` yields the events (the
    keep-alives between them are api/sse.py's, as for every event stream)."""

    def __init__(self, *, store: Store, service: RunService, user: User, flow_id: str, inp: RunAgentInput) -> None:
        self.store = store
        self.service = service
        self.user = user
        self.flow_id = flow_id
        self.inp = inp
        self.job_id: str | None = None
        self.steps = Steps()  # the tool calls told so far, and how a span is told
        self.cancel_reason: dict[str, Any] = {}

    # ---- the run -------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id=self.inp.thread_id, run_id=self.inp.run_id, protocol_version=PROTOCOL_VERSION,
                              timestamp=_ms(), metadata={"flow_id": self.flow_id})
        try:
            if self.inp.resume:
                async for event in self._resume():
                    yield event
            else:
                async for event in self._submit():
                    yield event
        except SignoffError as err:
            yield self._error(err)
        except Exception:  # noqa: BLE001 - the stream has begun: end the AG-UI run, log the cause
            log.exception("AG-UI run %s of flow %s failed", self.inp.run_id, self.flow_id)
            yield RunErrorEvent(message="Internal error; see the server log", code=INTERNAL_ERROR, timestamp=_ms(),
                                metadata=self._meta())

    def _meta(self, **more: Any) -> dict[str, Any]:
        return {"job_id": self.job_id, **more} if self.job_id else dict(more)

    def _error(self, err: SignoffError) -> RunErrorEvent:
        if STATUS_BY_CODE.get(err.code, 500) >= 500 and err.code != "UNAVAILABLE":
            log.error("AG-UI run %s: signoff error %s: %s", self.inp.run_id, err.code, err.message, exc_info=err)
            return RunErrorEvent(message="Internal error; see the server log", code=INTERNAL_ERROR, timestamp=_ms(),
                                 metadata=self._meta())
        # the HTTP API's error details too (``problems`` of INVALID_VALUES, ``job_id``)
        meta = {k: v for k, v in jsonable(err.details).items() if v is not None}
        if self.job_id and "job_id" not in meta:
            meta["job_id"] = self.job_id
        return RunErrorEvent(message=err.message, code=err.code, timestamp=_ms(), metadata=meta or None)

    async def _submit(self) -> AsyncIterator[BaseEvent]:
        flow = await self.service.flows.get(self.user, self.flow_id)
        # a retried POST of the same AG-UI run (same thread, run id and flow) is the same job
        key = "agui:" + _uid(self.flow_id, self.inp.thread_id, self.inp.run_id)
        job, _created = await self.service.submit(
            self.user, flow, input_value=last_user_text(self.inp), session_id=self.inp.thread_id, tweaks=None,
            idempotency_key=key, mode="stream")
        self.job_id = job.job_id
        async for event in self._follow(job, after_seq=0, seen=set(), resumed=None):
            yield event

    async def _resume(self) -> AsyncIterator[BaseEvent]:
        entries = self.inp.resume or []
        if len(entries) != 1:
            raise InvalidRequest(f"resume has {len(entries)} entries: a signoff run waits for one decision at a time, "
                                 "so answer its one interrupt")
        entry = entries[0]
        # a malformed answer is refused first, like a malformed HTTP body
        decision = decision_of(entry.payload) if entry.status == "resolved" else None
        job = await self._job_of(entry.interrupt_id)
        self.job_id = job.job_id
        # what the AG-UI runs before this one already told: the log so far, the spans so far
        after_seq = await _last_seq(self.store, job.job_id)
        seen = {s.span_id for s in await self.store.get_trace(job.run_id)}
        resumed = job.pending if job.status == JobStatus.suspended else None
        if entry.status == "cancelled":
            if job.status == JobStatus.cancelled:  # stopped already: the thread's run is over
                self.cancel_reason = await _cancel_data(self.store, job.job_id)
                yield self._cancelled()
                return
            if resumed is None or resumed.request_id != entry.interrupt_id:
                raise NotResumable(f"Interrupt {entry.interrupt_id!r} is not waiting for an answer (the job is "
                                   f"{job.status.value})", job_id=job.job_id)
            job = await self.service.stop(self.user, job.job_id)
            if job.status == JobStatus.cancelled:
                self.cancel_reason = await _cancel_data(self.store, job.job_id)
                yield self._cancelled()
                return
            # a decision got in before the stop: tell what it did
        else:
            assert decision is not None
            expires = deadline(resumed) if resumed is not None and resumed.request_id == entry.interrupt_id else None
            if expires is not None and utcnow() >= expires:
                # AG-UI's stale resume: the client cancels an expired interrupt, never answers it
                # (a late answer over HTTP is rerouted, DESIGN §5); the job is left as it is
                yield RunErrorEvent(message=f"Interrupt {entry.interrupt_id!r} expired at {iso(expires)} and can "
                                    "no longer be answered; cancel it to continue the thread",
                                    code=INTERRUPT_EXPIRED, timestamp=_ms(), metadata=self._meta())
                return
            done = await self.service.resume(self.user, job.job_id, entry.interrupt_id, decision, via="agui")
            if done.status == "vote_recorded":  # one vote of a quorum: the run still waits
                job = await self.service.get_job(self.user, job.job_id)
                if job.status == JobStatus.suspended and job.pending is not None:
                    yield self._interrupted(job, job.pending, votes=done.votes, required=done.required)
                    return
            if job.user_id != self.user.id:
                # an approver of someone else's run: the decision is theirs, the rest of the run
                # is its owner's (as over HTTP, where the job is no longer theirs to see)
                yield RunFinishedEvent(thread_id=self.inp.thread_id, run_id=self.inp.run_id,
                                       result={"job_id": job.job_id, "status": "resuming"},
                                       outcome=RunFinishedSuccessOutcome(), timestamp=_ms(), metadata=self._meta())
                return
        if resumed is not None and resumed.tool and resumed.tool.get("call_id"):
            self.steps.announced.add(str(resumed.tool["call_id"]))  # the last AG-UI run started that tool call
        async for event in self._follow(job, after_seq=after_seq, seen=seen, resumed=resumed):
            yield event

    async def _job_of(self, interrupt_id: str) -> Job:
        """The job waiting for ``interrupt_id``: the thread's suspended run of this flow asking
        it, else the run its id names (a request id carries the run id). Someone else's run is
        not found (404 rule); a run of another flow or thread, or an id naming no run, is not
        resumable here. Nothing is changed."""
        for job in await self.store.find_suspended(self.flow_id, self.user.id, self.inp.thread_id):
            if job.waits_for(interrupt_id):
                return job
        for candidate in reversed(_UUID.findall(interrupt_id)):
            if await self.store.get_job(candidate) is not None:
                job = await self.service.get_job(self.user, candidate)  # JobNotFound unless visible
                if job.flow_id != self.flow_id or job.effective_session != self.inp.thread_id:
                    raise NotResumable(f"Interrupt {interrupt_id!r} belongs to another flow or thread (resume it "
                                       "where it was asked)", job_id=job.job_id)
                return job
        raise NotResumable(f"No run of this thread waits for interrupt {interrupt_id!r}")

    # ---- following the job ---------------------------------------------------------------

    async def _follow(self, job: Job, *, after_seq: int, seen: set[str],
                      resumed: PendingRequest | None) -> AsyncIterator[BaseEvent]:
        """The job's events and its trace's new spans as AG-UI events until the run pauses or
        ends, then the AG-UI run's end."""
        async for batch in follow_job(self.store, self.service.feed, job.job_id, after_seq=after_seq,
                                      user_id=self.user.id, tick=POLL_SECONDS):
            # what this poll found, in the order it happened (a step at its span's start)
            groups = [(_ms(ev.created_at), self._log_event(job, ev, resumed)) for ev in batch]
            groups += await self._new_spans(job, seen)
            groups.sort(key=lambda g: g[0])
            for _at, events in groups:
                for event in events:
                    yield event
        for _at, events in await self._new_spans(job, seen):  # written before the status moved on
            for event in events:
                yield event
        for event in await self._end(job.job_id):
            yield event

    def _log_event(self, job: Job, ev: Event, resumed: PendingRequest | None) -> list[BaseEvent]:
        if ev.event == "run_cancelled":
            self.cancel_reason = dict(ev.data)
        return self.steps.log_event(job, ev, resumed)

    async def _new_spans(self, job: Job, seen: set[str]) -> list[tuple[int, list[BaseEvent]]]:
        """The steps of the trace's spans not told yet: each top-level component (and each gate
        decided), in the order they started, with its tool calls and its text inside."""
        spans = await self.store.get_trace(job.run_id)
        root = hex_span(root_span_id(job.run_id))
        fresh = [s for s in spans if s.span_id not in seen and s.end_time is not None and s.parent_id == root
                 and s.type in ("component", "gate")]
        if not fresh:
            return []
        children: dict[str, list[SpanRecord]] = {}
        for s in spans:
            if s.type == "tool" and s.parent_id is not None:
                children.setdefault(s.parent_id, []).append(s)
        texts: dict[str, str] | None = None
        out: list[tuple[int, list[BaseEvent]]] = []
        for span in sorted(fresh, key=lambda s: (s.start_time, s.end_time or s.start_time, s.span_id)):
            seen.add(span.span_id)
            component = str(span.attributes.get(A_COMPONENT) or "")
            if shows(component) == "message" and texts is None:
                texts = {m.id: m.text for m in await self.store.list_messages(job.effective_session,
                                                                               flow_id=job.flow_id)
                         if m.job_id == job.job_id}
            tools = sorted(children.get(span.span_id, []), key=lambda s: s.start_time)
            seen.update(t.span_id for t in tools)
            out.append((_ms(span.start_time), self.steps.step(job, span, component, tools, texts or {})))
        return out

    # ---- the end of the AG-UI run ----------------------------------------------------------

    async def _end(self, job_id: str) -> list[BaseEvent]:
        job = await self.store.get_job(job_id)
        if job is None:
            return [RunErrorEvent(message=f"Job {job_id} is gone", code="JOB_NOT_FOUND", timestamp=_ms(),
                                  metadata=self._meta())]
        if job.status == JobStatus.suspended and job.pending is not None:
            out: list[BaseEvent] = []
            pending = job.pending
            if pending.kind == "tool_approval" and pending.tool and pending.tool.get("call_id"):
                call_id = str(pending.tool["call_id"])
                if call_id not in self.steps.announced:
                    self.steps.announced.add(call_id)
                    out += announce(call_id, str(pending.tool.get("name") or "tool"), pending.tool.get("args"),
                                     _ms(pending.paused_at))
            elif pending.kind == "node_input":  # the gate's own step: it asked (its span comes with the answer)
                vertex = gate_vertex(pending.request_id, job.run_id)
                at = _ms(pending.paused_at)
                out += [StepStartedEvent(step_name=vertex, timestamp=at, metadata={"component_type": HumanInput.type_name}),
                        StepFinishedEvent(step_name=vertex, timestamp=at,
                                          metadata={"paused": True, "request_id": pending.request_id})]
            return [*out, self._interrupted(job, pending)]
        if job.status == JobStatus.completed:
            return [RunFinishedEvent(thread_id=self.inp.thread_id, run_id=self.inp.run_id,
                                     result=workflow_response(job).model_dump(mode="json"),
                                     outcome=RunFinishedSuccessOutcome(), timestamp=_ms(), metadata=self._meta())]
        if job.status == JobStatus.cancelled:
            if not self.cancel_reason:
                self.cancel_reason = await _cancel_data(self.store, job.job_id)
            return [self._cancelled()]
        if job.status == JobStatus.failed:
            error = job.error or {}
            return [RunErrorEvent(message=str(error.get("error") or "The run failed"), code=RUN_FAILED, timestamp=_ms(),
                                  metadata=self._meta(type=error.get("type"), vertex_id=error.get("vertex_id")))]
        if job.status == JobStatus.timed_out:
            return [RunErrorEvent(message="The run timed out waiting for a decision", code=RUN_TIMED_OUT,
                                  timestamp=_ms(), metadata=self._meta())]
        # not over and not waiting (cannot happen: the log is followed until it is)
        return [RunErrorEvent(message=f"The run is {job.status.value}", code=INTERNAL_ERROR, timestamp=_ms(),
                              metadata=self._meta())]

    def _interrupted(self, job: Job, pending: PendingRequest, **extra: Any) -> RunFinishedEvent:
        return RunFinishedEvent(thread_id=self.inp.thread_id, run_id=self.inp.run_id,
                                outcome=RunFinishedInterruptOutcome(interrupts=[interrupt_of(job, pending, **extra)]),
                                timestamp=_ms(), metadata=self._meta())

    def _cancelled(self) -> RunFinishedEvent:
        return RunFinishedEvent(thread_id=self.inp.thread_id, run_id=self.inp.run_id,
                                outcome=RunFinishedCancelledOutcome(), timestamp=_ms(),
                                metadata=self._meta(**self.cancel_reason))


async def _last_seq(store: Store, job_id: str) -> int:
    seq = 0
    while events := await store.read_events(job_id, after_seq=seq):
        seq = events[-1].seq
    return seq


async def _cancel_data(store: Store, job_id: str) -> dict[str, Any]:
    """The data of the job's ``run_cancelled`` event (its reason)."""
    data: dict[str, Any] = {}
    seq = 0
    while events := await store.read_events(job_id, after_seq=seq):
        seq = events[-1].seq
        for ev in events:
            if ev.event == "run_cancelled":
                data = dict(ev.data)
    return data


async def encode(events: AsyncIterator[BaseEvent], encoder: Any) -> AsyncIterator[str]:
    """The events as the encoder writes them (SSE)."""
    async for event in events:
        yield encoder.encode(event)
