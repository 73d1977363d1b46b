"""The email channel (DESIGN §14): a request as a mail (text and HTML, no remote image), with one
button per action to the person's decision link, sent through the operator's SMTP server by
``aiosmtplib``.

Everything a flow's author wrote (flow name, prompt, the run's input, labels) is untrusted: the
subject is one line with every control character dropped, so no header can be added through it
(Python's email package refuses a line break in a header too); in the HTML every such text is
escaped. The mail names no other request and links to nothing but the person's own link.
"""

from __future__ import annotations

import asyncio
import email.policy
import html
import re
import ssl
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from urllib.parse import parse_qs, unquote, urlsplit

from signoff.engine.models import PendingRequest

SUBJECT_CHARS = 180  # a subject longer than this is cut (the first line of a prompt may be long)
PROMPT_CHARS = 4000  # the prompt as shown in a mail, at most
INPUT_CHARS = 1000  # the run's input as shown in a mail, at most
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0080-\u009f\u2028\u2029]")


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    username: str | None
    password: str | None
    implicit_tls: bool
    starttls: bool


def parse_smtp_url(url: str) -> SmtpServer:
    """SIGNOFF_SMTP_URL: ``smtp://[user:pass@]host[:port][?starttls=true]`` or ``smtps://...``
    (implicit TLS). ValueError says what is wrong, never echoing the URL (it holds a password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("SIGNOFF_SMTP_URL is not a URL (smtp://user:pass@host:port)") from None
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ValueError("SIGNOFF_SMTP_URL must be smtp://[user:pass@]host[:port] or smtps://... (implicit TLS)")
    query = {k.lower(): v for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"starttls"}
    if unknown:
        raise ValueError(f"SIGNOFF_SMTP_URL: unknown option(s) {', '.join(sorted(unknown))} (only starttls)")
    starttls = (query.get("starttls") or ["false"])[-1].lower()
    if starttls not in ("true", "false", "1", "0"):
        raise ValueError("SIGNOFF_SMTP_URL: starttls is true or false")
    tls = scheme == "smtps"
    if tls and starttls in ("true", "1"):
        raise ValueError("SIGNOFF_SMTP_URL: smtps:// is TLS from the start; starttls is for smtp://")
    return SmtpServer(host=parts.hostname, port=port or (465 if tls else 25),
                      username=unquote(parts.username) if parts.username else None,
                      password=unquote(parts.password) if parts.password else None,
                      implicit_tls=tls, starttls=starttls in ("true", "1"))


def one_line(text: str, limit: int) -> str:
    """``text`` as one header-safe line: control characters (CR, LF, tab, NUL...) dropped, spaces
    collapsed, cut to ``limit`` characters."""
    line = " ".join(_CONTROL.sub(" ", text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Asked:
    """What a mail about a request says (all of it from the run and its flow: untrusted text)."""

    flow_name: str
    owner_name: str
    pending: PendingRequest
    input_text: str
    page_url: str  # the person's link
    action_urls: list[tuple[str, str]]  # (label, link with that action preselected)
    expires_at: datetime
    deadline: datetime | None
    kind: str = "required"  # required | reminder | escalated


def subject(asked: Asked) -> str:
    prefix = {"reminder": "Reminder: ", "escalated": "Escalated: "}.get(asked.kind, "")
    text = f"[signoff] {prefix}{one_line(asked.flow_name, 80)}: {one_line(_first_line(asked.pending.prompt), 120)}"
    return one_line(text, SUBJECT_CHARS)


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def text_body(asked: Asked, to: str) -> str:
    lines = [f"{asked.owner_name}'s run of {asked.flow_name} needs your decision.", "",
             _cut(asked.pending.prompt, PROMPT_CHARS), ""]
    if asked.input_text:
        lines += [f"The run's input: {_cut(asked.input_text, INPUT_CHARS)}", ""]
    if asked.deadline is not None:
        lines += [f"Deadline: {_when(asked.deadline)}", ""]
    if asked.pending.required_approvals > 1:
        lines += [f"Approvals needed: {asked.pending.required_approvals}", ""]
    lines += ["Decide (each opens a page where you confirm; nothing is decided by opening it):"]
    lines += [f"  {label}: {url}" for label, url in asked.action_urls]
    lines += ["", f"The request: {asked.page_url}", "",
              f"This link is for {to} alone: whoever has it can decide as you. It works once, until "
              f"{_when(asked.expires_at)}."]
    return "\n".join(lines) + "\n"


def html_body(asked: Asked, to: str) -> str:
    e = html.escape
    buttons = "".join(
        f'<a href="{e(url)}" style="display:inline-block;margin:0 8px 8px 0;padding:10px 18px;border-radius:6px;'
        f'background:{"#1a7f37" if i == 0 else "#57606a"};color:#ffffff;text-decoration:none;font-weight:600">'
        f"{e(label)}</a>" for i, (label, url) in enumerate(asked.action_urls))
    prompt = "<br>".join(e(line) for line in _cut(asked.pending.prompt, PROMPT_CHARS).splitlines())
    rows = ""
    if asked.input_text:
        rows += f"<p style=\"color:#57606a\">The run's input: {e(_cut(asked.input_text, INPUT_CHARS))}</p>"
    if asked.deadline is not None:
        rows += f"<p style=\"color:#57606a\">Deadline: {e(_when(asked.deadline))}</p>"
    if asked.pending.required_approvals > 1:
        rows += f"<p style=\"color:#57606a\">Approvals needed: {asked.pending.required_approvals}</p>"
    return (
        "<!doctype html><html><body style=\"font-family:system-ui,sans-serif;color:#1f2328\">"
        f"<p>{e(asked.owner_name)}’s run of <strong>{e(asked.flow_name)}</strong> needs your decision.</p>"
        f"<blockquote style=\"margin:0 0 16px;padding:8px 12px;border-left:4px solid #d0d7de\">{prompt}</blockquote>"
        f"{rows}<p>{buttons}</p>"
        "<p style=\"color:#57606a;font-size:13px\">Each button opens a page where you confirm; nothing is decided "
        f"by opening it. <a href=\"{e(asked.page_url)}\">Open the request</a>.</p>"
        f"<p style=\"color:#57606a;font-size:13px\">This link is for {e(to)} alone: whoever has it can decide as "
        f"you. It works once, until {e(_when(asked.expires_at))}.</p>"
        "</body></html>")


# headers on one line up to RFC 5322's hard limit (the subject is at most SUBJECT_CHARS): folded at
# 78, Python's email package puts a long subject's first fold before its first word
_POLICY = email.policy.SMTP.clone(max_line_length=998)


def message(asked: Asked, *, sender: str, to: str, now: datetime) -> EmailMessage:
    msg = EmailMessage(policy=_POLICY)
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject(asked)
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(text_body(asked, to))
    msg.add_alternative(html_body(asked, to), subtype="html")
    return msg


def closing(*, flow_name: str, owner_name: str, outcome: str, sender: str, to: str, now: datetime,
            word: str = "answered") -> EmailMessage:
    """The note to someone who was mailed a request that has been answered (``word``; "closed":
    its run ended without an answer): how it ended (its link decides nothing any more)."""
    msg = EmailMessage(policy=_POLICY)
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = one_line(f"[signoff] {one_line(flow_name, 80)}: {one_line(word, 20)}", SUBJECT_CHARS)
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"
    text = (f"{owner_name}'s request in {flow_name} was {word}: {outcome}\n\n"
            "Nothing more to do; the link in the earlier mail decides nothing any more.\n")
    msg.set_content(text)
    e = html.escape
    msg.add_alternative(
        "<!doctype html><html><body style=\"font-family:system-ui,sans-serif;color:#1f2328\">"
        f"<p>{e(owner_name)}’s request in <strong>{e(flow_name)}</strong> was {e(word)}: {e(outcome)}</p>"
        "<p style=\"color:#57606a\">Nothing more to do; the link in the earlier mail decides nothing any more.</p>"
        "</body></html>", subtype="html")
    return msg


class MailFailed(Exception):
    """The SMTP server refused the mail, or could not be reached in time."""


async def send(server: SmtpServer, msg: EmailMessage, *, sender: str, to: str, timeout: float,
               tls_context: ssl.SSLContext | None = None) -> None:
    """Hand ``msg`` for ``to`` alone to the SMTP server, within ``timeout`` seconds in all;
    MailFailed otherwise (its message never holds the server's password)."""
    import aiosmtplib

    try:
        async with asyncio.timeout(timeout):
            # flattened here (headers unfolded up to _POLICY's limit); the envelope's one recipient is
            # the person's address, never read from the headers
            await aiosmtplib.send(msg.as_bytes(policy=_POLICY), sender=sender, recipients=[to],
                                  hostname=server.host, port=server.port, username=server.username,
                                  password=server.password, use_tls=server.implicit_tls, start_tls=server.starttls,
                                  timeout=timeout, tls_context=tls_context)
    except TimeoutError:
        raise MailFailed(f"the SMTP server {server.host}:{server.port} did not answer within {timeout:g} s") from None
    except (aiosmtplib.SMTPException, OSError) as err:
        text = str(err)
        if server.password:
            text = text.replace(server.password, "***")
        raise MailFailed(f"{type(err).__name__}: {text[:500]}") from None
