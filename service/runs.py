"""The application layer: what the HTTP API, the pages and the CLI ask of signoff (submit, resume,
stop, supersede, status), each written once, over one :class:`~signoff.service.backend.RunBackend`
per way of running a job (Temporal, inline).

The job table (store) is the source of truth for what a job is; a backend runs it. Every rule
a call must pass is the engine's or :mod:`~signoff.service.access`'s, checked here before
anything is sent: who may see the job (404), who may execute the flow (403), the decision
(:func:`~signoff.engine.decisions.check_decision`: 422, 409). Every end of a run goes through
:func:`~signoff.engine.lifecycle.end_run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from functools import partial
from typing import Any

import temporalio.client

from signoff.engine.access import Access
from signoff.engine.audit.receipts import authority_of
from signoff.engine.carried import Checked, seal_checked
from signoff.engine.secrets import SecretBox
from signoff.engine.decisions import check_decision, quick_to_check
from signoff.engine.errors import (
    Forbidden, IdempotencyMismatch, InvalidValues, JobNotFound, NotResumable, RunNotEnded, SignoffError, Unavailable,
)
from signoff.engine.sharing import untweakable
from signoff.engine.spec import apply_tweaks
from signoff.engine.standing import check_room
from signoff.engine.validate import parse_and_validate
from signoff.engine.lifecycle import RunEnd, end_run
from signoff.engine.models import Decision, FlowRecord, InboxEntry, Job, JobStatus, NewJob, User, utcnow
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store, SubmitReads
from signoff.engine.tracing import sdk
from signoff.service.access import RunnableFlows, may_execute, visible_job, visible_job_with_flow
from signoff.service.backend import Resumed, RunBackend, follow_job, paused_or_ended, poll_job
from signoff.service.feed import EventFeed, TooManyStreams
from signoff.service.inline import InlineBackend
from signoff.service.outcome import who_won
from signoff.service.sweep import Sweep
from signoff.service.temporal import TemporalBackend

# The most of a person's waiting requests one list gives (GET /pending, the inbox's live set): far
# beyond what anyone waits on, a bound on one answer; the pages read a page at a time
PENDING_MAX = 100_000
# The most an inbox count counts before it says "1000+"
INBOX_COUNT_CAP = 1000
VOTED_SCAN = 50  # the jobs read for the requests a person voted on (RunService.voted_waiting)

CHECK_SECONDS = 10.0  # the most a decision's check may take (off the event loop) before it is refused

# How many times a stop reads the job again after a conditional write lost to the run moving on
STOP_ROUNDS = 5

log = logging.getLogger("signoff.service")


class RunService(Sweep):
    def __init__(self, settings: Settings, store: Store, client: temporalio.client.Client, *,
                 public_owner: str | None = None) -> None:
        self.settings = settings
        self.store = store
        self.public_owner = public_owner  # the owner of SIGNOFF_FLOWS_DIR's flows (everyone runs them)
        self.temporal = TemporalBackend(settings, store, client)
        self.inline = InlineBackend(store, settings)  # sync runs of gate-less flows (docs/inline.md)
        self.backends: dict[str, RunBackend] = {b.name: b for b in (self.temporal, self.inline)}
        self.access = Access(store)
        # the process's one tail of the store's events, for everything that follows a run live
        self.feed = EventFeed(store, max_per_user=settings.max_streams_per_user)
        self._releasing: set[asyncio.Task[None]] = set()  # workflows to cancel once Temporal is back
        self._box: SecretBox | None = None  # seals a decision's check for the worker (engine/carried.py)
        sdk.install(settings)  # idempotent: the spans of runs ended here need the SDK

    @property
    def client(self) -> temporalio.client.Client:
        return self.temporal.client

    def backend_of(self, job: Job) -> RunBackend:
        return self.backends.get(job.request.get("runner", TemporalBackend.name), self.temporal)

    # ---- submit ----------------------------------------------------------------------------

    async def submit(
        self,
        user: User,
        flow: FlowRecord,
        *,
        input_value: str,
        session_id: str | None,
        tweaks: dict | None,
        idempotency_key: str | None,
        mode: str,
        sync_timeout: float | None = None,
        request_hash: str | None = None,
        job_id: str | None = None,
        inline: bool | None = None,
    ) -> tuple[Job, bool]:
        """Create the job and start its run. A repeated idempotency key returns (the first job,
        False) and starts nothing new; when both requests carry a ``request_hash`` (a hash of the
        canonical request body, kept in the job's request) they must be equal, else
        IdempotencyMismatch (a key reused for another request, as Stripe refuses it). Supersedes this user's suspended runs of this flow in the
        same effective session first.

        A ``sync`` run of a flow with no gate runs in this process (docs/inline.md); the call
        returns once it ended or ``sync_timeout`` (default ``sync_timeout_seconds``) passed.

        Tweaks are checked first: a user the flow is shared with may set only what its owner
        marked tweakable (Forbidden), and the tweaked flow must be valid (FlowInvalid). A user who
        keeps SIGNOFF_USER_MAX_STORED_BYTES or more is refused (StorageLimit), a retry of an
        accepted submit included (engine/usage.py)."""
        self.check_tweaks(user, flow, tweaks)
        if inline is None:  # (submit_sync decided it already)
            inline = mode == "sync" and self._runs_inline(flow, tweaks)
        backend: RunBackend = self.inline if inline else self.temporal
        new = NewJob(
            job_id=job_id or str(uuid.uuid4()),
            flow_id=flow.id,
            flow_version=flow.version,
            user_id=user.id,
            session_id=session_id,
            request={"input_value": input_value, "tweaks": tweaks or {}, "mode": mode, "session_id": session_id,
                     "runner": backend.name, **({"body_sha256": request_hash} if request_hash else {})},
            idempotency_key=idempotency_key,
            lease_until=backend.lease_until(),
            status=backend.initial_status,
        )
        # the stored bytes (409 STORAGE_LIMIT) and the runs it supersedes read in the insert's
        # transaction (issue 33: no round trips of their own)
        reads = SubmitReads()
        job, created = await self.store.create_job(new, max_in_flight=self.settings.user_max_runs_in_flight,
                                                   max_stored_bytes=self.settings.user_max_stored_bytes, reads=reads)
        if not created and request_hash and job.request.get("body_sha256") not in (None, request_hash):
            raise IdempotencyMismatch(
                f"The idempotency key {idempotency_key!r} was already used with a different request (job "
                f"{job.job_id}); send the same request with it, or a new key", job_id=job.job_id)
        if not created:
            # the first submit may have died after the insert: the retry with its idempotency key
            # finishes what it began, the supersede (runs older than it: none is left for a
            # submit that got that far) and the start (idempotent)
            await self.supersede(job, older_only=True)
            if job.status == JobStatus.queued:
                await self.backend_of(job).start(job, flow)
            return job, False
        await self.supersede(job, found=reads.suspended)
        await backend.start(job, flow)
        if inline:
            await backend.wait(job.job_id, sync_timeout if sync_timeout is not None else self.settings.sync_timeout_seconds)
            return await self._job(job.job_id), True
        return job, True

    async def submit_sync(self, user: User, flow: FlowRecord, *, timeout: float, **asked: Any) -> Job:
        """A ``sync`` submit (:meth:`submit` with ``asked``): the job once its run is suspended or
        ended, or as it is when ``timeout`` has passed. The wait follows the new job's events
        from before its run can start (its id chosen first), so the job just created needs no
        read of its own (issue 33); a repeat (another job's id) or a person with no live stream
        left waits as :meth:`wait_for_pause_or_end` does. A run of this process (a flow with no
        gate, docs/inline.md) is waited for by :meth:`submit`, holding no live stream."""
        deadline = time.monotonic() + timeout
        if self._runs_inline(flow, asked.get("tweaks")):  # runs here, waited for by submit: no follower
            job, _ = await self.submit(user, flow, mode="sync", sync_timeout=timeout, inline=True, **asked)
            return job
        job_id = str(uuid.uuid4())
        async with contextlib.AsyncExitStack() as stack:
            follower = None
            with contextlib.suppress(TooManyStreams):  # none left: no wait, as wait_for_pause_or_end
                follower = await stack.enter_async_context(self.feed.follow(job_id, user_id=user.id))
            job, created = await self.submit(user, flow, mode="sync", job_id=job_id, inline=False, **asked)
            if paused_or_ended(job) or time.monotonic() >= deadline:
                return job
            if created and follower is not None:
                return await follow_job(self.store, job.job_id, follower, deadline, paused_or_ended, first=job)
        return await self.wait_for_pause_or_end(job.job_id, deadline - time.monotonic(), user_id=user.id)

    def _runs_inline(self, flow: FlowRecord, tweaks: dict | None) -> bool:
        """A sync run of this flow runs in this process (docs/inline.md), not on Temporal."""
        return self.settings.inline_sync and self.inline.accepts(flow, tweaks)

    def check_tweaks(self, user: User, flow: FlowRecord, tweaks: dict | None) -> None:
        if not tweaks:
            return
        if flow.owner_id != user.id:
            refused = untweakable(flow.spec, tweaks)
            if refused:
                raise Forbidden(f"You may not tweak {', '.join(refused)}: the flow's owner has not marked "
                                "them tweakable (a node's \"tweakable\" list), or they would choose a credential, "
                                "where one goes, or name a secret", flow_id=flow.id)
        parse_and_validate(apply_tweaks(flow.spec, tweaks), max_nodes=self.settings.max_flow_nodes,
                           min_remind_every=self.settings.min_remind_every_seconds)

    async def supersede(self, job: Job, *, older_only: bool = False, found: list[Job] | None = None) -> list[str]:
        """Cancel this user's suspended runs of this flow in the same effective session (never
        others); ``older_only``: only those submitted before ``job`` (finishing a submit that
        died, which must not cancel a run submitted after it). ``found``: those runs as the
        job's insert read them (None: read now). Only the winner of each cancel claim writes;
        returns the job ids cancelled."""
        cancelled: list[str] = []
        if found is None:
            found = await self.store.find_suspended(job.flow_id, job.user_id, job.effective_session)
        for old in found:
            if old.job_id == job.job_id or (older_only and old.created_at >= job.created_at):
                continue
            if await self._end_suspended(old, RunEnd(JobStatus.cancelled, reason="superseded",
                                                     superseded_by=job.job_id)):
                cancelled.append(old.job_id)
        return cancelled

    # ---- resume ----------------------------------------------------------------------------

    async def resume(self, user: User, job_id: str, request_id: str, decision: Decision, *,
                     via: str | None = None) -> Resumed:
        """:meth:`_resume`; a decision that lost to another one (NOT_RESUMABLE, or JobNotFound
        for an approver who no longer sees the run) is told who won, when the person was asked
        (:func:`~signoff.service.outcome.who_won`)."""
        try:
            return await self._resume(user, job_id, request_id, decision, via=via)
        except (NotResumable, JobNotFound) as err:
            raise await who_won(self.store, user, job_id, request_id, err) from None

    async def _resume(self, user: User, job_id: str, request_id: str, decision: Decision, *,
                      via: str | None = None) -> Resumed:
        """Apply a decision (or one vote of a quorum) to the job's pending request, for the run's
        owner or an approver of the request. Raises, in this order, JobNotFound (404),
        Forbidden / NotAnApprover (403), InvalidDecision / InvalidValues (422), NotResumable /
        AlreadyVoted (409): the engine's one check (``check_decision``), here before anything is
        sent, and again by the run; the job stays suspended in every case. ``via``: the surface or
        protocol it came through, recorded in the decision's event (page, agui, email, slack, mcp,
        a2a; None: the HTTP API)."""
        checked_at = utcnow()  # before anything is read: an access change after it is caught (engine/carried.py)
        job, flow = await visible_job_with_flow(self.store, user, job_id)  # one read (issue 33)
        try:
            pending = await self.access.current_request(job)
            votes = await self.access.votes(job_id, pending.request_id) if pending and pending.quorum_action else []
            decider = await self.access.decider(job, user, pending, flow=flow)
            # the values' schema check off the event loop, bounded in time (its cost is linear in
            # values bounded by SIGNOFF_MAX_VALUE_ITEMS; the bound is for what that leaves)
            check = partial(check_decision, pending, request_id, decision,
                            waiting=job.status == JobStatus.suspended, decider=decider, votes=votes,
                            max_items=self.settings.max_value_items, max_standing=self.settings.max_standing)
            try:
                if quick_to_check(pending, decision):  # a few comparisons: no thread hop for them
                    check()
                else:
                    await asyncio.wait_for(asyncio.to_thread(check), CHECK_SECONDS)
                if decision.remember is not None:  # a standing approval (DESIGN §17): within the cap
                    await check_room(self.store, user.id, self.settings.max_standing_per_user)
            except TimeoutError:
                raise InvalidValues([{"loc": "values", "type": "too_costly", "message":
                                      f"took longer than {CHECK_SECONDS:g} s to check against the request's fields"}],
                                    ) from None
        except SignoffError as err:
            err.details.setdefault("job_id", job_id)  # the error body names the job
            raise
        checked = None
        if pending is not None and not pending.quorum_action:  # a vote goes its own way (record_vote)
            # what this check found, for the worker's activity not to read it again (engine/carried.py)
            authority = authority_of(timed_out=False, owner=decider.owner, refs=decider.refs,
                                     at_pause=job.pending.approver_refs if job.pending is not None else [],
                                     now=pending.approver_refs)
            # and the job as read here: the worker does not read it again, its claim holds only
            # while the row is as read (Store.record_decision's stamp)
            checked = self._seal(Checked(job_id=job_id, request_id=request_id, user_id=user.id, name=user.name,
                                         authority=authority, checked_at=checked_at, job=job))
        return await self.backend_of(job).resume(job, request_id, decision, decided_by=user.id, via=via,
                                                 checked=checked)

    def _seal(self, checked: Checked) -> str | None:
        """``checked`` sealed with the deployment's key; None (the worker reads the decider) when
        this process has no key to seal with."""
        try:
            if self._box is None:
                self._box = SecretBox.for_settings(self.settings)
            return seal_checked(self._box, checked)
        except SignoffError:
            return None

    async def pending_for(self, user: User, flow_id: str | None = None) -> list[Job]:
        """What waits for ``user`` to decide, newest first: their own runs' requests (those with
        no approvers named, or naming them), and the requests assigned to them (by name, by
        group, by an escalation) in anyone's runs, but none of a requester the user muted (the
        request still waits for its other approvers). All of it: a page of it is
        :meth:`inbox_page`."""
        return await self.store.inbox(user.id, flow_id=flow_id, limit=PENDING_MAX)

    async def inbox_page(self, user: User, *, flow_id: str | None = None, session_id: str | None = None,
                         kind: str | None = None, limit: int, offset: int = 0, oldest: bool = False) -> list[Job]:
        """A page of :meth:`pending_for` (Store.inbox: indexed, its cost the page's rows), newest
        first or ``oldest`` first."""
        return await self.store.inbox(user.id, flow_id=flow_id, session_id=session_id, kind=kind, limit=limit,
                                      offset=offset, oldest=oldest)

    async def inbox_entries(self, user: User) -> list[InboxEntry]:
        """What :meth:`pending_for` lists, as keys and filter columns only (Store.inbox_entries):
        what the inbox's live stream compares, without reading the jobs."""
        return await self.store.inbox_entries(user.id, limit=PENDING_MAX)

    async def inbox_count(self, user: User, *, flow_id: str | None = None, session_id: str | None = None,
                          kind: str | None = None) -> int | str:
        """How many requests wait for ``user`` (with :meth:`inbox_page`'s filters): a number up to
        INBOX_COUNT_CAP, past it the text ``"1000+"`` (counted no further: the count's cost
        stays bounded whatever the number waiting)."""
        n = await self.store.inbox_count(user.id, flow_id=flow_id, session_id=session_id, kind=kind,
                                         cap=INBOX_COUNT_CAP + 1)
        return f"{INBOX_COUNT_CAP}+" if n > INBOX_COUNT_CAP else n

    async def voted_waiting(self, user: User) -> set[str]:
        """The ids of the requests waiting for ``user`` that they already voted on (a quorum
        that waits for others): the header's count leaves them out. Read from the jobs the user
        last took part in (at most VOTED_SCAN, newest first), so its cost is bounded whatever
        their history; only a waiting request needing several approvals has its votes read."""
        voted: set[str] = set()
        for job in await self.store.participated_jobs(user.id, limit=VOTED_SCAN):
            pending = job.pending
            if job.status != JobStatus.suspended or pending is None or pending.required_approvals < 2:
                continue
            if any(v.user == user.id for v in await self.access.votes(job.job_id, pending.request_id)):
                voted.add(pending.request_id)
        return voted

    async def header_count(self, user: User) -> int | str:
        """What the header's Inbox count says: :meth:`inbox_count` without the requests the
        user voted on (they wait on others; issue 29)."""
        n = await self.inbox_count(user)
        voted = len(await self.voted_waiting(user))
        return n if isinstance(n, str) else max(0, n - voted)

    async def inbox_flows(self, user: User) -> list[str]:
        """The flows of what waits for ``user`` (Store.inbox_flows)."""
        return await self.store.inbox_flows(user.id)

    @property
    def flows(self) -> RunnableFlows:
        """The flows a user may run (SIGNOFF_FLOWS_DIR's are everyone's: :attr:`public_owner`)."""
        return RunnableFlows(self.store, self.public_owner)

    async def may_execute(self, user: User, flow_id: str) -> bool:
        flow = await self.store.get_flow(flow_id)
        return flow is not None and await may_execute(self.store, user, flow, self.public_owner)

    # ---- stop --------------------------------------------------------------------------------

    async def stop(self, user: User, job_id: str) -> Job:
        """Suspended: take the cancel claim (the loser, a resume that got in first, changes
        nothing). Running: the backend stops it, or (a workflow) the job is ended here by a
        conditional write and its workflow let go of, as :meth:`cancel` does: whatever the run
        was about to do next (the layer after a decision being applied, a call) finds the job
        ended. Returns what the job really is afterwards. Only the run's owner may (Forbidden
        for an approver, JobNotFound for anyone else)."""
        job = await visible_job(self.store, user, job_id)
        if job.user_id != user.id:  # an approver sees the run and decides its request, no more
            raise Forbidden("Only the run's owner may stop it; you may decide its request", job_id=job_id)
        # The run moves while the stop is under way: a resume claims a suspended job, a running
        # one reaches its next pause. Each write is conditional; after one that lost, the job is
        # read again and stopped as it is then (a few rounds at most: each needs the run to move).
        for _ in range(STOP_ROUNDS):
            if job.status.terminal:
                return job
            if job.status == JobStatus.suspended:
                if await self._end_suspended(job, RunEnd(JobStatus.cancelled)):
                    return await self._job(job_id)
                job = await self._job(job_id)  # a resume won the race: it is running now
                continue
            stopped = await self.backend_of(job).stop(job)
            job = stopped if stopped is not None else await self.cancel(job, "stopped")
            if stopped is not None or job.status != JobStatus.suspended:
                return job  # stopped, or ended otherwise first; suspended: it paused meanwhile
        return job

    async def cancel(self, job: Job, reason: str) -> Job:
        """End a job that is not over as ``cancelled`` with ``reason`` (the flow was deleted, its
        user was): a suspended one by the cancel claim, a running one by a conditional write
        (its layer in flight finds the job ended and leaves nothing behind), then its backend
        lets go of it. Returns what the job is afterwards."""
        end = RunEnd(JobStatus.cancelled, reason=reason)
        if job.status == JobStatus.suspended and await self._end_suspended(job, end):
            return await self._job(job.job_id)
        await self.store.want_release(job.job_id)
        ended = await end_run(self.store, job.job_id, end, expect=[JobStatus.queued, JobStatus.in_progress])
        if ended.won:
            await self._release(job)
        else:
            await self.store.released(job.job_id)
        return ended.job or job

    async def delete_flow(self, user: User, flow: FlowRecord) -> list[str]:
        """Delete a flow its owner deletes; every run of it that is not over (anyone's) is
        cancelled first (``run_cancelled`` {reason: "flow_deleted"}, its cards closed), so no
        request waits for a flow that is gone. Returns the job ids cancelled."""
        if flow.owner_id != user.id:
            raise Forbidden("Only the owner may delete this flow")
        cancelled = []
        for job in await self.store.list_active_jobs(flow.id):
            if (await self.cancel(job, "flow_deleted")).status == JobStatus.cancelled:
                cancelled.append(job.job_id)
        await self.store.delete_flow(flow.id)
        return cancelled

    async def delete_user(self, user: User) -> None:
        """Delete a user (``signoff users delete``): their runs that are not over are cancelled,
        their flows deleted (with every run of them), then their keys, shares and secrets."""
        for job in await self.store.list_user_active_jobs(user.id):
            await self.cancel(job, "user_deleted")
        for flow in await self.store.list_flows(user.id):
            if flow.owner_id == user.id:
                await self.delete_flow(user, flow)
        await self.store.delete_user(user.id)

    async def delete_run(self, user: User, job_id: str) -> None:
        """Delete an ended run of the caller's with everything of it, its bytes given back to their
        count (Store.delete_run). Only the run's owner may (Forbidden for an approver or a voter,
        who see it; JobNotFound for anyone else, and for a run deleted already); a run that has
        not ended is RunNotEnded (stop it first), and so is one just stopped whose workflow is
        still to cancel (the sweep does within seconds). A run racing it to a resume is kept: the
        store deletes only a job that has ended, in the statement that deletes it."""
        job = await visible_job(self.store, user, job_id)
        if job.user_id != user.id:  # an approver sees the run and decides its request, no more
            raise Forbidden("Only the run's owner may delete it", job_id=job_id)
        if not job.status.terminal:
            raise RunNotEnded(f"Run {job_id} is {job.status.value}: stop it first (POST /api/v2/workflows/stop), "
                              "then delete it", job_id=job_id, run_status=job.status.value)
        if await self.store.delete_run(job_id):
            return
        if await self.store.get_job(job_id) is None:  # deleted meanwhile (the same call twice at once)
            raise JobNotFound(f"Job {job_id!r} not found", job_id=job_id)
        raise RunNotEnded(f"Run {job_id} has ended but its workflow is still being let go of; try again in a few "
                          "seconds", job_id=job_id, run_status=job.status.value)

    async def _end_suspended(self, job: Job, end: RunEnd) -> bool:
        """End a suspended job by the cancel claim; the winner lets go of its run. Whether this
        call won."""
        # the workflow is to be cancelled once the job has ended: recorded first, so a process that
        # dies between the end and the cancel leaves it to the sweep (release_due)
        await self.store.want_release(job.job_id)
        ended = await end_run(self.store, job.job_id, end, from_suspended=True)
        if ended.won:
            await self._release(job)
        else:
            await self.store.released(job.job_id)  # a resume won: its run goes on
        return ended.won

    async def _release(self, job: Job) -> None:
        """Let go of the run of a job this service ended. The job's end is already written; when
        Temporal is away the workflow is cancelled once it is back (tried again from this
        process, with backoff), so the answer is the job's real status, not an error. Should this
        process die first, the workflow ends at its maximum-suspension timer (its finish finds
        the job ended and writes nothing)."""
        try:
            await self.backend_of(job).release(job.job_id)
            await self.store.released(job.job_id)
        except Unavailable:
            log.warning("job %s ended; its workflow will be cancelled once Temporal is back", job.job_id)
            task = asyncio.get_running_loop().create_task(self._release_when_back(job),
                                                          name=f"signoff-release-{job.job_id}")
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    async def _release_when_back(self, job: Job) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            try:
                await self.backend_of(job).release(job.job_id)
                await self.store.released(job.job_id)
                log.info("job %s: its workflow is cancelled now that Temporal is back", job.job_id)
                return
            except Unavailable:
                delay = min(delay * 2, 30.0)
            except Exception:  # noqa: BLE001 - logged; the maximum-suspension timer ends it
                log.exception("job %s: cancelling its workflow failed", job.job_id)
                return

    # ---- status ------------------------------------------------------------------------------

    async def get_job(self, user: User, job_id: str) -> Job:
        return await visible_job(self.store, user, job_id)

    async def wait_for_pause_or_end(self, job_id: str, timeout: float, *, user_id: str | None = None) -> Job:
        """The job once it is suspended or ended, or as it is after ``timeout``. A wait for
        ``user_id`` counts as one of their live streams (none left: the job as it is now)."""
        for backend in self.backends.values():
            if backend.runs_here(job_id):  # a run of this process: no polling
                await backend.wait(job_id, timeout)
                return await self._job(job_id)
        return await poll_job(self.store, job_id, timeout, paused_or_ended, feed=self.feed, user_id=user_id)

    async def wait_for_terminal(self, job_id: str, timeout: float) -> Job:
        return await poll_job(self.store, job_id, timeout, lambda j: j.status.terminal, feed=self.feed)

    async def _job(self, job_id: str) -> Job:
        job = await self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id=job_id)
        return job
