"""The SQL that SQLite and PostgreSQL share.

Both backends implement :class:`engine.store.base.Store` through :class:`SQLStore`: every
method is written once here against a tiny transaction interface (:class:`Tx`), and the public
classes (:mod:`engine.store.sqlite`, :mod:`engine.store.postgres`) only say how to open a
transaction and how values are encoded. Queries use ``?`` placeholders; the PostgreSQL backend
rewrites them to ``%s`` once per query.

Correctness rests on the database, never on the process: every claim is one conditional
UPDATE, the per-job event seq is a counter row incremented in the same transaction as the
event insert, and the idempotency key is a unique index on (user_id, idempotency_key). This
holds across processes (API and worker) and, on PostgreSQL, across replicas.

Modules: ``schema`` (the append-only ``MIGRATIONS``), ``queries`` (the named queries ``Q``),
``core`` (``Tx``, and ``SQLCore``: the backend's hooks, setup and migrations, ping), and one
module per group of Store methods, combined below (``approvals`` builds on ``jobs``, which
builds on ``events``; ``retention`` deletes an ended run and all of it).
"""

from __future__ import annotations

from signoff.engine.store.sql.approvals import SQLApprovals
from signoff.engine.store.sql.blobs import SQLBlobs
from signoff.engine.store.sql.channels import SQLChannels
from signoff.engine.store.sql.checkpoints import SQLCheckpoints
from signoff.engine.store.sql.core import Tx
from signoff.engine.store.sql.flows import SQLFlows
from signoff.engine.store.sql.groups import SQLGroups
from signoff.engine.store.sql.jobs import SQLJobs
from signoff.engine.store.sql.messages import SQLMessages
from signoff.engine.store.sql.mutes import SQLMutes
from signoff.engine.store.sql.retention import SQLRetention
from signoff.engine.store.sql.secrets import SQLSecrets
from signoff.engine.store.sql.spans import SQLSpans
from signoff.engine.store.sql.standing import SQLStanding
from signoff.engine.store.sql.users import SQLUsers
from signoff.engine.store.sql.webhooks import SQLWebhooks

__all__ = ["SQLStore", "Tx"]


class SQLStore(
    SQLChannels,  # before SQLUsers, which it builds on
    SQLUsers,
    SQLSecrets,
    SQLGroups,
    SQLWebhooks,
    SQLMutes,
    SQLStanding,
    SQLFlows,
    SQLApprovals,
    SQLJobs,
    SQLCheckpoints,
    SQLMessages,
    SQLSpans,
    SQLBlobs,
    SQLRetention,
):
    """Every Store method, written once. Subclasses provide transactions and value encoding."""
