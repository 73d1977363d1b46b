"""SQLite backend: the embedded default, one crash-safe file shared by the API and the worker.

Driver: the standard library's ``sqlite3``, every call run off the event loop on threads this
store owns (see docs/store.md for why not aiosqlite):

- one **writer** connection on a single dedicated thread. Writes in this process queue on a
  lock taken in turns per user (``FairGate(1)``) and each is one ``BEGIN IMMEDIATE … COMMIT``
  transaction, so the write lock is taken up front (no SQLITE_BUSY on a read→write upgrade).
  Writers in *other* processes (the API and the worker are separate processes) wait on
  SQLite's file lock through ``busy_timeout``. The hot write methods run their whole
  transaction on that thread in one hop (``_write``): the writer is held for SQLite's work,
  not for the event loop between statements (docs/store.md, "The writer's hold").
- a small pool of **reader** connections (WAL lets readers run while a writer commits).

PRAGMAs on every connection: ``journal_mode=WAL``, ``busy_timeout`` (30 s by default),
``synchronous=FULL`` (default; see docs/store.md: NORMAL would already survive ``kill -9``
of the process, FULL also survives a power cut or an OS crash, which a human's decision
deserves). Override with ``sqlite:///path?synchronous=normal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from signoff.engine.aio import to_the_end
from signoff.engine.fairgate import FairGate, current_user
from signoff.engine.models import EventNote
from signoff.engine.store.base import StoreConflict, StoreError, StoreUnavailable
from signoff.engine.store.counters import HOLD, count
from signoff.engine.store.encoding import as_utc, dumps, octets
from signoff.engine.store.sql import SQLStore, Tx
from signoff.engine.store.sql.queries import Q

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def _wrap(exc: sqlite3.Error) -> StoreError:
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreConflict(str(exc))
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc)):
        # another process held the write lock past busy_timeout: the same call may be sent again
        return StoreUnavailable(f"SQLite is busy: {exc}")
    return StoreError(f"SQLite: {exc}")


def _rows(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description or ()]
    return [dict(zip(names, r)) for r in cur.fetchall()]


class _SQLiteTx(Tx):
    """Statements of one transaction, each run on the connection's thread(s)."""

    def __init__(
        self, acquire: Callable[[], sqlite3.Connection], executor: ThreadPoolExecutor, begin: str | None
    ) -> None:
        self._acquire = acquire  # runs on the store thread, with the first statement (one hop less)
        self.conn: sqlite3.Connection | None = None
        self._executor = executor
        self._begin = begin  # issued together with the first statement
        self.open = False
        self.told = False  # an event was appended: this process's tails look as soon as it commits
        self.running: Future[Any] | None = None  # the statement a store thread may still be running
        self.began = 0.0  # when BEGIN ran (perf_counter, on the store thread): the writer's hold
        self.work = 0.0  # of it, the time in SQLite's own calls

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        count("statements")

        def run() -> T:
            try:
                if self.conn is None:
                    self.conn = self._acquire()
                start = time.perf_counter()
                if self._begin and not self.open:
                    self.conn.execute(self._begin)
                    self.open = True
                    self.began = start
                try:
                    return fn(self.conn)
                finally:
                    self.work += time.perf_counter() - start
            except sqlite3.Error as exc:
                raise _wrap(exc) from exc

        # A task cancelled while it awaits this does not stop the thread: ``running`` lets the
        # connection's owner wait for the statement before anyone else uses the connection
        # (two threads in one sqlite3 connection, or one closing it under the other, crash).
        try:
            self.running = self._executor.submit(run)
        except RuntimeError as exc:  # the executor was shut down: the store closed meanwhile
            raise StoreError("This store is closed.") from exc
        return await asyncio.wrap_future(self.running)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await self._call(lambda c: c.execute(sql, tuple(params)).rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._call(lambda c: c.executemany(sql, [tuple(r) for r in rows]))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        def run(c: sqlite3.Connection) -> dict[str, Any] | None:
            rows = _rows(c.execute(sql, tuple(params)))
            return rows[0] if rows else None

        return await self._call(run)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return await self._call(lambda c: _rows(c.execute(sql, tuple(params))))

    async def finish(self, commit: bool) -> None:
        if self.running is None:  # no statement was sent: no transaction was begun
            return

        def run() -> None:
            # Looked at on the connection's thread, after every statement sent before: a
            # statement cancelled while it waited for the thread still begins the transaction
            # when it runs, and it must be ended here (else the next write's BEGIN finds it open).
            conn = self.conn
            if not self.open or conn is None:
                return
            start = time.perf_counter()
            try:
                if commit:
                    try:
                        conn.execute("COMMIT")
                    except sqlite3.Error as exc:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise _wrap(exc) from exc
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                end = time.perf_counter()
                HOLD.observe(end - self.began, self.work + end - start)

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, run)
        finally:
            self.open = False


