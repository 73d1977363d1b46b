"""How values are kept, the same for every backend: JSON text without NaN, UTC timestamps,
hashed API keys, secrets' ciphertext as bytes.

The SQL backends and the in-memory store both encode through these, so a document, a
timestamp or a key that one backend accepts and returns is accepted and returned the same
way by the others (docs/store.md, "Value encoding").
"""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel

from signoff.engine.store.base import StoreError

__all__ = ["as_utc", "ciphertext_bytes", "dumps", "hash_api_key"]


def hash_api_key(key: str) -> str:
    """API keys are random and high-entropy, so one SHA-256 is enough (no salt/KDF needed)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def ciphertext_bytes(value: Any) -> bytes:
    """A secret's ciphertext as stored: bytes (a bytearray or memoryview is copied to bytes).
    Anything else is refused, a str above all (most likely a value nobody encrypted): TypeError,
    a caller's bug that no retry fixes, rather than the retryable StoreError."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"A secret's ciphertext must be bytes, not {type(value).__name__}.")
    return bytes(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """JSON text as stored: no NaN/Infinity (PostgreSQL's json refuses them), unicode kept."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"value is not JSON-serialisable: {exc}") from exc


def as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        # A naive datetime in signoff is always UTC by convention.
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)

