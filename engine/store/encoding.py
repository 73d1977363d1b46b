"""How values are kept, the same for every backend: JSON text without NaN, UTC timestamps,
hashed API keys, secrets' ciphertext as bytes, lists of names, approver references, a webhook
delivery attempt as its log keeps it.

The SQL backends and the in-memory store both encode through these, so a document, a
timestamp or a key that one backend accepts and returns is accepted and returned the same
way by the others (docs/store.md, "Value encoding").
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from datetime import date, datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel

from signoff.engine.models import DeliveryAttempt, WebhookDelivery, as_utc
from signoff.engine.store.base import StoreError

__all__ = ["ApproverRef", "approver_ref", "as_utc", "ciphertext_bytes", "delivery_logged", "dumps", "hash_api_key",
           "octets", "unique_strings"]


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


def octets(text: str | None) -> int:
    """The bytes a stored text takes (UTF-8), what Store.stored_bytes counts; None is 0."""
    if text is None:
        return 0
    return len(text.encode("utf-8", "surrogatepass"))



def delivery_logged(attempt: DeliveryAttempt, at: datetime) -> WebhookDelivery:
    """A delivery attempt as Store.log_deliveries keeps it: a new id, logged ``at``."""
    return WebhookDelivery(id=str(uuid.uuid4()), webhook_id=attempt.webhook_id, event=attempt.event,
                           job_id=attempt.job_id, seq=int(attempt.seq), attempt=int(attempt.attempt),
                           status_code=int(attempt.status_code) if attempt.status_code is not None else None,
                           error=attempt.error, delivered=bool(attempt.delivered), at=at)


def unique_strings(values: Iterable[str], what: str) -> list[str]:
    """A collection of strings (user ids, event names, references), each once, in the order
    given. A lone str is refused (TypeError): iterating it would give its characters, and a
    caller that meant one id would write one per letter."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a list of strings, not one {type(values).__name__}.")
    out: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{what} must be strings, not {type(value).__name__}.")
        out[value] = None
    return list(out)


ApproverRef = tuple[str | None, str | None, str | None]
"""A parsed approver reference: (user_id, None, None) or (None, group owner_id, group name)."""


def approver_ref(ref: str) -> ApproverRef:
    """Parse ``user:<user_id>`` or ``group:<owner_id>/<name>`` (split at the first "/": owner
    ids are user ids, which have none; the name may hold any character). The stores match a
    group reference by (owner_id, name), never by its text, so no group can answer for another
    owner's. Anything else is a caller's bug: ValueError."""
    if isinstance(ref, str):
        if ref.startswith("user:") and len(ref) > len("user:"):
            return ref[len("user:"):], None, None
        if ref.startswith("group:"):
            owner_id, slash, name = ref[len("group:"):].partition("/")
            if owner_id and slash:
                return None, owner_id, name
    raise ValueError(f"An approver reference is 'user:<user_id>' or 'group:<owner_id>/<name>', not {ref!r}.")
