"""Who may see and do what: one ownership rule and one execute rule, for every surface (the HTTP
API, the pages, the service's own calls). Anything a caller may not see is "not found" (404),
never "forbidden" (403): a 403 would confirm that it exists (DESIGN §6)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from signoff.engine import access
from signoff.engine.access import current_approvers
from signoff.engine.decisions import group_ref, user_ref
from signoff.engine.errors import FlowNotFound, JobNotFound, UserNotFound
from signoff.engine.models import FlowRecord, Job, Message, User
from signoff.engine.store.base import Store

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$")


def valid_id(value: str) -> bool:
    """The shape of every id a caller names (job, flow, session): a malformed one is unknown."""
    return isinstance(value, str) and bool(_ID_RE.match(value))


async def visible_job(store: Store, user: User, job_id: str) -> Job:
    """The job if the caller may see it: they submitted it, its waiting request is assigned to
    them (an approver, DESIGN §9), or they voted on or decided one of its requests (so the
    person who answered still sees what became of it, and a late vote is a 409, not a 404);
    anything else is JobNotFound."""
    if not valid_id(job_id):
        raise JobNotFound(f"Job {job_id[:100]!r} not found")
    job = await store.get_job(job_id)
    if job is None or (job.user_id != user.id and not await assigned(store, user, job)
                       and not await took_part(store, user, job)):
        raise JobNotFound(f"Job {job_id!r} not found", job_id=job_id)
    return job


async def visible_job_with_flow(store: Store, user: User, job_id: str) -> tuple[Job, FlowRecord | None]:
    """:func:`visible_job`, with the job's flow (its latest version; None when deleted) read in
    the same store call (Store.get_job_with_flow): what a decision's check reads (issue 33)."""
    if not valid_id(job_id):
        raise JobNotFound(f"Job {job_id[:100]!r} not found")
    job, flow = await store.get_job_with_flow(job_id)
    if job is None or (job.user_id != user.id and not await assigned(store, user, job)
                       and not await took_part(store, user, job)):
        raise JobNotFound(f"Job {job_id!r} not found", job_id=job_id)
    return job, flow


async def asked_job(store: Store, user: User, job_id: str, request_id: str) -> Job:
    """The job if its request ``request_id`` is no longer waiting and once named ``user`` (or a
    group they are in now) as an approver: as it paused, as it is stored, or added by its
    escalation. A person who was asked sees what became of it (who decided, what, when), not
    404; anything else, a request still waiting included (visible_job's to allow), is JobNotFound:
    nobody else learns that it exists."""
    job = await store.get_job(job_id) if valid_id(job_id) else None
    if job is None or job.waits_for(request_id):
        raise JobNotFound(f"Job {job_id[:100]!r} not found", job_id=job_id[:100])
    refs = set(await store.request_approvers(job_id, request_id))
    escalated: list[str] = []
    # the request's own events by name (a few per run), not the run's whole log
    for ev in await store.read_events_named(job_id, "human_input_required"):
        if ev.data.get("request_id") == request_id:
            refs.update(str(r) for r in ev.data.get("approver_refs") or [])
    for ev in await store.read_events_named(job_id, "human_input_escalated"):
        if ev.data.get("request_id") == request_id:
            escalated = [str(n) for n in ev.data.get("added") or []][:100]
    if escalated:
        flow = await store.get_flow(job.flow_id)
        refs.update(await access.Access(store).approver_refs(flow.owner_id if flow else job.user_id, escalated))
    mine = {user_ref(user.id)} | {group_ref(owner, name) for owner, name in await store.groups_of(user.id)} \
        if refs else set()
    if not refs & mine:
        raise JobNotFound(f"Job {job_id!r} not found", job_id=job_id)
    return job


async def took_part(store: Store, user: User, job: Job) -> bool:
    """Whether ``user`` voted on or decided a request of the job (the store records each voter and
    decider, Store.add_participants: one indexed read)."""
    return await store.took_part(job.job_id, user.id)


async def assigned(store: Store, user: User, job: Job) -> bool:
    """Whether the job's waiting request names ``user`` (or a group of theirs) as an approver."""
    refs = set(await current_approvers(store, job))
    if not refs:
        return False
    if user_ref(user.id) in refs:
        return True
    return any(group_ref(owner, name) in refs for owner, name in await store.groups_of(user.id))


