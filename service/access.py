"""Who may see and do what: one ownership rule and one execute rule, for every surface (the HTTP
API, the pages, the service's own calls). Anything a caller may not see is "not found" (404),
never "forbidden" (403): a 403 would confirm that it exists (DESIGN §6)."""

from __future__ import annotations

import re

from signoff.engine import access
from signoff.engine.decisions import group_ref, user_ref
from signoff.engine.errors import FlowNotFound, JobNotFound, UserNotFound
from signoff.engine.models import FlowRecord, Job, User
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


async def took_part(store: Store, user: User, job: Job) -> bool:
    """Whether ``user`` voted on or decided a request of the job (the store records each voter and
    decider, Store.add_participants: one indexed read)."""
    return await store.took_part(job.job_id, user.id)


async def assigned(store: Store, user: User, job: Job) -> bool:
    """Whether the job's waiting request names ``user`` (or a group of theirs) as an approver."""
    if job.pending is None:
        return False
    refs = set(await store.request_approvers(job.job_id, job.pending.request_id) or job.pending.approver_refs)
    if not refs:
        return False
    if user_ref(user.id) in refs:
        return True
    return any(group_ref(owner, name) in refs for owner, name in await store.groups_of(user.id))


async def may_execute(store: Store, user: User, flow: FlowRecord, public_owner: str | None = None) -> bool:
    """The engine's one execute rule (:func:`signoff.engine.access.may_execute`) for ``user``."""
    return await access.may_execute(store, user.id, flow, public_owner)


async def runnable_flow(store: Store, user: User, flow_id: str, public_owner: str | None = None) -> FlowRecord:
    """The flow if the caller may execute it; anything else is FlowNotFound."""
    if not valid_id(flow_id):
        raise FlowNotFound(f"Flow {flow_id[:100]!r} not found")
    flow = await store.get_flow(flow_id)
    if flow is None or not await may_execute(store, user, flow, public_owner):
        raise FlowNotFound(f"Flow {flow_id!r} not found")
    return flow


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
