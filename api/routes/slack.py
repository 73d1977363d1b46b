"""Slack's interactions (DESIGN §14): a person pressed a button of a request's message.

The request is Slack's, signed: ``X-Slack-Signature`` (v0, HMAC-SHA256 of ``v0:{timestamp}:{raw
body}`` with the app's signing secret) and ``X-Slack-Request-Timestamp`` within five minutes are
checked by ``slack_sdk``'s SignatureVerifier before the body is parsed; anything else is 401 and
nothing is read or decided. The API key middleware lets this one path through for that reason
(api/auth.py: SIGNED_PATHS); the body limit holds.

Who decides is the Slack user Slack names (``user.id``), as the signoff user with that ``slack``
contact verified, through ``RunService.resume`` with ``via: "slack"``: every check of the HTTP
resume. A Slack user with no signoff user, one whose Slack id is still pending (set by the
person, not confirmed), or one who may not decide, is told so (an ephemeral message) and nothing
is decided. A "This is me" press (engine/verify.py) verifies the Slack id its message was sent
to, only when pressed by that very Slack user. Slack wants its answer within 3 seconds, so the press is answered (200)
once it is verified and mapped to the person, and the decision is made in the background (at
most ``MAX_DECIDING`` at once): the message is then updated to the outcome (``chat.update``),
also when another decision won, or the person is told why nothing was decided.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from signoff.engine import slack, verify
from signoff.engine.errors import SignoffError
from signoff.engine.models import Decision, User, utcnow

from signoff.api.errors import STATUS_BY_CODE, Unauthorized, printable

router = APIRouter(prefix="/api/v1/slack", tags=["slack"])
log = logging.getLogger("signoff.api.slack")
# presses being decided at once (each a task of its own, after Slack had its answer); past this a
# press is refused with a word to the person (Slack's retries and a flood of presses are bounded)
MAX_DECIDING = 64


def _verified(settings: Any, body: bytes, timestamp: str | None, signature: str | None) -> bool:
    from slack_sdk.signature import SignatureVerifier

    if not settings.slack_enabled or not timestamp or not signature or not timestamp.isdigit() or len(timestamp) > 12:
        return False
    return SignatureVerifier(settings.slack_signing_secret).is_valid(body, timestamp, signature)


async def _outcome(store: Any, job_id: str, request_id: str) -> str | None:
    """Who decided the request what, and when (None: not decided)."""
    for event in reversed(await store.read_events_named(job_id, "human_input_decision")):
        if event.data.get("request_id") == request_id:
            who = event.data.get("decided_by")
            person = await store.get_user(who) if who else None
            name = person.name if person else ("the deadline" if event.data.get("timed_out") else str(who))
            return f"{event.data.get('action_id')} by {name} at {str(event.data.get('decided_at'))[:19]} UTC"
    return None


@router.post("/interactions", include_in_schema=False)
async def interactions(request: Request) -> JSONResponse:
    settings = request.app.state.settings
    body = await request.body()
    if not _verified(settings, body, request.headers.get("x-slack-request-timestamp"),
                     request.headers.get("x-slack-signature")):
        raise Unauthorized("Not a request signed by Slack for this app (X-Slack-Signature, X-Slack-Request-Timestamp "
                           "within 5 minutes)")
    try:
        payload = json.loads((parse_qs(body.decode("utf-8")).get("payload") or ["{}"])[0])
    except (ValueError, UnicodeDecodeError):
        payload = {}
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return JSONResponse({})
    actions = payload.get("actions") or []
    first = actions[0] if actions and isinstance(actions[0], dict) else {}
    pressed = slack.parse_value(first.get("value"))
    user_id = (payload.get("user") or {}).get("id") if isinstance(payload.get("user"), dict) else None
    container = payload.get("container") if isinstance(payload.get("container"), dict) else {}
    channel, ts = container.get("channel_id"), container.get("message_ts")
    client = slack.Slack(settings.slack_bot_token, settings.slack_api_url, settings.notify_timeout_seconds)
    store = request.app.state.store
    if first.get("action_id") == verify.ACTION and isinstance(user_id, str):
        await _verify(client, store, channel, ts, user_id, first.get("value"))
        return JSONResponse({})
    if pressed is None or not isinstance(user_id, str):
        return JSONResponse({})
    job_id, request_id, action_id, sent_to = pressed
    person: User | None = await store.user_by_slack(user_id)
    if person is None:
        await _tell(client, channel, user_id, "Your Slack account is not linked to a signoff user (their `slack` "
                                              "contact), so nothing was decided.")
        return JSONResponse({})
    if not person.slack_verified:  # set by the person, not confirmed yet: its presses are nobody's
        await _tell(client, channel, user_id, "This Slack account is not verified for a signoff user yet, so nothing "
                                              "was decided. Verify it first: press \"This is me\" in the message "
                                              "signoff sent you when it was set (or ask for a new one).")
        return JSONResponse({})
    if person.id != sent_to:  # a message sent to someone else (shared, forwarded): not this person's to press
        await _tell(client, channel, user_id, "This request was sent to someone else; nothing was decided. Open "
                                              "signoff to decide it if it is yours to decide.")
        return JSONResponse({})
    # Slack wants the answer within 3 seconds: acknowledged now, decided in the background (the
    # message is updated, or the person told, once the decision is through)
    tasks: set[asyncio.Task[None]] = request.app.state.slack_decisions
    if len(tasks) >= MAX_DECIDING:
        await _tell(client, channel, user_id, "signoff is busy; nothing was decided. Press the button again in a "
                                              "moment.")
        return JSONResponse({})
    task = asyncio.get_running_loop().create_task(
        _decide(request.app.state.service, store, client, person, channel, ts, user_id, job_id, request_id,
                action_id), name=f"signoff-slack-{job_id}")
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return JSONResponse({})


async def _decide(service: Any, store: Any, client: slack.Slack, person: User, channel: Any, ts: Any, user_id: str,
                  job_id: str, request_id: str, action_id: str) -> None:
    """The press's decision, as ``person`` through ``RunService.resume`` (every check of the HTTP
    resume), then the message updated to the outcome or the person told why nothing was decided."""
    try:
        resumed = await service.resume(person, job_id, request_id, Decision(action_id=action_id), via="slack")
    except SignoffError as err:
        if STATUS_BY_CODE.get(err.code) == 409 and err.code != "ALREADY_VOTED":
            outcome = await _outcome(store, job_id, request_id)
            await _update(client, store, channel, ts, job_id, f"Already answered: {outcome}" if outcome else
                          "This request no longer waits for a decision.")
        else:
            await _tell(client, channel, user_id, f"Nothing was decided: {printable(err.message)}")
        return
    except Exception:  # noqa: BLE001 - the person is told; the log keeps what it was
        log.exception("Slack: the decision of job %s failed", job_id)
        await _tell(client, channel, user_id, "Nothing was decided: signoff could not take the decision right now. "
                                              "Press the button again in a moment.")
        return
    if resumed.status == "vote_recorded":
        await _tell(client, channel, user_id, f"Your vote is recorded ({resumed.votes}/{resumed.required}).")
        return
    await _update(client, store, channel, ts, job_id, f"{action_id} by {person.name}")


async def _verify(client: slack.Slack, store: Any, channel: Any, ts: Any, presser: str, token: Any) -> None:
    """A "This is me" press (engine/verify.py): verifies the Slack id its message was sent to only
    when the Slack user Slack vouches for is that very id, and the token is unused, unexpired and
    that id is still the user's contact."""
    row = await store.get_contact_token(verify.token_hash(token)) if verify.well_formed(token) else None
    if row is None or row.channel != "slack":
        await _tell(client, channel, presser, "This confirmation is not signoff's; nothing was verified.")
        return
    if row.address != presser:  # forwarded, shared, or a message built by hand: not this person's
        await _tell(client, channel, presser, "This confirmation was sent to another Slack account; nothing was "
                                              "verified.")
        return
    person = await store.use_contact_token(row.token_hash, utcnow())
    if person is None:
        await _tell(client, channel, presser, "This confirmation was used already, has expired, or the Slack id was "
                                              "changed since; nothing was verified. Ask signoff for a new one.")
        return
    if isinstance(channel, str) and isinstance(ts, str):
        text = f"Verified: signoff requests for {person.name} reach you here."
        try:
            await client.call("chat.update", channel=channel, ts=ts, text=text, blocks=[
                {"type": "section", "text": {"type": "mrkdwn", "text": slack.escape(text)}}])
        except slack.SlackFailed as err:
            log.warning("Slack: could not update the confirmation of %s: %s", person.id, err)


