"""One-time decision links (DESIGN §14; docs/security.md, "Decision links").

A link ``{SIGNOFF_PUBLIC_URL}/d/{token}`` lets the one person it was sent to decide one request
without signing in. The token is 256 random bits (``secrets.token_urlsafe(32)``); the store keeps
only its SHA-256, so a copy of the database decides nothing. A link is bound to one request of
one run and one approver, valid until the request's deadline and never longer than
SIGNOFF_LINK_TTL_SECONDS, and used once (Store.use_link, a conditional write). Opening it (GET,
HEAD) never decides: mail scanners and link previews open links; the decision is the POST of
the page it shows, carrying that page's form token (``csrf``, random per link).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta

from signoff.engine.decisions import deadline
from signoff.engine.models import DecisionLink, PendingRequest, as_utc
from signoff.engine.store.base import Store

TOKEN_BYTES = 32  # 256 bits
# what a token looks like (token_urlsafe of 32 bytes: 43 characters); anything else is refused
# before the store is asked
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def well_formed(token: str) -> bool:
    return bool(_TOKEN.fullmatch(token))


def link_url(base_url: str, token: str, action_id: str | None = None) -> str:
    """The link (with ``action_id`` preselected on its page)."""
    from urllib.parse import urlencode

    url = f"{base_url.rstrip('/')}/d/{token}"
    return url + ("?" + urlencode({"action": action_id}) if action_id else "")


def expiry(pending: PendingRequest, now: datetime, ttl_seconds: float) -> datetime:
    """When a link minted ``now`` for ``pending`` stops working: the request's deadline, at
    most ``ttl_seconds`` from now."""
    latest = as_utc(now) + timedelta(seconds=ttl_seconds)
    due = deadline(pending)
    return min(latest, due) if due is not None else latest


async def mint(store: Store, *, job_id: str, pending: PendingRequest, user_id: str, channel: str, now: datetime,
               ttl_seconds: float) -> str:
    """A new link for ``user_id`` to decide ``pending``; returns the token (never stored)."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    await store.create_link(DecisionLink(
        token_hash=token_hash(token), job_id=job_id, request_id=pending.request_id, user_id=user_id, channel=channel,
        csrf=secrets.token_urlsafe(24), created_at=now, expires_at=expiry(pending, now, ttl_seconds)))
    return token
