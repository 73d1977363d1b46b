"""A person's contacts (DESIGN §14): the email address and the Slack user id a request reaches
them at. Checked here once for every way they are set (``signoff users create/set``, ``PATCH
/api/v1/users/me``), because an address ends up in an SMTP envelope and a mail header: it is
bounded, one line, and of the plain ``local@domain`` form (no display name, no comment, no
second address), so nothing a person types can add a recipient or a header.
"""

from __future__ import annotations

import re

from signoff.engine.errors import InvalidContact

MAX_EMAIL_CHARS = 254  # RFC 5321's limit for a path
MAX_SLACK_CHARS = 32

# local@domain: the local part's dot-atom characters (RFC 5322, no quoted strings), a domain of
# dot-separated labels (letters, digits, hyphens; IDNs in their xn-- form)
_EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
# Slack's user ids: U or W and upper-case letters and digits
_SLACK = re.compile(r"[UW][A-Z0-9]{2,31}")

CONTACTS = ("email", "slack")


def check_email(value: str) -> str:
    """The address as stored (surrounding blanks dropped), or InvalidContact."""
    address = value.strip()
    if len(address) > MAX_EMAIL_CHARS:
        raise InvalidContact(f"An email address is at most {MAX_EMAIL_CHARS} characters", field="email")
    if not _EMAIL.fullmatch(address):
        raise InvalidContact("email must be one plain address, local@domain (no name, no spaces, no line breaks)",
                             field="email")
    return address


def check_slack(value: str) -> str:
    """The Slack user id as stored, or InvalidContact."""
    uid = value.strip()
    if len(uid) > MAX_SLACK_CHARS or not _SLACK.fullmatch(uid):
        raise InvalidContact("slack must be a Slack user id (U or W then capital letters and digits, e.g. "
                             "U024BE7LH; Slack: profile → ⋮ → Copy member ID)", field="slack")
    return uid


def checked(changes: dict[str, str | None]) -> dict[str, str | None]:
    """The contacts to set, each checked (``""`` or None clears it); an unknown key is
    InvalidContact."""
    out: dict[str, str | None] = {}
    for key, value in changes.items():
        if key not in CONTACTS:
            raise InvalidContact(f"Unknown contact {key!r}: one of {', '.join(CONTACTS)}", field=key)
        if value is None or not value.strip():
            out[key] = None
        else:
            out[key] = check_email(value) if key == "email" else check_slack(value)
    return out