async def drain(app: Any, timeout: float = 30.0) -> None:
    """At shutdown: the decisions under way finish (bounded), then the rest are cancelled."""
    tasks: set[asyncio.Task[None]] = getattr(app.state, "slack_decisions", set())
    if tasks:
        _, late = await asyncio.wait(set(tasks), timeout=timeout)
        for task in late:
            task.cancel()


async def _tell(client: slack.Slack, channel: Any, user_id: str, text: str) -> None:
    if not isinstance(channel, str):
        return
    try:
        await client.call("chat.postEphemeral", channel=channel, user=user_id, text=text)
    except slack.SlackFailed as err:
        log.warning("Slack: could not tell %s: %s", user_id, err)


async def _update(client: slack.Slack, store: Any, channel: Any, ts: Any, job_id: str, outcome: str) -> None:
    """The message, its buttons given way to the outcome."""
    if not isinstance(channel, str) or not isinstance(ts, str):
        return
    job = await store.get_job(job_id)
    flow = await store.get_flow(job.flow_id, version=job.flow_version) if job else None
    text, blocks = slack.outcome_blocks(flow.name if flow else "signoff", "", outcome)
    try:
        await client.call("chat.update", channel=channel, ts=ts, text=text, blocks=blocks)
    except slack.SlackFailed as err:
        log.warning("Slack: could not update the message of job %s: %s", job_id, err)
