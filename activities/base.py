"""The activities' shared part: what every concern's activities hold (the store, the settings,
the state codec, access rules, the vault) and read alike (the run's graph, the job, the person a
decision is made for). :class:`~signoff.activities.flow.FlowActivities` is the one class the
worker registers; it is made of the concerns' classes built on this one.
"""

from __future__ import annotations

from collections import OrderedDict

from signoff.activities.state import StateCodec
from signoff.engine.access import Access
from signoff.engine.audit.keys import ReceiptKeys
from signoff.engine.audit.receipts import authority_of
from signoff.engine.decisions import (
    check_decider,
)
from signoff.engine.errors import (
    NotAnApprover,
    NotResumable,
)
from signoff.engine.graph import Graph
from signoff.engine.models import Job, PendingRequest, User
from signoff.engine.secrets import Vault
from signoff.engine.settings import Settings
from signoff.engine.state import RunState
from signoff.engine.store.base import Store

_GRAPH_CACHE_SIZE = 256


class ActivityBase:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.codec = StateCodec(store, settings.inline_output_bytes)
        self._graphs: OrderedDict[str, Graph] = OrderedDict()
        self.access = Access(store)
        self.vault = Vault(store, settings)
        self.receipt_keys = ReceiptKeys(store, settings)

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

    async def _decider_may_decide(self, job: Job, request_id: str, who: str | None,
                                  pending: PendingRequest | None = None) -> User:
        """The person a decision is made for (``who``: a user id or name, default the run's
        owner), checked as their HTTP resume is (DESIGN §9, §13). ``pending``: the request as
        Access.current_request gave it, when the caller read it already."""
        return (await self._decider_authority(job, request_id, who, pending))[0]

    async def _decider_authority(self, job: Job, request_id: str, who: str | None,
                                 pending: PendingRequest | None = None) -> tuple[User, str | None]:
        """:meth:`_decider_may_decide`, and why the person may decide (their receipt's
        ``authority``, engine/audit/receipts.py: authority_of; None when the run waits for no
        such request)."""
        person = await self.access.person(who or job.user_id)
        if person is None:
            raise NotAnApprover(f"No user {who!r}: a decision through Temporal names the person it is for "
                                '("user": a user name or id)', job_id=job.job_id)
        if pending is None:
            pending = await self.access.current_request(job, request_id)
        if pending is None:
            return person, None
        decider = await self.access.decider(job, person, pending)
        check_decider(pending, decider)
        at_pause = job.pending.approver_refs if job.pending is not None else []
        return person, authority_of(timed_out=False, owner=decider.owner, refs=decider.refs, at_pause=at_pause,
                                    now=pending.approver_refs)

    async def _flow_owner(self, job: Job) -> str | None:
        flow = await self.store.get_flow(job.flow_id, version=job.flow_version)
        return flow.owner_id if flow else None

