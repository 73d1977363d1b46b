"""The durable store (see base.py). ``open_store(url)`` picks the backend by URL scheme.

    store = open_store(settings.resolved_database_url)
    await store.setup()          # explicit; idempotent; nothing migrates on import
    ...
    await store.close()

URLs:
- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``; query options
  ``synchronous=full|normal|extra`` (default full) and ``busy_timeout_ms`` (default 30000).
- ``postgresql://user@host:port/db`` (or ``postgres://``); libpq parameters pass through.
- ``memory://``: a new, empty in-memory store (engine/store/memory.py) for this process alone,
  not durable: for tests and ``signoff run``, never for the API and the worker, which are
  separate processes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from signoff.engine.store.base import (
    CheckpointStore,
    HistoryStore,
    Store,
    StoreConflict,
    StoreError,
    StoreUnavailable,
)

__all__ = ["CheckpointStore", "HistoryStore", "Store", "StoreConflict", "StoreError", "StoreUnavailable", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """A store for ``url`` (not yet set up: the caller awaits ``store.setup()``).

    ``options`` go to the backend's constructor (e.g. ``max_size`` of the PostgreSQL pool)."""
    if url.startswith("sqlite:"):
        from signoff.engine.store.sqlite import SQLiteStore

        if not url.startswith("sqlite:///"):
            raise ValueError(
                f"Unsupported SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        rest = url[len("sqlite:///") :]
        path, _, query = rest.partition("?")
        kwargs: dict[str, Any] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name == "synchronous":
                kwargs["synchronous"] = value
            elif name == "busy_timeout_ms":
                kwargs["busy_timeout_ms"] = int(value)
            else:
                raise ValueError(f"Unknown SQLite URL option {name!r}: use synchronous or busy_timeout_ms")
        kwargs.update(options)
        return SQLiteStore(unquote(path), **kwargs)
    scheme = urlsplit(url).scheme
    if scheme in ("postgresql", "postgres"):
        from signoff.engine.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    if scheme == "memory":
        from signoff.engine.store.memory import MemoryStore

        if url != "memory://":
            raise ValueError(f"Unsupported memory URL {url!r}: use memory:// (each store is new and empty)")
        return MemoryStore(**options)
    raise ValueError(f"Unsupported database URL {url!r}: use sqlite:///path.db, postgresql://... or memory://")
