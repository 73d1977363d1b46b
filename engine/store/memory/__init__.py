"""The in-memory store: every :class:`~engine.store.base.Store` method, with the semantics of the
SQL backends, inside one process. ``open_store("memory://")`` makes a new, empty one.

It is the reference implementation of the contract (tests/store_conformance.py runs the same
tests on it, SQLite and PostgreSQL), the store of ``signoff run`` and of the unit tests. It is
not durable and not shared: the API and the worker, which are separate processes, need SQLite
or PostgreSQL.

Why it needs no lock: no method awaits anything, so on the event loop's one thread each runs
from its first statement to its last without another coroutine in between, the way a
transaction does. That is what makes a claim single-winner here. Each method also raises
every error it can (a value that is not JSON, an event without a name) before its first
change, so it changes everything it should or nothing: a status and its event are written
together or not at all. It is not thread-safe.

Values are kept the way the SQL backends keep them (engine/store/encoding.py): JSON documents
as text (a copy: the caller's later changes do not reach the store, key order is kept,
datetimes are serialised, NaN is refused), timestamps as aware UTC, API keys only hashed.

Modules, as its SQL twin (engine/store/sql/) is cut: ``core`` (the rows, the tables, the helpers,
``MemoryCore``: open or closed, the lifecycle) and one module per group of Store methods,
combined below.
"""

from __future__ import annotations

from signoff.engine.store.memory.approvals import MemoryApprovals
from signoff.engine.store.memory.blobs import MemoryBlobs
from signoff.engine.store.memory.channels import MemoryChannels
from signoff.engine.store.memory.checkpoints import MemoryCheckpoints
from signoff.engine.store.memory.events import MemoryEvents
from signoff.engine.store.memory.flows import MemoryFlows
from signoff.engine.store.memory.groups import MemoryGroups
from signoff.engine.store.memory.jobs import MemoryJobs
from signoff.engine.store.memory.messages import MemoryMessages
from signoff.engine.store.memory.mutes import MemoryMutes
from signoff.engine.store.memory.retention import MemoryRetention
from signoff.engine.store.memory.secrets import MemorySecrets
from signoff.engine.store.memory.spans import MemorySpans
from signoff.engine.store.memory.standing import MemoryStanding
from signoff.engine.store.memory.users import MemoryUsers
from signoff.engine.store.memory.webhooks import MemoryWebhooks

__all__ = ["MemoryStore"]


class MemoryStore(
    MemoryChannels,  # before MemoryUsers, which it builds on
    MemoryUsers,
    MemorySecrets,
    MemoryGroups,
    MemoryWebhooks,
    MemoryMutes,
    MemoryStanding,
    MemoryFlows,
    MemoryApprovals,
    MemoryJobs,
    MemoryEvents,
    MemoryCheckpoints,
    MemoryMessages,
    MemorySpans,
    MemoryRetention,  # before MemoryBlobs, which it builds on
    MemoryBlobs,
):
    """The whole Store in Python dicts, for one process (see the module docstring)."""

    def __repr__(self) -> str:
        return "MemoryStore()"