class _WriterTx(Tx):
    """The statements of a transaction that runs whole on the writer's thread (SQLiteStore._write):
    each runs at once on that thread, so a body that awaits only these never suspends."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.told = False
        self.work = 0.0

    def _run(self, fn: Callable[[sqlite3.Connection], T], *, counted: bool = True) -> T:
        if counted:  # BEGIN and COMMIT are not (as in _SQLiteTx: the statements a body sends)
            count("statements")
        start = time.perf_counter()
        try:
            return fn(self.conn)
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc
        finally:
            self.work += time.perf_counter() - start

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._run(lambda c: c.execute(sql, tuple(params)).rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._run(lambda c: c.executemany(sql, [tuple(r) for r in rows]))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self._run(lambda c: _rows(c.execute(sql, tuple(params))))
        return rows[0] if rows else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return self._run(lambda c: _rows(c.execute(sql, tuple(params))))


class SQLiteStore(SQLStore):
    """The durable store on one SQLite file (WAL). Safe to open from several processes."""

    dialect = "sqlite"
    ddl_types = {
        "json": "TEXT",
        "ts": "TEXT",
        "blob": "BLOB",
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "event_voter": "json_extract(data, '$.user')",  # an event's data fields, read by a migration
        "event_decider": "json_extract(data, '$.decided_by')",
        "octets": "length",  # of a BLOB: its bytes (of TEXT it would count characters)
        "octet_text": "BLOB",
        "blob_job": "substr(key, 6, instr(substr(key, 6), '/') - 1)",  # runs/<job id>/...
        "pending_kind": "COALESCE(json_extract(pending, '$.kind'), 'node_input')",  # a job's pending request
        "pending_names": "(COALESCE(json_array_length(pending, '$.approvers'), 0) > 0 "
                         "OR COALESCE(json_array_length(pending, '$.approver_refs'), 0) > 0)",
    }

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        readers: int = 4,
    ) -> None:
        path = str(path)
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise ValueError(
                "SQLiteStore needs a file (the API and the worker share it): "
                "use a temporary file, e.g. sqlite:///tmp/signoff-test.db"
            )
        synchronous = synchronous.upper()
        if synchronous not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNC_MODES)}, not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.busy_timeout_ms = int(busy_timeout_ms)
        self._writer_exec = ThreadPoolExecutor(1, thread_name_prefix="signoff-sqlite-writer")
        self._reader_exec = ThreadPoolExecutor(max(1, readers), thread_name_prefix="signoff-sqlite-reader")
        self._writer: sqlite3.Connection | None = None
        self._idle_readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # the process's writes, one at a time, in turns per user (see _tx)
        self._write_lock = FairGate(1)
        self._closed = False
        self._tail_wakes: set[asyncio.Event] = set()  # one per tail of this store object

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ---- connections (always called on a store thread)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(self.path),
            isolation_level=None,  # autocommit; transactions are explicit BEGIN IMMEDIATE/COMMIT
            check_same_thread=False,  # a reader may be used by any thread of the reader pool, one at a time
            timeout=self.busy_timeout_ms / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"SQLite could not switch {self.path} to WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise _wrap(exc) from exc
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _writer_conn(self) -> sqlite3.Connection:
        if self._writer is None:
            self._writer = self._connect()
        return self._writer

    def _take_reader(self) -> sqlite3.Connection:
        try:
            return self._idle_readers.get_nowait()
        except queue.Empty:
            return self._connect()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("This store is closed.")

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[Tx]:
        self._check_open()
        if write:
            # One writer: the process's write transactions wait here, in turns per user (the
            # user whose work the task does, engine/fairgate.py), not first come, first served.
            # The writer is the service's narrowest queue under load (on a busy 2-core `signoff
            # dev` every write held it ~8 ms for ~1 ms of SQLite's work, and writes waited ~200 ms
            # each: docs/security.md, "Where an honest round waits"; _write holds it for less):
            # in one queue a user whose run sends many writes at
            # once (a webhook delivery per hook, the spans and messages of a run at its output
            # budget) put every other user's write behind them all; in turns, another user's
            # write waits for at most one write of each user with writes waiting.
            async with self._write_lock.hold(current_user()):
                tx = _SQLiteTx(self._writer_conn, self._writer_exec, "BEGIN IMMEDIATE")
                count("commit")
                # the ROLLBACK or COMMIT runs to its end even when the task is cancelled meanwhile,
                # before the writer is passed on: cancelling the wait alone once took the COMMIT's
                # job off the writer thread's queue, and the next write's BEGIN found the
                # transaction still open ("cannot start a transaction within a transaction", CI)
                try:
                    yield tx
                except BaseException:
                    await to_the_end(tx.finish(commit=False))
                    raise
                await to_the_end(tx.finish(commit=True))
                if tx.told:
                    for wake in self._tail_wakes:
                        wake.set()
        else:
            tx = _SQLiteTx(self._take_reader, self._reader_exec, None)
            count("read")
            try:
                yield tx
            finally:
                self._give_back(tx)

    async def _write(self, body: Callable[[Tx], Awaitable[T]]) -> T:
        """``body`` in one write transaction run whole on the writer's thread, in one hop: BEGIN
        IMMEDIATE, the body's statements and the COMMIT, with no return to the event loop in
        between (a transaction of ``_tx`` hops to the thread and back per statement, and under
        load each hop back waits for the loop: docs/store.md, "The writer's hold"). The body
        awaits nothing but its transaction's statements (they run at once there); one that
        awaits anything else is rolled back and raises RuntimeError."""
        self._check_open()
        async with self._write_lock.hold(current_user()):  # in turns per user, as _tx
            count("commit")
            tx: _WriterTx | None = None
            cancelled = threading.Event()  # the caller was cancelled: roll back if not yet committing

            def run() -> T:
                nonlocal tx
                conn = self._writer_conn()
                tx = _WriterTx(conn)
                start = time.perf_counter()
                try:
                    tx._run(lambda c: c.execute("BEGIN IMMEDIATE"), counted=False)
                    coro = body(tx)
                    try:
                        waited = coro.send(None)
                    except StopIteration as done:
                        result: T = done.value
                    else:
                        coro.close()
                        raise RuntimeError(f"A write transaction's body awaited {waited!r}, not a statement")
                    if cancelled.is_set():  # as a transaction of _tx cancelled before its COMMIT
                        raise asyncio.CancelledError
                    tx._run(lambda c: c.execute("COMMIT"), counted=False)
                    return result
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
                finally:
                    HOLD.observe(time.perf_counter() - start, tx.work)

            try:
                # the caller's context: the tally of what a task sends (counters.py) counts it
                running = self._writer_exec.submit(contextvars.copy_context().run, run)
            except RuntimeError as exc:  # the executor was shut down: the store closed meanwhile
                raise StoreError("This store is closed.") from exc
            done = asyncio.wrap_future(running)
            try:
                result = await asyncio.shield(done)
            except asyncio.CancelledError:
                # the thread runs the body to its end, then rolls back (or commits, when the cancel
                # came once the COMMIT had begun); the writer is not handed on before it has, and
                # the caller is told cancelled either way
                cancelled.set()
                while not done.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(done)
                raise
            if tx is not None and tx.told:
                for wake in self._tail_wakes:
                    wake.set()
            return result

    def _give_back(self, tx: _SQLiteTx) -> None:
        """A reader goes back to the pool once no thread runs a statement on it: a read cancelled
        mid-statement (a closed stream's tail) hands it back when that statement ends."""
        def give(_: object = None) -> None:
            if tx.conn is not None:  # set on the store thread by the first statement
                self._idle_readers.put(tx.conn)

        running = tx.running
        if running is None or running.done() or running.cancel():
            give()
        else:
            running.add_done_callback(give)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        async with self._write_lock.hold(""):
            pass  # let a running write finish
        # let the readers' statements end before their connections close (closing one under a
        # running statement crashes the process); nothing new starts: the store says closed
        await asyncio.get_running_loop().run_in_executor(None, lambda: self._reader_exec.shutdown(wait=True))

        def close_all() -> None:
            with self._all_lock:
                conns, self._all = self._all, []
            for conn in conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass

        await asyncio.get_running_loop().run_in_executor(self._writer_exec, close_all)
        self._writer_exec.shutdown(wait=True)

    # ---- the tail (Store.tail_events)

    tail_poll_seconds = 0.05  # one indexed read per process, however many streams follow
    _TAIL_BATCH = 1000

    async def _tell(self, tx: Tx, job_id: str, seq: int, event: str) -> None:
        tx.told = True  # type: ignore[attr-defined]

    async def tail_events(self) -> AsyncIterator[list[EventNote] | None]:
        """The events table by rowid: SQLite commits one writer at a time, so rowids commit in
        order and ``rowid > cursor`` misses nothing, but one case: rowids are reused after the
        newest rows are deleted (a user's or a flow's runs deleted), which a cursor past the
        table's top shows; then the tail says it may have missed some (None) and starts again.
        It reads every ``tail_poll_seconds`` (other processes' appends), and at once after an
        append of this store object commits (``signoff dev`` runs the worker and the API on one)."""
        async with self._tx(write=False) as tx:
            row = await tx.fetchone(Q.tail_top)
        pos = int(row["pos"]) if row else 0
        wake = asyncio.Event()
        self._tail_wakes.add(wake)
        checks = 0
        try:
            yield []
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.tail_poll_seconds)
                wake.clear()
                top = None
                async with self._tx(write=False) as tx:
                    rows = await tx.fetchall(Q.tail_after, (pos, self._TAIL_BATCH))
                    checks += 1
                    if not rows and checks % 20 == 0:  # about once a second while nothing comes
                        top = await tx.fetchone(Q.tail_top)
                if top is not None and int(top["pos"]) < pos:
                    pos = int(top["pos"])
                    yield None
                elif rows:
                    pos = int(rows[-1]["pos"])
                    yield [EventNote(r["job_id"], int(r["seq"]), r["event"]) for r in rows]
        finally:
            self._tail_wakes.discard(wake)

    # ---- value encoding: JSON as text, timestamps as fixed-width ISO-8601 UTC text (sortable)

    def _enc_json(self, value: Any) -> Any:
        return dumps(value)

    def _enc_json_text(self, value: Any, text: str) -> Any:
        return text

    def _json_text(self, encoded: Any) -> str:
        return encoded

    def _json_octets(self, encoded: Any) -> int:
        return octets(encoded)

    def _dec_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    def _enc_dt(self, value: datetime | None) -> Any:
        if value is None:
            return None
        return as_utc(value).isoformat(timespec="microseconds")

    def _dec_dt(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return as_utc(value)
        return as_utc(datetime.fromisoformat(value))
