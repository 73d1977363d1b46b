"""How a run ends: one :func:`end_run` for every way (completed, failed, cancelled, timed out),
used by the activities (a workflow's end), the service (stop, supersede) and inline runs.

Ending a run is three things, always in this order and each written once (DESIGN §1, §5):

1. **The trace**: the run's root span with the status about to be written, flushed to the store,
   so a reader who sees the run ended sees its whole trace (docs/tracing.md). A caller that
   already emitted it (the in-process runner) says so with ``traced``.
2. **The status and its event**, in one conditional write: ``end``, ``run_failed``,
   ``run_cancelled`` or ``run_timed_out`` is appended only by the writer that changed the
   status, so a race between two ends (a stop and a completion) writes one of them, never both,
   and no event ever follows a terminal one. A stop or supersede of a *suspended* run takes the
   cancel claim instead (``from_suspended``), whose loser writes nothing at all, not even a span.
3. **What an ended run leaves behind**, once the job is terminal (whoever ended it): the pending
   request, the checkpoints, the run's blobs, the open gate cards; and the root span again if
   the run ended otherwise than step 1 said. Every step is idempotent: a retried activity or a
   second caller redoes nothing harmful.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.engine.models import Job, JobStatus, Message, utcnow
from signoff.engine.store.base import Store
from signoff.engine.tracing import close_run, flush, flusher
from signoff.engine.tracing.sdk import collect_spans, keep_spans, take_spans


def run_blob_prefix(job_id: str) -> str:
    """Where a run's blobs live in the store (large vertex outputs, states by reference)."""
    return f"runs/{job_id}/"


@dataclass(frozen=True)
class RunEnd:
    """How a run ends, and the data of the event that says so."""

    status: JobStatus
    result: dict[str, Any] | None = None  # completed: the API's response body
    error: dict[str, Any] | None = None  # failed: {error, type, vertex_id}
    reason: str = "stopped"  # cancelled: stopped | superseded
    superseded_by: str | None = None
    max_suspend_seconds: int | None = None  # timed_out
    deadline: dict[str, Any] | None = None  # timed_out by a gate's on_timeout: fail ({request_id, timeout_seconds})

    def event(self) -> tuple[str, dict[str, Any]]:
        if self.status == JobStatus.completed:
            return "end", {"status": "completed"}
        if self.status == JobStatus.failed:
            error = self.error or {}
            return "run_failed", {"error": error.get("error"), "type": error.get("type"),
                                  **({"code": error["code"]} if error.get("code") else {}),
                                  "vertex_id": error.get("vertex_id")}
        if self.status == JobStatus.cancelled:
            data: dict[str, Any] = {"reason": self.reason}
            if self.superseded_by is not None:
                data["superseded_by"] = self.superseded_by
            return "run_cancelled", data
        if self.status == JobStatus.timed_out:
            if self.deadline is not None:
                return "run_timed_out", {"reason": "on_timeout", **self.deadline}
            return "run_timed_out", {"max_suspend_seconds": self.max_suspend_seconds}
        raise ValueError(f"{self.status} is not how a run ends")


def _as_ended(job: Job, end: RunEnd) -> Job:
    """``job`` as a won write of ``end`` leaves it (its stamps are the store's, not these)."""
    now = utcnow()
    return job.model_copy(update={"status": end.status, "pending": None,
                                  "result": end.result if end.result is not None else job.result,
                                  "error": end.error if end.error is not None else job.error,
                                  "finished_at": now, "updated_at": now})


@dataclass(frozen=True)
class Ended:
    """What :func:`end_run` found: the job as it really is afterwards (None when there is no such
    job), and whether this call was the one that ended it."""

    job: Job | None
    won: bool


