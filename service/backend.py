"""What runs a job: one interface, two implementations (docs/architecture.md).

- :class:`~signoff.service.temporal.TemporalBackend`: a durable FlowRun workflow per run, the
  default, and the only one for a run that can pause.
- :class:`~signoff.service.inline.InlineBackend`: a sync run of a flow with no gate, in the API
  process (docs/inline.md).

The service picks one when a job is created and records it in ``job.request["runner"]``; every
later call on the job goes to the same one (:meth:`RunService.backend_of`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from signoff.engine.errors import JobNotFound
from signoff.engine.models import Decision, FlowRecord, Job, JobStatus
from signoff.engine.store.base import Store
from signoff.service.feed import EventFeed, Follower, TooManyStreams


@dataclass(frozen=True)
class Resumed:
    """What a decision did: ``resuming`` (the run goes on) or ``vote_recorded`` (one vote of a
    quorum: ``votes`` of ``required``). Where the run is afterwards is the job's status."""

    status: str = "resuming"
    votes: int = 0
    required: int = 1
    # the job as the decision's own step left it, when that step completed the run (its result
    # came with the answer, issue 33): the answer's ``run`` with no read of the store. Its
    # timestamps are those read before the decision: the completed answer shows none of them.
    # None: the answer's ``run`` is read
    completed: Job | None = None


class RunBackend(abc.ABC):
    name: ClassVar[str]
    # the job's first status: a run that starts at once is born in_progress (one write less)
    initial_status: ClassVar[JobStatus] = JobStatus.queued

    def lease_until(self) -> datetime | None:
        """The lease a new job of this backend holds (an inline run's), or None."""
        return None

    @abc.abstractmethod
    async def start(self, job: Job, flow: FlowRecord) -> None:
        """Start the job's run. Idempotent: a second start of the same job starts nothing."""

    @abc.abstractmethod
    async def resume(self, job: Job, request_id: str, decision: Decision, decided_by: str, *,
                     via: str | None = None, checked: str | None = None) -> Resumed:
        """Deliver a decision the service checked (``checked``: that check, sealed for the worker,
        engine/carried.py); what it did. Raises what the run answers
        (NotResumable when another decision won, AlreadyVoted, Unavailable...)."""

    @abc.abstractmethod
    async def release(self, job_id: str) -> None:
        """The service ended a suspended job (stop or supersede claim): let go of what runs it."""

    async def stop(self, job: Job) -> Job | None:
        """Stop a job that is not suspended (queued or in progress) when this backend's run ends
        it itself; returns what it really is afterwards (cancelled, or the end it reached first).
        None (the default): the service ends the job in the store (a conditional write, so an end
        the run reached first wins) and then lets go of the run (:meth:`release`), whose later
        steps find the job ended and do nothing more (RunService.stop)."""
        return None

    def runs_here(self, job_id: str) -> bool:
        """Whether this process runs the job (then :meth:`wait` waits for it without polling)."""
        return False

    async def wait(self, job_id: str, timeout: float) -> bool:
        """Wait (at most ``timeout``) for this process's run of the job to end; whether no run of
        it is left going here. The run is never cancelled by the wait."""
        return True

    @abc.abstractmethod
    async def recover(self) -> None:
        """One round of the sweep: runs this backend lost (a process that died) are settled."""


def paused_or_ended(job: Job) -> bool:
    """What a sync submit waits for: its run waits at a gate, or is over."""
    return job.status == JobStatus.suspended or job.status.terminal


async def follow_job(store: Store, job_id: str, follower: Follower | None, deadline: float,
                     done: Callable[[Job], bool], *, safety: float = 1.0, first: Job | None = None) -> Job:
    """poll_job's wait with the feed: the job read, then read again at each of its events (the
    ``follower``, entered before anything it waits for could be written: None, no wait) and
    every ``safety`` seconds, until ``done(job)`` or the ``deadline`` (time.monotonic()).
    ``first``: the job as it was when the follower was entered or later (a job just created
    with the follower entered before its run could start: issue 33, no read of its own)."""
    job = first
    while True:
        if job is None:
            job = await store.get_job(job_id)
            if job is None:
                raise JobNotFound(job_id=job_id)
        left = deadline - time.monotonic()
        if done(job) or left <= 0 or follower is None:
            return job
        await follower.wait(min(safety, left))
        job = None


async def poll_job(store: Store, job_id: str, timeout: float, done: Callable[[Job], bool], *,
                   feed: EventFeed | None = None, safety: float = 1.0, user_id: str | None = None) -> Job:
    """Read the job until ``done(job)`` or ``timeout`` passes (then the job as it is). With the
    process's ``feed``: read again each time the job gets an event (a pause and an end are each
    written with their event), and every ``safety`` seconds whatever happens. Without one: a
    short first delay (a read of one row by its key costs well under a millisecond), growing
    slowly to 100 ms, so a run that pauses or ends within tens of milliseconds is seen within a
    few. A wait for ``user_id`` is one of their live streams (SIGNOFF_MAX_STREAMS_PER_USER): with
    none left it does not wait (the job as it is, as once ``timeout`` has passed)."""
    deadline = time.monotonic() + timeout
    if feed is not None:
        async with contextlib.AsyncExitStack() as stack:
            try:
                follower = await stack.enter_async_context(feed.follow(job_id, user_id=user_id))
            except TooManyStreams:  # the person holds all the streams they may: no wait
                follower = None
            return await follow_job(store, job_id, follower, deadline, done, safety=safety)
    delay = 0.002
    while True:
        job = await store.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id=job_id)
        if done(job) or time.monotonic() >= deadline:
            return job
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.15, 0.1)
