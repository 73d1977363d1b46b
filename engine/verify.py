"""Verified contacts (docs/channels.md, "Verified contacts"; docs/security.md).

A contact a person sets for themselves (``PATCH /api/v1/users/me``) is pending until it is shown
to be theirs; nothing (no request, no decision link, no Slack message) is sent to a pending
contact, and a Slack press from a pending Slack id is not mapped to the user. An operator's
(``signoff users create/set``) is verified: the operator vouches.

- **Email**: a confirmation mail to the new address with a one-time link
  ``{SIGNOFF_PUBLIC_URL}/verify/{token}``: 256 random bits, only the SHA-256 stored, bound to the
  user and that address, valid for SIGNOFF_VERIFY_TTL_SECONDS, used once. Opening it (GET, HEAD)
  shows a page naming the account and never verifies (mail scanners open links); the page's
  POST, with its form token, verifies (api/pages/verify.py).
- **Slack**: a DM to the Slack id with a "This is me" button whose value is such a token; the
  press (signed by Slack, api/routes/slack.py) verifies only when the Slack user Slack vouches for
  is that very id.

Every confirmation is a row (Store.create_contact_token), and at most
SIGNOFF_VERIFY_MAX_PER_HOUR are made in an hour per user and per address (or Slack id), so the
confirmation itself cannot be turned into a flood at someone. Each is sent in the background,
retried with backoff, its attempts and outcome recorded on its row (``attempts``,
``delivered``, ``error``: its delivery log, the newest shown by ``GET /api/v1/users/me`` while the
contact is pending).
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import logging
import re
import secrets
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any

from signoff.engine import mail, slack
from signoff.engine.models import ContactToken, User, as_utc
from signoff.engine.store.base import Store

log = logging.getLogger(__name__)

TOKEN_BYTES = 32  # 256 bits
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
ACTION = "signoff-verify"  # the "This is me" button's action_id (a decision's are "signoff:<action>")
ATTEMPTS = 5  # sends of one confirmation, 1, 2, 4, 8 s apart
WINDOW = timedelta(hours=1)  # what the re-send cap counts


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def well_formed(token: Any) -> bool:
    return isinstance(token, str) and bool(_TOKEN.fullmatch(token))


def verify_url(base_url: str, token: str) -> str:
    return f"{base_url.rstrip('/')}/verify/{token}"


def channels_enabled(settings: Any) -> set[str]:
    return ({"email"} if settings.email_enabled else set()) | ({"slack"} if settings.slack_enabled else set())


async def mint(store: Store, user: User, channel: str, settings: Any, now: datetime) -> tuple[ContactToken, str] | None:
    """A new confirmation of ``user``'s pending ``channel`` contact: (its row, the token), or None
    when the re-send cap is reached (nothing made)."""
    address = getattr(user, channel)
    assert address, "no contact to verify"
    token = secrets.token_urlsafe(TOKEN_BYTES)
    row = ContactToken(token_hash=token_hash(token), user_id=user.id, channel=channel, address=address,
                       csrf=secrets.token_urlsafe(24), created_at=now,
                       expires_at=as_utc(now) + timedelta(seconds=settings.verify_ttl_seconds))
    made = await store.create_contact_token(row, since=as_utc(now) - WINDOW, max_per_user=settings.verify_max_per_hour,
                                            max_per_address=settings.verify_max_per_hour)
    return (row, token) if made else None


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def message(*, user_name: str, url: str, expires_at: datetime, sender: str, to: str, now: datetime) -> EmailMessage:
    """The confirmation mail: who asked, the link, and that ignoring it sends nothing more."""
    msg = EmailMessage(policy=mail._POLICY)
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = mail.one_line(f"[signoff] Confirm your address for {mail.one_line(user_name, 80)}",
                                   mail.SUBJECT_CHARS)
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(
        f"The signoff user {user_name} gave {to} as where their requests reach them.\n\n"
        f"If that is you, confirm it (the page asks you to press a button; opening it changes nothing):\n"
        f"  {url}\n\nThe link works once, until {_when(expires_at)}.\n\n"
        "If it is not you, ignore this mail: nothing is sent to this address unless it is confirmed.\n")
    e = html.escape
    msg.add_alternative(
        "<!doctype html><html><body style=\"font-family:system-ui,sans-serif;color:#1f2328\">"
        f"<p>The signoff user <strong>{e(user_name)}</strong> gave {e(to)} as where their requests reach them.</p>"
        f"<p><a href=\"{e(url)}\" style=\"display:inline-block;padding:10px 18px;border-radius:6px;background:#1a7f37;"
        "color:#ffffff;text-decoration:none;font-weight:600\">It is me: confirm</a></p>"
        f"<p style=\"color:#57606a;font-size:13px\">The page asks you to press a button; opening it changes nothing. "
        f"The link works once, until {e(_when(expires_at))}.</p>"
        "<p style=\"color:#57606a;font-size:13px\">If it is not you, ignore this mail: nothing is sent to this "
        "address unless it is confirmed.</p></body></html>", subtype="html")
    return msg


def slack_blocks(user_name: str, token: str, expires_at: datetime) -> tuple[str, list[dict[str, Any]]]:
    """The Slack DM: who asked, and the "This is me" button (its value: the token)."""
    text = f"The signoff user {user_name} gave this Slack account as where their requests reach them."
    return text, [
        {"type": "section", "text": {"type": "mrkdwn", "text": slack.escape(
            f"The signoff user *{user_name}* gave this Slack account as where their requests reach them. If that is "
            f"you, press the button (until {_when(expires_at)}). If not, ignore this: nothing more is sent here.")}},
        {"type": "actions", "block_id": "signoff-verify", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "This is me"}, "style": "primary",
             "action_id": ACTION, "value": token}]},
    ]


async def deliver(store: Store, settings: Any, row: ContactToken, token: str, user_name: str,
                  *, pause: float = 1.0) -> bool:
    """Send the confirmation ``row`` (its token ``token``), up to ATTEMPTS times with backoff,
    each bounded by SIGNOFF_NOTIFY_TIMEOUT_SECONDS, recording the attempts and the outcome on
    its row; whether it was delivered."""
    error: str | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if row.channel == "email":
                assert settings.smtp_url is not None and settings.smtp_from is not None
                msg = message(user_name=user_name, url=verify_url(settings.link_base_url, token),
                              expires_at=row.expires_at, sender=settings.smtp_from, to=row.address,
                              now=row.created_at)
                await mail.send(mail.parse_smtp_url(settings.smtp_url), msg, sender=settings.smtp_from,
                                to=row.address, timeout=settings.notify_timeout_seconds)
            else:
                assert settings.slack_bot_token is not None
                text, blocks = slack_blocks(user_name, token, row.expires_at)
                client = slack.Slack(settings.slack_bot_token, settings.slack_api_url, settings.notify_timeout_seconds)
                await client.call("chat.postMessage", channel=row.address, text=text, blocks=blocks,
                                  unfurl_links=False)
        except (mail.MailFailed, slack.SlackFailed) as err:
            error = str(err)
            await store.finish_contact_token(row.token_hash, attempts=attempt, delivered=False, error=error)
            log.warning("the confirmation of %s's %s (attempt %s) failed: %s", row.user_id, row.channel, attempt, err)
            if attempt < ATTEMPTS:
                await asyncio.sleep(pause * 2 ** (attempt - 1))
            continue
        await store.finish_contact_token(row.token_hash, attempts=attempt, delivered=True, error=None)
        return True
    return False
