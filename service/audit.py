"""The oversight record as the API serves it (DESIGN §16, docs/audit.md): who may read which
receipts, a page of receipts as it is sent (each with its ``seq``: its place in its run's
chain, outside what was signed), the export's cursor."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from signoff.engine.errors import Forbidden, SignoffError
from signoff.engine.models import ReceiptRecord, User, as_utc
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service.access import valid_id, visible_job

__all__ = ["BadCursor", "check_flow_id", "check_operator", "cursor_of", "is_operator", "parse_cursor", "run_receipts", "sent", "window"]

class BadCursor(SignoffError):
    """The cursor is not one this API gave."""

    code = "INVALID_REQUEST"


def is_operator(settings: Settings, user: User) -> bool:
    """Whether ``user`` is named (by name or id) in SIGNOFF_OPERATORS."""
    named = settings.operator_list
    return user.id in named or user.name in named


def check_operator(settings: Settings, user: User) -> None:
    if not is_operator(settings, user):
        raise Forbidden("Only an operator (SIGNOFF_OPERATORS) may export every run's receipts; a run's own receipts "
                        "are at GET /api/v1/runs/{job_id}/receipts")


def check_flow_id(flow_id: str | None) -> None:
    """A flow filter that is not an id's shape matches no flow: refused (422) rather than sent
    to the database (PostgreSQL refuses a NUL in text)."""
    if flow_id is not None and not valid_id(flow_id):
        raise BadFilter("flow is not a flow id")


class BadFilter(SignoffError):
    """A filter of the export is not valid."""

    code = "INVALID_REQUEST"


def window(since: datetime, until: datetime | None) -> tuple[datetime, datetime | None]:
    """The export's window in UTC (a time without a zone is UTC); a time that has no UTC
    equivalent (year 1 at +14:00) is refused."""
    try:
        return as_utc(since), as_utc(until) if until is not None else None
    except (OverflowError, ValueError):
        raise BadFilter("since/until is out of range") from None


def sent(record: ReceiptRecord) -> dict[str, Any]:
    """A receipt as the API sends it: as signed, with its ``seq``."""
    return {**record.body, "seq": record.seq}


async def run_receipts(store: Store, user: User, job_id: str, *, after: int, limit: int) -> list[dict[str, Any]]:
    """The receipts of a run the caller may see (the rule of its events: service/access.py)."""
    await visible_job(store, user, job_id)
    return [sent(r) for r in await store.read_receipts(job_id, after_seq=after, limit=limit)]


def cursor_of(record: ReceiptRecord) -> str:
    """The cursor after ``record`` (opaque to callers: base64 of its (at, job id, seq))."""
    text = f"{record.at.isoformat()}|{record.seq}|{record.job_id}"
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")


def parse_cursor(cursor: str) -> tuple[datetime, str, int]:
    try:
        at, seq, job_id = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("utf-8").split("|", 2)
        parsed = (as_utc(datetime.fromisoformat(at)), job_id, int(seq))
    except (ValueError, UnicodeError, OverflowError, binascii.Error):
        raise BadCursor("cursor is not one this API gave (pass `next` of the previous page)") from None
    if not valid_id(job_id):
        raise BadCursor("cursor is not one this API gave (pass `next` of the previous page)")
    return parsed
