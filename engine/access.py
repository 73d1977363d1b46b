"""Who may execute a flow: its owner, a user it is shared with (``execute``), and everyone for a
flow from SIGNOFF_FLOWS_DIR (owned by the built-in user ``signoff``). One rule for every place
that asks: the API and the pages (through :mod:`signoff.service.access`), a decision through
any surface (the ``resume_run`` activity checks the decider again), and Run Flow (the run's user
must be allowed to execute the child flow, checked when the child is loaded)."""

from __future__ import annotations

from typing import Awaitable, Callable

from signoff.engine.models import FlowRecord
from signoff.engine.store.base import Store

PUBLIC_OWNER_NAME = "signoff"  # owns the flows of SIGNOFF_FLOWS_DIR


async def public_owner_id(store: Store) -> str | None:
    """The id of the owner of SIGNOFF_FLOWS_DIR's flows (None before the API first created it)."""
    user = await store.get_user_by_name(PUBLIC_OWNER_NAME)
    return user.id if user is not None else None


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
        return await may_execute(self.store, user_id, flow, await self.public_owner())

    def flow_loader(self, user_id: str | None) -> Callable[[str], Awaitable[FlowRecord | None]]:
        """Run Flow's loader for a run of ``user_id``: the child flow when that user may execute
        it, else None (a flow they may not see is "not found")."""

        async def load(flow_id: str) -> FlowRecord | None:
            flow = await self.store.get_flow(flow_id)
            if flow is None or user_id is None or not await self.may_execute(user_id, flow):
                return None
            return flow

        return load
