"""PostgreSQL backend: for several API and worker replicas.

Driver: psycopg 3 (native asyncio, server-side parameter binding, automatic prepared statements)
with ``psycopg_pool.AsyncConnectionPool``. Connections run in autocommit and every write is an
explicit ``BEGIN … COMMIT`` (``conn.transaction()``) at READ COMMITTED: a conditional UPDATE
that waits on a row lock re-checks its WHERE clause against the committed row, so of several
concurrent claims exactly one matches. The pool opens lazily on first use (or in setup()).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Json
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from signoff.engine.fairgate import FairGate, current_user
from signoff.engine.models import EventNote
from signoff.engine.store.base import StoreConflict, StoreError, StoreUnavailable
from signoff.engine.store.counters import count
from signoff.engine.store.encoding import as_utc, dumps, octets
from signoff.engine.store.sql import SQLStore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["PostgresStore"]

# Any constant: serialises concurrent setup() calls across processes.
_MIGRATION_LOCK_KEY = 0x5167_6E6F_6666  # "signoff"-ish

_converted: dict[str, str] = {}


def _pg(sql: str) -> str:
    """``?`` placeholders → ``%s`` (the shared SQL has no literal ``?`` or ``%``)."""
    out = _converted.get(sql)
    if out is None:
        out = _converted[sql] = sql.replace("%", "%%").replace("?", "%s")
    return out


TAIL_CHANNEL = "signoff_events"


_MAX_PAYLOAD = 7000

# A connection used this recently is handed out unchecked: a round trip saved on nearly every
# call. One idle longer (a server restart takes longer than this) is checked first.
CHECK_IDLE_SECONDS = 2.0


async def _check_if_idle(conn: psycopg.AsyncConnection[Any]) -> None:
    if time.monotonic() - getattr(conn, "_signoff_used_at", 0.0) > CHECK_IDLE_SECONDS:
        await AsyncConnectionPool.check_connection(conn)


def _note(payload: str) -> EventNote | None:
    """A notification's note; None for one too long to tell or not ours (anyone who may connect
    may NOTIFY on the channel): the tail says it missed some and the feed reads again."""
    try:
        job_id, seq, event = json.loads(payload)
        return EventNote(str(job_id), int(seq), str(event))
    except (ValueError, TypeError):
        return None


def _wrap(exc: Exception) -> StoreError:
    if isinstance(exc, psycopg.IntegrityError):
        return StoreConflict(str(exc))
    if isinstance(exc, (psycopg.OperationalError, PoolTimeout)) and not isinstance(exc, _NOT_OUTAGES):
        # the server is away (down, restarting, refusing, a connection cut): say so (503), retry
        return StoreUnavailable(f"PostgreSQL is not available: {exc}")
    return StoreError(f"PostgreSQL: {exc}")


# OperationalErrors that are about the statement, not the server's availability
_NOT_OUTAGES = (psycopg.errors.QueryCanceled, psycopg.errors.ProgramLimitExceeded, psycopg.errors.DiskFull,
                psycopg.errors.InsufficientResources)


class _PgTx(Tx):
    def __init__(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        count("statements")
        try:
            cur = await self._conn.execute(_pg(sql), tuple(params) if params else None)
        except psycopg.Error as exc:
            raise _wrap(exc) from exc
        return cur.rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        count("statements")
        try:
            async with self._conn.cursor() as cur:
                await cur.executemany(_pg(sql), [tuple(r) for r in rows])
        except psycopg.Error as exc:
            raise _wrap(exc) from exc

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        count("statements")
        try:
            cur = await self._conn.execute(_pg(sql), tuple(params) if params else None)
            return await cur.fetchone()
        except psycopg.Error as exc:
            raise _wrap(exc) from exc

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        count("statements")
        try:
            cur = await self._conn.execute(_pg(sql), tuple(params) if params else None)
            return await cur.fetchall()
        except psycopg.Error as exc:
            raise _wrap(exc) from exc


class PostgresStore(SQLStore):
    """The durable store on PostgreSQL through a psycopg 3 async connection pool."""

    dialect = "postgres"
    _receipt_in_update = True  # a receipt's INSERT in a WITH of its job row's UPDATE (sql/receipts.py)
    ddl_types = {
        # json (not jsonb): stored verbatim, so key order survives and \u0000 escapes are allowed
        "json": "JSON",
        "ts": "TIMESTAMPTZ",
        "blob": "BYTEA",
        "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "event_voter": "(data->>'user')",  # an event's data fields, read by a migration
        "event_decider": "(data->>'decided_by')",
        "octets": "octet_length",
        "octet_text": "TEXT",
        "blob_job": "split_part(key, '/', 2)",  # runs/<job id>/...
        "pending_kind": "COALESCE(pending->>'kind', 'node_input')",  # a job's pending request
        "pending_names": "(COALESCE(json_array_length(pending->'approvers'), 0) > 0 "
                         "OR COALESCE(json_array_length(pending->'approver_refs'), 0) > 0)",
    }

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 5.0) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"PostgresStore needs a postgresql:// URL, not {url!r}")
        self.url = url
        self._min_size = min_size
        self._max_size = max_size
        self._timeout = timeout
        self._pool: AsyncConnectionPool | None = None
        self._turns = FairGate(max_size)  # the pool's connections, in turns per user (_tx)
        self._open_lock = asyncio.Lock()
        self._closed = False
        self._tails: set[psycopg.AsyncConnection[Any]] = set()  # closed by close(): their tails raise

    def __repr__(self) -> str:
        return f"PostgresStore({self.url.rsplit('@', 1)[-1]!r})"

    async def _get_pool(self) -> AsyncConnectionPool:
        if self._closed:
            raise StoreError("This store is closed.")
        if self._pool is not None:
            return self._pool
        async with self._open_lock:
            if self._pool is None:
                pool = AsyncConnectionPool(
                    self.url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    timeout=self._timeout,
                    open=False,
                    kwargs={"autocommit": True, "row_factory": dict_row},
                    # a connection is checked as it is handed out: one the server dropped (a
                    # restart) is replaced, not used for a statement that would fail
                    check=_check_if_idle,
                    # give up reconnecting soon: the pool's backoff doubles (1, 2, 4, 8 s...), so a
                    # server back after an outage would wait for the next try; a connection given
                    # up on is tried again as soon as a caller asks for one
                    reconnect_timeout=2.0,
                    name="signoff-store",
                )
                try:
                    await pool.open(wait=True, timeout=self._timeout)
                except Exception as exc:
                    await pool.close()
                    raise StoreUnavailable(f"PostgreSQL is not reachable at {self!r}: {exc}") from exc
                self._pool = pool
        return self._pool

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[Tx]:
        """A connection of the pool, taken in turns per user (engine/fairgate.py): under load the
        pool is the queue every call waits in, reads too, and first come, first served a
        person's call waited behind every busy client's. The turn and the connection together
        are waited for at most the pool's timeout."""
        pool = await self._get_pool()
        deadline = time.monotonic() + self._timeout
        try:
            async with AsyncExitStack() as held:
                try:
                    async with asyncio.timeout(self._timeout):
                        await held.enter_async_context(self._turns.hold(current_user()))
                except TimeoutError:
                    raise StoreUnavailable(f"PostgreSQL is not available: no connection free within "
                                           f"{self._timeout:g} s") from None
                conn = await held.enter_async_context(
                    pool.connection(timeout=max(0.05, deadline - time.monotonic())))
                try:
                    count("commit" if write else "read")
                    if write:
                        async with conn.transaction():
                            yield _PgTx(conn)
                    else:
                        yield _PgTx(conn)
                finally:
                    conn._signoff_used_at = time.monotonic()  # type: ignore[attr-defined]
        except (psycopg.Error, PoolTimeout) as exc:  # commit/rollback or connection failures
            raise _wrap(exc) from exc

    # ---- the tail (Store.tail_events): NOTIFY from the appending transaction, delivered at its
    # commit, in commit order, to every listening connection of this database

    async def _tell(self, tx: Tx, job_id: str, seq: int, event: str) -> None:
        payload = json.dumps([job_id, seq, event], separators=(",", ":"))
        if len(payload.encode()) > _MAX_PAYLOAD:  # NOTIFY takes < 8000 bytes: "something happened"
            payload = ""
        await tx.execute(Q.notify_event, (payload,))

    async def tail_events(self) -> AsyncIterator[list[EventNote] | None]:
        """One connection of its own (not the pool's) that LISTENs. A notification missed while
        it was down cannot be had again: a new tail starts afresh (the feed reads again)."""
        if self._closed:
            raise StoreError("This store is closed.")
        try:
            conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise _wrap(exc) from exc
        self._tails.add(conn)
        try:
            await conn.execute(f"LISTEN {TAIL_CHANNEL}")
            yield []
            while True:
                # waits for the first; those that came with it (one packet) are in the batch too
                told = [_note(n.payload) async for n in conn.notifies(timeout=30.0, stop_after=1)]
                notes = [n for n in told if n is not None]
                if len(notes) < len(told):
                    yield None
                if notes:
                    yield notes
                elif told:
                    continue
                elif self._closed:
                    raise StoreError("This store is closed.")
                else:
                    await conn.execute("SELECT 1")  # 30 s quiet: the connection is still there
        except psycopg.Error as exc:
            if self._closed:
                raise StoreError("This store is closed.") from exc
            raise _wrap(exc) from exc
        finally:
            self._tails.discard(conn)
            await conn.close()

    async def _claim_lock(self, tx: Tx, key: str) -> None:
        # READ COMMITTED: two claims' SELECTs would both find nothing; one waits for the other here
        await tx.fetchone("SELECT pg_advisory_xact_lock(hashtextextended(CAST(? AS text), 0)) AS locked", (key,))

    async def _migration_lock(self, tx: Tx) -> None:
        await tx.fetchone("SELECT pg_advisory_xact_lock(?) AS locked", (_MIGRATION_LOCK_KEY,))

    async def close(self) -> None:
        self._closed = True
        for conn in list(self._tails):
            conn.pgconn.finish()  # the tail waiting on it wakes with an error (it closes its side)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # ---- value encoding: psycopg adapts datetimes and bytes natively

    def _enc_json(self, value: Any) -> Any:
        text = dumps(value)  # fail here, with a StoreError, rather than inside the driver
        return Json(value, dumps=lambda _: text)

    def _enc_json_text(self, value: Any, text: str) -> Any:
        return Json(value, dumps=lambda _: text)

    def _json_text(self, encoded: Any) -> str:
        return encoded.dumps(encoded.obj)  # the text kept by _enc_json

    def _json_octets(self, encoded: Any) -> int:
        return octets(encoded.dumps(encoded.obj)) if encoded is not None else 0  # the text kept above

    def _dec_json(self, value: Any) -> Any:
        return value  # psycopg parses json columns

    def _enc_dt(self, value: datetime | None) -> Any:
        return as_utc(value) if value is not None else None

    def _dec_dt(self, value: Any) -> datetime | None:
        return as_utc(value) if value is not None else None
