"""Who may execute a flow: its owner, a user it is shared with (``execute``), and everyone for a
flow from SIGNOFF_FLOWS_DIR (owned by the built-in user ``signoff``). One rule for every place
that asks: the API and the pages (through :mod:`signoff.service.access`), a decision through
any surface (the ``resume_run`` activity checks the decider again), and Run Flow (the run's user
must be allowed to execute the child flow, checked when the child is loaded)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable
from types import EllipsisType

from signoff.engine.decisions import Decider, group_ref, user_ref
from signoff.engine.models import FlowRecord, Job, PendingRequest, User, Vote
from signoff.engine.store.base import Store

PUBLIC_OWNER_NAME = "signoff"  # owns the flows of SIGNOFF_FLOWS_DIR
GROUP_PREFIX = "group:"


async def public_owner_id(store: Store) -> str | None:
    """The id of the owner of SIGNOFF_FLOWS_DIR's flows (None before the API first created it)."""
    user = await store.get_user_by_name(PUBLIC_OWNER_NAME)
    return user.id if user is not None else None


async def runnable_flows(store: Store, user_id: str, public_owner: str | None) -> list[FlowRecord]:
    """The flows ``user_id`` may run: their own, those shared with them (``execute``) and
    SIGNOFF_FLOWS_DIR's (``public_owner``'s), each once. The one listing of the execute rule: the
    API's flow list, the flows page and Run Flow's by-name lookup read it."""
    flows = {f.id: f for f in await store.list_flows(user_id)}
    if public_owner is not None and public_owner != user_id:
        for f in await store.list_flows(public_owner):
            if f.owner_id == public_owner:
                flows.setdefault(f.id, f)
    return list(flows.values())


async def current_approvers(store: Store, job: Job) -> list[str]:
    """The approver references of the request ``job`` waits for as they are now: the stored ones
    (an escalation adds to them), else those it paused with; [] when it waits for nothing."""
    pending = job.pending
    if pending is None:
        return []
    if not (pending.approvers or pending.approver_refs or pending.escalate_to):
        return []  # it names nobody and no escalation will: no approvers are stored for it
    return list(await store.request_approvers(job.job_id, pending.request_id) or pending.approver_refs)


async def may_execute(store: Store, user_id: str, flow: FlowRecord, public_owner: str | None) -> bool:
    """Whether ``user_id`` may run ``flow`` and decide its runs' requests."""
    if flow.owner_id == user_id or (public_owner is not None and flow.owner_id == public_owner):
        return True
    return await store.has_permission(flow.id, user_id, "execute")


