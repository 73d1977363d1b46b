"""What every SQL method stands on: the transaction interface (:class:`Tx`), the hooks a
backend provides (transactions, value encoding, the migration lock), and the lifecycle that
is the same on both databases (``setup`` with its migrations, ``schema_version``, ``ping``).

The method groups (users.py, flows.py, jobs.py, ...) subclass :class:`SQLCore`, so each of
them is written against these hooks only and never against a driver.
"""

from __future__ import annotations

import abc
import zlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from signoff.engine.models import utcnow
from signoff.engine.store.base import Store, StoreError
from signoff.engine.store.sql import schema
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLCore", "Tx", "USAGE_SHARDS", "usage_shard"]

USAGE_SHARDS = 16

T = TypeVar("T")


def usage_shard(key: str) -> int:
    """The usage row (of USAGE_SHARDS per user) that a write keyed ``key`` counts in."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % USAGE_SHARDS


class Tx(abc.ABC):
    """One transaction (write) or one connection (read), as the shared SQL sees it."""

    @abc.abstractmethod
    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; returns the number of rows it changed."""

    @abc.abstractmethod
    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abc.abstractmethod
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...


class SQLCore(Store):
    """The part of the SQL store that is not a group of Store methods. Subclasses provide
    transactions and value encoding."""

    dialect: str = ""
    ddl_types: dict[str, str] = {}

    # ---- what a backend provides

    @abc.abstractmethod
    def _tx(self, *, write: bool) -> AbstractAsyncContextManager[Tx]:
        """A transaction that takes the write lock up front (write=True), or a read connection."""

    async def _write(self, body: Callable[[Tx], Awaitable[T]]) -> T:
        """``body(tx)`` in one write transaction; its result. The body awaits nothing but the
        statements of ``tx`` (and helpers that await only those): SQLite runs it whole on its
        writer's thread (sqlite.py), PostgreSQL as any transaction."""
        async with self._tx(write=True) as tx:
            return await body(tx)

    @abc.abstractmethod
    def _enc_json(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def _enc_json_text(self, value: Any, text: str) -> Any:
        """``value`` as ``_enc_json`` would give it, from ``text``: its JSON, made by the caller
        (a receipt's canonical JSON, hashed and signed as it is), stored as that text rather
        than encoded again."""

    @abc.abstractmethod
    def _dec_json(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def _json_text(self, encoded: Any) -> str:
        """The JSON text a value ``_enc_json`` returned is stored as."""

    @abc.abstractmethod
    def _json_octets(self, encoded: Any) -> int:
        """The stored size in bytes of a value ``_enc_json`` returned (its JSON text, UTF-8)."""

    @abc.abstractmethod
    def _enc_dt(self, value: datetime | None) -> Any: ...

    @abc.abstractmethod
    def _dec_dt(self, value: Any) -> datetime | None: ...

    async def _migration_lock(self, tx: Tx) -> None:
        """Serialise concurrent setup() calls (SQLite: BEGIN IMMEDIATE already does)."""

    # ---- lifecycle

    async def setup(self) -> None:
        """Apply the migrations this database has not recorded, in one transaction (docs/store.md).

        ``schema.MIGRATIONS`` is read here, at call time, not bound at import: the migration
        tests stand in for an older or a later signoff by patching that one list."""
        migrations = schema.MIGRATIONS
        now = self._enc_dt(utcnow())
        async with self._tx(write=True) as tx:
            await self._migration_lock(tx)
            await tx.execute(schema.MIGRATIONS_TABLE.format(**self.ddl_types))
            row = await tx.fetchone(Q.migrations_version)
            current = int(row["version"] or 0) if row else 0
            if current > len(migrations):
                raise StoreError(
                    f"The database schema is at version {current}, newer than this signoff knows "
                    f"({len(migrations)}): upgrade signoff before using this database."
                )
            for version in range(current + 1, len(migrations) + 1):
                for statement in migrations[version - 1]:
                    await tx.execute(statement.format(**self.ddl_types))
                await tx.execute(Q.record_migration, (version, now))

    # ---- stored bytes per user (Store.stored_bytes): a usage row is changed in the transaction of
    # the write it counts. A user's count is spread over USAGE_SHARDS rows, the shard chosen by
    # what is written (its job, flow or key), so that one user's concurrent runs do not queue on
    # one row until they commit; the count is their sum. A transaction changes one usage row per
    # user (one shard: its key's), users in order, after (or, for the events of one job, among)
    # the rows of that job: two transactions never wait on each other's usage rows in a cycle.

    async def _charge(self, tx: Tx, user_id: str | None, n: int, key: str) -> None:
        """Count ``n`` bytes (negative: give back) to the user, in the shard of ``key``."""
        if n and user_id is not None:
            await tx.execute(Q.charge_user, (user_id, usage_shard(key), n))

    async def _charge_job(self, tx: Tx, job_id: str | None, n: int) -> None:
        """Count ``n`` bytes to the user whose job it is (nobody's when there is no such job)."""
        if n and job_id is not None:
            await tx.execute(Q.charge_job, (usage_shard(job_id), n, job_id))

    async def _job_user(self, tx: Tx, job_id: str | None) -> str | None:
        if job_id is None:
            return None
        row = await tx.fetchone(Q.job_user, (job_id,))
        return row["user_id"] if row else None

    async def _refund(self, tx: Tx, rows: Sequence[dict[str, Any]], key: str) -> None:
        """Give back what deleted rows (``charged_to``, ``size``) had counted, one write per user
        (users in order, the shard of ``key``)."""
        back: dict[str, int] = {}
        for row in rows:
            if row["charged_to"] is not None:
                back[row["charged_to"]] = back.get(row["charged_to"], 0) + int(row["size"])
        for user_id in sorted(back):
            await self._charge(tx, user_id, -back[user_id], key)

    async def stored_bytes(self, user_id: str) -> int:
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.stored_bytes, (user_id,))  # its USAGE_SHARDS rows at most
        return int(row["bytes"] or 0) if row else 0

    async def schema_version(self) -> int:
        """The schema version recorded by setup() (0 before the first setup())."""
        async with self._tx(write=True) as tx:
            await tx.execute(schema.MIGRATIONS_TABLE.format(**self.ddl_types))
            row = await tx.fetchone(Q.migrations_version)
        return int(row["version"] or 0) if row else 0

    async def ping(self) -> None:
        async with self._tx(write=False) as tx:
            await tx.fetchone(Q.ping)