async def end_run(
    store: Store,
    job_id: str,
    end: RunEnd,
    *,
    expect: Iterable[JobStatus] | None = None,
    from_suspended: bool = False,
    traced: bool = False,
    name: str | None = None,
    job: Job | None = None,
    reread: bool = True,
    messages: Sequence[Message] = (),
) -> Ended:
    """End the run of ``job_id`` as ``end`` says when its status is one of ``expect`` (any
    non-terminal one when None), or, with ``from_suspended``, by the cancel claim of a suspended
    run. ``traced``: the root span with ``end.status`` was emitted and flushed already. ``name``:
    the root span's name (default: the flow's name). ``job``: the job as the caller read it a
    moment ago (one read less; the conditional write decides, and the root span is written
    again with what the job really is when the write lost). ``reread=False``: a caller that needs only
    the status gets, when its write won, the job as that write left it (``job`` with the end's
    status, result and error: no read of it back). ``messages``: the run's last messages, stored
    in the end's write when it wins (Store.set_status), not at all when it loses."""
    async with _collecting(store):
        job = job if job is not None and job.job_id == job_id else await store.get_job(job_id)
        if job is None:
            return Ended(None, False)
        name = name or await _trace_name(store, job)
        event = end.event()
        if from_suspended:
            won = await store.claim_suspended_for_cancel(job_id, event=event)
            if not won:  # a resume won, or another end: when that end's process died before its
                # cleanup (an API SIGKILLed mid-stop, then the stop sent again), this one does it
                job = await store.get_job(job_id)
                if job is not None and job.status.terminal:
                    await _leave_nothing_behind(store, job, None, name)
                return Ended(job, False)
            traced_status = None
        else:
            traced_status = end.status.value if traced else None
            if not traced and not job.status.terminal:
                close_run(run_id=job.run_id, job_id=job_id, flow_id=job.flow_id, name=name, start=job.created_at,
                          end=utcnow(), status=end.status.value, error=end.error)
                traced_status = end.status.value
            # the spans so far (the root's too), the status with its event, and what the run
            # leaves behind (its checkpoints and blobs) in ONE write: a reader who sees the run
            # ended sees its whole trace, and one commit ends it (issue 33)
            spans = take_spans()
            try:
                won = await store.set_status(job_id, end.status, expect=expect, result=end.result, error=end.error,
                                             event=event, spans=spans, messages=messages,
                                             leftovers=(job.run_id, run_blob_prefix(job_id)))
            except BaseException:
                keep_spans(spans)  # not written: the collector writes them as before
                raise
            if won and end.status.terminal and not reread:  # the status is what this write made it
                ended = _as_ended(job, end)
                await _leave_nothing_behind(store, ended, traced_status, name, cleaned=True)
                return Ended(ended, won)
            if won and end.status.terminal:  # the write left nothing behind to clean
                job = await store.get_job(job_id)
                if job is not None:
                    await _leave_nothing_behind(store, job, traced_status, name, cleaned=True)
                return Ended(job, won)
        job = await store.get_job(job_id)
        if job is not None and job.status.terminal:
            await _leave_nothing_behind(store, job, traced_status, name)
        return Ended(job, won)



async def settle_ended(store: Store, job: Job, *, name: str | None = None) -> None:
    """Step 3 of :func:`end_run` for a job that something else ended (the sweep's batch claim
    of expired leases): what it left behind goes, its trace says how it ended."""
    async with _collecting(store):
        await _leave_nothing_behind(store, job, None, name or await _trace_name(store, job))


async def _leave_nothing_behind(store: Store, job: Job, traced: str | None, name: str, *,
                                cleaned: bool = False) -> None:
    """``cleaned``: the status' own write cleared the request and deleted the checkpoints and
    the blobs (Store.set_status with ``leftovers``)."""
    if not cleaned:
        if job.pending is not None:
            await store.clear_pending(job.job_id)
        await store.delete_checkpoints(job.run_id)
        await store.delete_blobs(run_blob_prefix(job.job_id))
    if job.status != JobStatus.completed:  # a completed run answered its cards
        await store.supersede_cards(job.job_id, stopped=await _stopped(store, job))
    if job.status.value != traced:  # the run ended otherwise than the root span said (or unsaid)
        close_run(run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, name=name, start=job.created_at,
                  end=job.finished_at or job.updated_at, status=job.status.value, error=job.error)
        await flush()


@contextlib.asynccontextmanager
async def _collecting(store: Store) -> AsyncIterator[None]:
    """The spans ended here reach the store: through the caller's collector when there is one
    (an activity's: its flush writes every span of the activity so far, the layer's vertex spans
    included, before the status says the run ended), else through one of its own."""
    if flusher.get() is not None:
        yield
        return
    async with collect_spans(store):
        yield


async def _stopped(store: Store, job: Job) -> bool:
    """Whether the run was stopped (its ``run_cancelled`` says ``reason: stopped``), as whoever
    ended it wrote it: a cleanup redone by another caller closes the cards as the end said."""
    if job.status != JobStatus.cancelled:
        return False
    ended = await store.read_events_named(job.job_id, "run_cancelled")
    return bool(ended) and ended[-1].data.get("reason") == "stopped"


async def _trace_name(store: Store, job: Job) -> str:
    flow = await store.get_flow(job.flow_id, version=job.flow_version)
    return flow.name if flow else job.flow_id