class Access:
    """The execute rule over one store, remembering the public owner's id once it exists (it
    never changes), for the activities and the runs of the API process."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._public_owner: str | None = None

    async def public_owner(self) -> str | None:
        if self._public_owner is None:
            self._public_owner = await public_owner_id(self.store)
        return self._public_owner

    async def may_execute(self, user_id: str, flow: FlowRecord) -> bool:
        if flow.owner_id == user_id:  # their own flow: the public owner is not looked up (a read
            return True               # each time in a deployment that has none)
        return await may_execute(self.store, user_id, flow, await self.public_owner())

    def flow_loader(self, user_id: str | None) -> Callable[..., Awaitable[FlowRecord | None]]:
        """Run Flow's loader for a run of ``user_id``: the child flow (by id, or by name with
        ``by_name=True``) when that user may execute it, else None (a flow they may not see is
        "not found")."""

        async def load(ref: str, *, by_name: bool = False) -> FlowRecord | None:
            if by_name:
                return await self._by_name(user_id, ref)
            flow = await self.store.get_flow(ref)
            if flow is None or user_id is None or not await self.may_execute(user_id, flow):
                return None
            return flow

        return load

    async def _by_name(self, user_id: str | None, name: str) -> FlowRecord | None:
        """The flow named ``name`` that ``user_id`` may run: their own first, then one shared with
        them, then one of SIGNOFF_FLOWS_DIR; the newest of a name."""
        if user_id is None or not name:
            return None
        public = await self.public_owner()
        named = [f for f in await runnable_flows(self.store, user_id, public) if f.name == name]

        def rank(f: FlowRecord) -> tuple[int, Any]:
            return (0 if f.owner_id == user_id else 1 if f.owner_id != public else 2, -f.created_at.timestamp())

        for flow in sorted(named, key=rank):
            if await self.may_execute(user_id, flow):
                return flow
        return None

    # ---- who decides (DESIGN §9) --------------------------------------------------------------

    async def person(self, ref: str) -> User | None:
        """A user by id, else by name (how a flow's ``approvers`` and a Temporal ``user`` name
        people)."""
        return await self.store.get_user(ref) or await self.store.get_user_by_name(ref)

    async def decider(self, job: Job, user: User, pending: PendingRequest | None = None, *,
                      flow: FlowRecord | None | EllipsisType = ...) -> Decider:
        """``user`` as the decision rules see them for ``job``'s request: the approver references
        they match (themselves, every group they are in), whether the run is theirs, and whether
        they may execute its flow now. With ``pending``, the request they would decide (as
        :meth:`current_request` gives it), only what the rules ask of it is read
        (:func:`~signoff.engine.decisions.check_decider`): their groups when it names approvers,
        the flow when the run is theirs. ``flow``: the job's flow as read with the job
        (Store.get_job_with_flow; None: deleted), not read again."""
        owner = user.id == job.user_id
        refs = {user_ref(user.id)}
        if pending is None or pending.approvers or pending.approver_refs:
            refs |= {group_ref(owner_id, name) for owner_id, name in await self.store.groups_of(user.id)}
        may = True
        if pending is None or owner:
            if flow is ...:
                flow = await self.store.get_flow(job.flow_id)
            may = flow is not None and await self.may_execute(user.id, flow)
        return Decider(user_id=user.id, refs=frozenset(refs), owner=owner, may_execute=may)

    async def approver_refs(self, owner_id: str | None, names: list[str]) -> list[str]:
        """A flow's ``approvers`` (user names or ids, ``group:NAME``) as references: a group is
        its owner's group of that name (nobody can squat it), a person is their id; a name nobody
        has matches nobody, so it has no reference (the request still counts as assigned: its
        owner decides only as the named approvers allow)."""
        refs: list[str] = []
        for name in names:
            if name.startswith(GROUP_PREFIX):
                ref = group_ref(owner_id or "", name[len(GROUP_PREFIX):].strip())
            else:
                person = await self.person(name)
                if person is None:
                    continue
                ref = user_ref(person.id)
            if ref not in refs:
                refs.append(ref)
        return refs

    async def people(self, refs: list[str]) -> set[str]:
        """The user ids the references name now (groups expanded)."""
        ids: set[str] = set()
        for ref in refs:
            if ref.startswith("user:"):
                ids.add(ref[len("user:"):])
            elif ref.startswith(GROUP_PREFIX):
                owner, _, name = ref[len(GROUP_PREFIX):].partition("/")
                group = await self.store.get_group(owner, name)
                if group is not None:
                    ids.update(group.members)
        return ids

    async def current_request(self, job: Job, request_id: str | None = None) -> PendingRequest | None:
        """The job's pending request (``request_id``'s, when given) with its approvers as they are
        now (an escalation added to them); None when it waits for no such request."""
        pending = job.pending
        if pending is None or (request_id is not None and pending.request_id != request_id):
            return None
        refs = await current_approvers(self.store, job)
        return pending.model_copy(update={"approver_refs": refs}) if refs else pending

    async def votes(self, job_id: str, request_id: str) -> list[Vote]:
        """The votes recorded on a request (its ``human_input_vote`` events), in order."""
        return [Vote(user=e.data["user"], action_id=e.data["action_id"], values=e.data.get("values"), at=e.data["at"])
                for e in await self.store.read_events(job_id)
                if e.event == "human_input_vote" and e.data.get("request_id") == request_id]
