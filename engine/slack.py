"""The Slack channel (DESIGN §14): a request as a Block Kit message to the person (a DM by their
Slack user id), one button per action, and the message updated to the outcome; Slack's signed
interaction requests checked before anything else is read.

Slack's own client (``slack_sdk``'s ``WebClient``, its standard-library transport: no aiohttp)
runs in a thread, bounded in time; a failure (429, 5xx, no answer) is SlackFailed, which the
activity retries with backoff. Everything a flow's author wrote is escaped for Slack's text
(``&``, ``<``, ``>``), so a prompt cannot mention ``@channel`` or forge a link.

A button's ``value`` names the run, the request and the action: it is not a credential. Who
decides is the Slack user Slack vouches for (the signed request's ``user.id``), mapped to the
signoff user with that ``slack`` contact, with every check of the HTTP resume.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from signoff.engine.models import PendingRequest

TEXT_CHARS = 2900  # a section's text is at most 3000 characters
VALUE_CHARS = 2000  # a button's value, Slack's limit
ACTION_PREFIX = "signoff:"  # the action_id of signoff's buttons


class SlackFailed(Exception):
    """Slack refused the call or did not answer; tried again later."""


def escape(text: str) -> str:
    """``text`` as Slack shows it literally (its control sequences are ``<...>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class SlackAsk:
    flow_name: str
    owner_name: str
    pending: PendingRequest
    job_id: str
    user_id: str  # the signoff user it is sent to
    input_text: str
    link_url: str | None  # the person's decision link (a decision with fields opens it)
    kind: str = "required"


def button_value(job_id: str, request_id: str, action_id: str, user_id: str) -> str:
    """A button's value: the request, the action, and the signoff user the message was sent to
    (a press by anyone else decides nothing)."""
    return json.dumps({"j": job_id, "r": request_id, "a": action_id, "u": user_id}, separators=(",", ":"))


def parse_value(value: Any) -> tuple[str, str, str, str] | None:
    """(job id, request id, action id, user id) of a button's value, None when it is not ours."""
    if not isinstance(value, str) or len(value) > VALUE_CHARS:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) and data.get(k) for k in "jrau"):
        return None
    return data["j"], data["r"], data["a"], data["u"]


def blocks(ask: SlackAsk) -> tuple[str, list[dict[str, Any]]]:
    """The message's fallback text and its blocks."""
    p = ask.pending
    lead = {"reminder": "Reminder: ", "escalated": "Escalated to you: "}.get(ask.kind, "")
    head = f"{lead}{escape(ask.owner_name)}'s run of *{escape(_cut(ask.flow_name, 200))}* needs your decision"
    out: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(head, TEXT_CHARS)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(escape(p.prompt) or " ", TEXT_CHARS)}},
    ]
    if ask.input_text:
        out.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": _cut("The run's input: " + escape(ask.input_text), 2000)}]})
    buttons = []
    for i, option in enumerate(o for o in p.options if o.action_id in p.allowed_decisions):
        button: dict[str, Any] = {"type": "button", "text": {"type": "plain_text", "text": _cut(option.label, 75)},
                                  "action_id": f"{ACTION_PREFIX}{option.action_id}"[:255]}
        if (p.fields or {}).get(option.action_id) is not None or p.kind == "tool_approval" and option.action_id != \
                "approve":
            if ask.link_url is None:
                continue
            button["url"] = f"{ask.link_url}?action={option.action_id}"  # values: filled on the link's page
        else:
            button["value"] = button_value(ask.job_id, p.request_id, option.action_id, ask.user_id)
        if i == 0:
            button["style"] = "primary"
        buttons.append(button)
    if buttons:
        out.append({"type": "actions", "block_id": f"signoff-{ask.job_id}"[:255], "elements": buttons[:25]})
    return _cut(f"{ask.owner_name}'s run of {ask.flow_name} needs your decision: {p.prompt}", TEXT_CHARS), out


def outcome_blocks(flow_name: str, prompt: str, outcome: str) -> tuple[str, list[dict[str, Any]]]:
    """The message once the request is answered: the buttons give way to who decided what."""
    return _cut(f"{flow_name}: {outcome}", TEXT_CHARS), [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(f"*{escape(flow_name)}*: {escape(prompt)}",
                                                                     TEXT_CHARS)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(escape(outcome), 2000)}]},
    ]


class Slack:
    """Slack's Web API with the bot's token, at ``api_url`` (SIGNOFF_SLACK_API_URL)."""

    def __init__(self, token: str, api_url: str, timeout: float) -> None:
        from slack_sdk import WebClient

        self.timeout = timeout
        self.client = WebClient(token=token, base_url=api_url.rstrip("/") + "/", timeout=int(max(1, timeout)))

    async def call(self, method: str, **args: Any) -> dict[str, Any]:
        """One Web API call (bounded by ``timeout``); its answer, or SlackFailed."""
        from slack_sdk.errors import SlackApiError

        def send() -> dict[str, Any]:
            return dict(self.client.api_call(method, json=args).data)  # type: ignore[arg-type]

        try:
            async with asyncio.timeout(self.timeout + 1):
                return await asyncio.to_thread(send)
        except TimeoutError:
            raise SlackFailed(f"Slack did not answer {method} within {self.timeout:g} s") from None
        except SlackApiError as err:
            status = getattr(err.response, "status_code", None)
            raise SlackFailed(f"Slack answered {method} with {status}: {str(err.response.get('error'))[:200]}") from None
        except Exception as err:  # noqa: BLE001 - a transport error (refused, reset, TLS): retried
            raise SlackFailed(f"{type(err).__name__} calling Slack's {method}: {str(err)[:300]}") from None