async def may_execute(store: Store, user: User, flow: FlowRecord, public_owner: str | None = None) -> bool:
    """The engine's one execute rule (:func:`signoff.engine.access.may_execute`) for ``user``."""
    return await access.may_execute(store, user.id, flow, public_owner)


async def runnable_flows(store: Store, user: User, public_owner: str | None = None) -> list[FlowRecord]:
    """The flows the caller may run (:func:`signoff.engine.access.runnable_flows`)."""
    return await access.runnable_flows(store, user.id, public_owner)


async def runnable_flow(store: Store, user: User, flow_id: str, public_owner: str | None = None) -> FlowRecord:
    """The flow if the caller may execute it; anything else is FlowNotFound."""
    if not valid_id(flow_id):
        raise FlowNotFound(f"Flow {flow_id[:100]!r} not found")
    flow = await store.get_flow(flow_id)
    if flow is None or not await may_execute(store, user, flow, public_owner):
        raise FlowNotFound(f"Flow {flow_id!r} not found")
    return flow


@dataclass(frozen=True)
class RunnableFlows:
    """The flows a user may run over one store: their own, those shared with them, and
    SIGNOFF_FLOWS_DIR's (``public_owner``'s, everyone's). What every surface asks (the API's
    flow routes and submit, AG-UI, the flows page) goes through one of these: the API's from
    its dependency (api/deps.py: FlowsDep), the service's as ``RunService.flows``."""

    store: Store
    public_owner: str | None = None

    async def get(self, user: User, flow_id: str) -> FlowRecord:
        """The flow if ``user`` may run it; anything else is FlowNotFound."""
        return await runnable_flow(self.store, user, flow_id, self.public_owner)

    async def all(self, user: User) -> list[FlowRecord]:
        return await runnable_flows(self.store, user, self.public_owner)


async def recent_runs(store: Store, user: User, *, flow_id: str | None = None,
                      limit: int = 100) -> list[tuple[dict[str, Any], Job]]:
    """The caller's own runs that have a trace, newest first (of ``flow_id`` only, when given),
    each with its trace's row (Store.list_traces): the API's trace list, the flows page's recent
    runs and the history page read them."""
    runs = []
    for row in await store.list_traces(flow_id=flow_id, user_id=user.id, limit=limit):
        run_id = str(row.get("run_id") or row.get("trace_id") or "")
        job = await store.get_job(run_id) if valid_id(run_id) else None
        if job is not None and job.user_id == user.id:
            runs.append((row, job))
    return runs


async def runs_taken_part(store: Store, user: User, *, limit: int = 200) -> list[Job]:
    """The caller's own recent runs (:func:`recent_runs`), then others' runs they voted on or
    decided (Store.participated_jobs), each once: what a person's history reads."""
    jobs = {job.job_id: job for _row, job in await recent_runs(store, user, limit=limit)}
    for job in await store.participated_jobs(user.id, limit=limit):
        jobs.setdefault(job.job_id, job)
    return list(jobs.values())


async def run_messages(store: Store, user: User, job: Job) -> list[Message]:
    """The chat history of ``job``'s session that ``user`` (who may see the job) reads beside it:
    the messages of the run's owner's runs of the flow in that session; an approver (not the
    owner) reads only this run's, not the owner's earlier runs'."""
    if not job.effective_session:
        return []
    messages: list[Message] = []
    owners: dict[str, bool] = {}
    for m in await store.list_messages(job.effective_session, flow_id=job.flow_id):
        if m.job_id is None:
            continue
        if m.job_id != job.job_id and job.user_id != user.id:
            continue
        if m.job_id not in owners:
            other = job if m.job_id == job.job_id else await store.get_job(m.job_id)
            owners[m.job_id] = other is not None and other.user_id == job.user_id
        if owners[m.job_id]:
            messages.append(m)
    return messages


async def named_user(store: Store, ref: str) -> User:
    """A user by name, else by id (how people are named in shares and groups); UserNotFound."""
    if "\x00" in ref or len(ref) > 200:  # no user has such a name (PostgreSQL text cannot hold NUL)
        raise UserNotFound(f"No user named {ref[:100]!r}")
    target = await store.get_user_by_name(ref)
    if target is None and valid_id(ref):
        target = await store.get_user(ref)
    if target is None:
        raise UserNotFound(f"No user named {ref!r}")
    return target
