"""Verified contacts (docs/channels.md, "Verified contacts"), through the real parts: a real SMTP
server (aiosmtpd) receives the confirmation mail and the requests, the Slack fake takes the DMs
and signed interactions come as Slack sends them, against the real app, worker and Temporal.

A contact a person sets for themselves is pending: confirmed by the mail's link (its GET shows a
page and verifies nothing; the page's POST verifies) or by the Slack id's owner pressing "This is
me"; until then nothing is sent to it and its Slack presses are nobody's. Refused: an expired,
used, forged or stale token, a press by another Slack user; the confirmations are capped per
user and per address an hour. One the SMTP server refuses is retried, its outcome shown.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest_asyncio

from signoff.engine import slack, verify
from signoff.engine.models import ContactToken, JobStatus, utcnow
from tests.helpers import eventually
from tests.integration.api.conftest import Harness, harness
from tests.integration.decisions.conftest import (
    SECRET,
    TOKEN,
    FakeSlack,
    Inbox,
    gate_flow,
    run_suspended,
    signed,
    uid,
    upload,
    user_name,
)

VERIFY = re.compile(r"https://signoff\.example\.com(/verify/([A-Za-z0-9_-]{43}))")
CSRF = re.compile(r'name="csrf" value="([^"]*)"')
LINK = re.compile(r"https://signoff\.example\.com/d/[A-Za-z0-9_-]{43}")
PEOPLE = ("carol", "dave", "erin", "frank", "grace", "mallory")
CAP = 3  # SIGNOFF_VERIFY_MAX_PER_HOUR here


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client, inbox: Inbox, fake: FakeSlack) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("verify"), temporal_client,
                       smtp_url=f"smtp://127.0.0.1:{inbox.port}", smtp_from="signoff@example.com",
                       slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=f"{fake.url}/api/",
                       notify_timeout_seconds=2, public_url="https://signoff.example.com",
                       verify_max_per_hour=CAP) as hx:
        for name in PEOPLE:
            user = await hx.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            hx.users[name] = (user.id, await hx.store.create_api_key(user.id))
        yield hx


def _address(who: str) -> str:
    return f"{who}-{uuid.uuid4().hex[:8]}@example.com"


def _slack_id() -> str:
    return "U" + uuid.uuid4().hex[:10].upper()


async def _patch(h: Harness, who: str, **contacts: Any) -> dict[str, Any]:
    async with h.client(who) as c:
        r = await c.patch("/api/v1/users/me", json=contacts)
    assert r.status_code == 200, r.text
    return r.json()


async def _me(h: Harness, who: str) -> dict[str, Any]:
    async with h.client(who) as c:
        r = await c.get("/api/v1/users/me")
    assert r.status_code == 200, r.text
    return r.json()


async def _confirmation(box: Inbox, address: str, n: int = 1) -> str:
    """The path of the ``n``th confirmation mailed to ``address``."""
    await eventually(lambda: len(box.to(address)) >= n, what=f"{n} confirmation mail(s) to {address}")
    msg = box.to(address)[n - 1]
    assert str(msg["Subject"]).startswith("[signoff] Confirm your address")
    body = msg.get_body(("plain",))
    assert body is not None
    found = VERIFY.search(body.get_content())
    assert found is not None, body.get_content()
    return found.group(1)


async def _post(h: Harness, path: str, form: dict[str, str], **headers: str) -> httpx.Response:
    async with h.client() as c:  # no API key, no session: opened from the mailbox
        return await c.post(path, data=form, headers=headers)


async def _get(h: Harness, path: str) -> httpx.Response:
    async with h.client() as c:
        return await c.get(path)


def _press(slack_user: str, action_id: str, value: str, channel: str) -> str:
    payload = {"type": "block_actions", "user": {"id": slack_user}, "api_app_id": "A1",
               "container": {"type": "message", "channel_id": channel, "message_ts": "1700000000.000200"},
               "actions": [{"action_id": action_id, "block_id": "b", "value": value, "type": "button",
                            "action_ts": "1"}]}
    return urlencode({"payload": json.dumps(payload)})


async def _send(h: Harness, body: str) -> int:
    async with h.client() as c:
        r = await c.post("/api/v1/slack/interactions", content=body, headers=signed(body))
    await eventually(lambda: not h.app.state.slack_decisions, what="the press's decision to be made")
    return r.status_code


def _ephemeral(fake: FakeSlack, slack_user: str) -> list[str]:
    return [b["text"] for b in fake.sent("chat.postEphemeral") if b.get("user") == slack_user]


async def test_an_address_is_verified_by_the_links_post_not_its_get_and_then_gets_requests(
        h: Harness, inbox: Inbox) -> None:
    address = _address("carol")
    me = await _patch(h, "carol", email=address)
    assert (me["email"], me["email_state"], me["verification"]) == (address, "pending", {"email": "sent"})
    path = await _confirmation(inbox, address)
    msg = inbox.to(address)[0]
    assert await user_name(h, "carol") in str(msg.get_body(("plain",)).get_content())  # type: ignore[union-attr]
    # what a mail scanner does: GET and HEAD, again and again; nothing is verified
    for _ in range(2):
        page = await _get(h, path)
        assert page.status_code == 200 and "It is me: confirm" in page.text and address in page.text
        async with h.client() as c:
            assert (await c.head(path)).status_code == 200
    assert (await _me(h, "carol"))["email_state"] == "pending"
    csrf = CSRF.search(page.text).group(1)  # type: ignore[union-attr]
    # a POST without the page's form token, or from another site: refused, nothing verified
    assert (await _post(h, path, {})).status_code == 403
    assert (await _post(h, path, {"csrf": csrf}, origin="https://evil.example")).status_code == 403
    assert (await _me(h, "carol"))["email_state"] == "pending"
    done = await _post(h, path, {"csrf": csrf})
    assert done.status_code == 200 and "data-verify-done" in done.text
    assert (await _me(h, "carol"))["email_state"] == "verified"
    again = await _post(h, path, {"csrf": csrf})  # used once
    assert again.status_code == 409 and "used already" in again.text
    # now a request reaches the address, with its decision link
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "carol")], "notify": ["email"]}))
    await run_suspended(h, flow_id)
    await eventually(lambda: len(inbox.to(address)) >= 2, what="the request's mail")
    request = inbox.to(address)[1]
    assert str(request["Subject"]).startswith("[signoff] gated") and LINK.search(
        request.get_body(("plain",)).get_content())  # type: ignore[union-attr]
    # changing the address makes it pending again (and sends the new one its confirmation)
    other = _address("carol")
    me = await _patch(h, "carol", email=other)
    assert me["email_state"] == "pending" and me["verification"] == {"email": "sent"}
    await _confirmation(inbox, other)


async def test_a_victims_address_set_by_someone_else_gets_no_request(h: Harness, inbox: Inbox,
                                                                      fake: FakeSlack) -> None:
    victim, victim_slack = _address("victim"), _slack_id()
    me = await _patch(h, "mallory", email=victim, slack=victim_slack)
    assert (me["email_state"], me["slack_state"]) == ("pending", "pending")
    await _confirmation(inbox, victim)  # the one mail the victim gets: "ignore it if it is not you"
    await eventually(lambda: len(fake.sent("chat.postMessage", victim_slack)) == 1, what="the confirmation DM")
    # a request to mallory and to bob (whose address the operator set): bob's mail comes, the
    # victim gets nothing more, by mail or Slack
    bob_address = _address("bob")
    await h.store.set_contacts(uid(h, "bob"), {"email": bob_address}, verified=True)
    names = [await user_name(h, "mallory"), await user_name(h, "bob")]
    flow_id = await upload(h, gate_flow({"approvers": names}, name="victimised"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    await eventually(lambda: any(str(m["Subject"]).startswith("[signoff] victimised") for m in inbox.to(bob_address)),
                     what="bob's request mail")
    await eventually(lambda: h.store.list_notifications(job_id), what="the notification log")
    log = await h.store.list_notifications(job_id)
    assert {n.user_id for n in log} == {uid(h, "bob")}, log
    assert len(inbox.to(victim)) == 1 and len(fake.sent("chat.postMessage", victim_slack)) == 1


async def test_expired_used_forged_and_stale_tokens_verify_nothing(h: Harness, inbox: Inbox) -> None:
    address = _address("dave")
    await _patch(h, "dave", email=address)
    path = await _confirmation(inbox, address)
    csrf = CSRF.search((await _get(h, path)).text).group(1)  # type: ignore[union-attr]
    # forged and malformed tokens: one 404, GET and POST
    for bad in ("/verify/" + "A" * 43, "/verify/short", "/verify/" + "x" * 200):
        assert (await _get(h, bad)).status_code == 404
        assert (await _post(h, bad, {"csrf": csrf})).status_code == 404
    # a body past the form's bound: 413, nothing verified
    assert (await _post(h, path, {"csrf": csrf, "pad": "x" * 10_000})).status_code == 413
    assert (await _me(h, "dave"))["email_state"] == "pending"
    # expired: shown, refused
    token = "e" * 43
    now = utcnow()
    await h.store.create_contact_token(
        ContactToken(token_hash=verify.token_hash(token), user_id=uid(h, "dave"), channel="email", address=address,
                     csrf="c" * 32, created_at=now - timedelta(days=2), expires_at=now - timedelta(seconds=1)),
        since=now - timedelta(hours=1), max_per_user=100, max_per_address=100)
    page = await _get(h, f"/verify/{token}")
    assert page.status_code == 200 and "expired" in page.text and "It is me" not in page.text
    assert (await _post(h, f"/verify/{token}", {"csrf": "c" * 32})).status_code == 409
    # stale, and bound to its user: erin sets the same address, and dave's token verifies
    # neither erin's nor, once dave changed his address, dave's new one
    await _patch(h, "erin", email=address)
    await _patch(h, "dave", email=_address("dave"))
    refused = await _post(h, path, {"csrf": csrf})
    assert refused.status_code == 409 and "no longer" in refused.text
    assert (await _me(h, "dave"))["email_state"] == "pending" and (await _me(h, "erin"))["email_state"] == "pending"
    # erin's own confirmation verifies erin only
    erin_path = await _confirmation(inbox, address, 2)
    erin_csrf = CSRF.search((await _get(h, erin_path)).text).group(1)  # type: ignore[union-attr]
    assert (await _post(h, erin_path, {"csrf": erin_csrf})).status_code == 200
    assert (await _me(h, "erin"))["email_state"] == "verified" and (await _me(h, "dave"))["email_state"] == "pending"


async def test_a_slack_id_is_verified_only_by_its_owners_press(h: Harness, fake: FakeSlack) -> None:
    owner, other = _slack_id(), _slack_id()
    me = await _patch(h, "carol", slack=owner)
    assert me["slack_state"] == "pending" and me["verification"] == {"slack": "sent"}
    await eventually(lambda: fake.sent("chat.postMessage", owner), what="the confirmation DM")
    dm = fake.sent("chat.postMessage", owner)[0]
    button = next(e for b in dm["blocks"] if b["type"] == "actions" for e in b["elements"])
    assert button["action_id"] == verify.ACTION and await user_name(h, "carol") in json.dumps(dm["blocks"])
    # a request waits for carol (sent to her nowhere: her Slack id is pending); a press of its
    # button from her pending Slack id is not hers
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "carol")], "notify": ["slack"]}))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    decide = _press(owner, "signoff:approve", slack.button_value(job_id, f"gate:{job_id}", "approve", uid(h, "carol")),
                    owner)
    assert await _send(h, decide) == 200
    assert any("not verified" in t for t in _ephemeral(fake, owner))
    assert (await h.store.get_job(job_id)).status == JobStatus.suspended  # type: ignore[union-attr]
    # "This is me" pressed by another Slack user (the message forwarded, or built by hand)
    assert await _send(h, _press(other, verify.ACTION, button["value"], owner)) == 200
    assert any("another Slack account" in t for t in _ephemeral(fake, other))
    assert (await _me(h, "carol"))["slack_state"] == "pending"
    # an unsigned press: 401, nothing read
    body = _press(owner, verify.ACTION, button["value"], owner)
    async with h.client() as c:
        assert (await c.post("/api/v1/slack/interactions", content=body,
                             headers=signed(body, secret="not-the-secret"))).status_code == 401
    assert (await _me(h, "carol"))["slack_state"] == "pending"
    # by its owner: verified, the message says so
    assert await _send(h, body) == 200
    assert (await _me(h, "carol"))["slack_state"] == "verified"
    assert any("Verified" in u.get("text", "") for u in fake.sent("chat.update", owner))
    assert await _send(h, body) == 200  # twice: used once
    assert any("used already" in t for t in _ephemeral(fake, owner))
    # now her press decides as her
    assert await _send(h, decide) == 200
    await eventually(lambda: _decided(h, job_id), what="the decision")


async def _decided(h: Harness, job_id: str) -> bool:
    return any(e.event == "human_input_decision" for e in await h.store.read_events(job_id))


async def test_confirmations_are_capped_per_user_and_per_address(h: Harness, inbox: Inbox) -> None:
    address = _address("frank")
    me = await _patch(h, "frank", email=address)
    assert me["verification"] == {"email": "sent"}
    async with h.client("frank") as c:
        for _ in range(CAP - 1):
            r = await c.post("/api/v1/users/me/verify", json={"contact": "email"})
            assert r.status_code == 202 and r.json() == {"contact": "email", "verification": "sent"}, r.text
        r = await c.post("/api/v1/users/me/verify", json={"contact": "email"})
        assert r.status_code == 429 and r.json()["detail"]["code"] == "RATE_LIMITED", r.text
        # a contact not pending, or not one: refused
        assert (await c.post("/api/v1/users/me/verify", json={"contact": "slack"})).status_code == 422
        assert (await c.post("/api/v1/users/me/verify", json={"contact": "phone"})).status_code == 422
    await eventually(lambda: len(inbox.to(address)) == CAP, what=f"{CAP} confirmations")
    # the address's own cap: another user naming it cannot mail it more this hour
    me = await _patch(h, "dave", email=address)
    assert me["email_state"] == "pending" and me["verification"] == {"email": "limited"}
    async with h.client("dave") as c:
        assert (await c.post("/api/v1/users/me/verify", json={"contact": "email"})).status_code == 429
    assert len(inbox.to(address)) == CAP


async def test_a_confirmation_the_smtp_server_refuses_is_retried_and_its_outcome_shown(h: Harness,
                                                                                     inbox: Inbox) -> None:
    address = _address("grace")
    inbox.refuse = 1  # the first attempt: 451, the second (a second later) is taken
    me = await _patch(h, "grace", email=address)
    assert me["verification"] == {"email": "sent"} and me["email_confirmation"]["delivered"] is False
    await _confirmation(inbox, address)

    async def shown() -> dict[str, Any] | None:
        confirmation = (await _me(h, "grace"))["email_confirmation"]
        return confirmation if confirmation and confirmation["delivered"] else None

    confirmation = await eventually(shown, what="the confirmation shown delivered")
    assert confirmation["attempts"] == 2 and confirmation["error"] is None and not confirmation["used"]
    assert inbox.refuse == 0 and len(inbox.to(address)) == 1
