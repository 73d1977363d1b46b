"""The budget of stored bytes per user (docs/security.md, "Budgets per user"): checked at the door
of what makes a user keep more (saving a flow, submitting a run) against the count the store keeps
(:meth:`engine.store.base.Store.stored_bytes`: one indexed read, never a sum over the user's rows).

A run already going is not stopped when its user's count passes the budget: it is bounded by
the per-run budget (SIGNOFF_RUN_MAX_OUTPUT_BYTES) and finishes; refusing new work at the door is
enough to bound a user to their budget plus what the runs they have going may still store.
"""

from __future__ import annotations

from typing import Any

from signoff.engine.store.base import Store, stored_bytes_check
from signoff.engine.store.encoding import dumps, octets

__all__ = ["check_stored_bytes", "stored_size"]


def stored_size(document: Any) -> int:
    """The bytes a JSON document counts once stored (a flow's spec: what saving it adds)."""
    return octets(dumps(document))


async def check_stored_bytes(store: Store, user_id: str, limit: int, *, adding: int = 0) -> int:
    """Refuse (StorageLimit, 409) when the user keeps ``limit`` bytes or more, or would with the
    ``adding`` bytes about to be stored; returns what the user keeps. ``limit`` 0: no limit."""
    if not limit:
        return 0
    used = await store.stored_bytes(user_id)
    stored_bytes_check(used, limit, adding=adding)
    return used
