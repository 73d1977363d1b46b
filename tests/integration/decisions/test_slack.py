"""Requests in Slack (DESIGN §14), through the real parts: the worker's activity sends the Block
Kit message with ``slack_sdk`` to a local fake of Slack's Web API; a button press is sent to the
real app as Slack sends it (form-encoded ``payload``, signed with X-Slack-Signature) and decides
as the mapped person, exactly once; the message is updated to the outcome.

Refused, nothing decided: an unsigned, forged or replayed (old timestamp) request (401); a Slack
user with no signoff user, or one who may not decide (told so). Slack answering 429 or 500:
retried, logged, the run unaffected.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest
import pytest_asyncio

from signoff.engine.models import JobStatus
from tests.helpers import eventually, scaled
from tests.integration.api.conftest import Harness, harness
from tests.integration.decisions.conftest import (
    PEOPLE,
    SECRET,
    TOKEN,
    FakeSlack,
    gate_flow,
    resume,
    run_suspended,
    signed,
    uid,
    upload,
    user_name,
)

@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client, fake) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("slack"), temporal_client,
                       slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=f"{fake.url}/api/",
                       notify_timeout_seconds=2, public_url="https://signoff.example.com") as hx:
        for name in PEOPLE:
            user = await hx.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            hx.users[name] = (user.id, await hx.store.create_api_key(user.id))
        for name in ("alice", "bob", "carol"):
            await hx.store.set_contacts(uid(hx, name), {"slack": "U" + uuid.uuid4().hex[:10].upper()},
                                        verified=True)
        yield hx


async def _slack_id(h: Harness, who: str) -> str:
    user = await h.store.get_user(uid(h, who))
    assert user is not None and user.slack
    return user.slack


async def _posted(fake: FakeSlack, channel: str, n: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(fake.sent("chat.postMessage", channel)) < n:
        assert time.monotonic() < deadline, f"no message to {channel}"
        await asyncio.sleep(0.05)
    return fake.sent("chat.postMessage", channel)


def _press(message: dict[str, Any], action: str, slack_user: str, **value: str) -> str:
    """The body Slack sends when ``slack_user`` presses ``action``'s button of ``message``
    (``value``: fields of the button's value changed, as a message built by hand would)."""
    button = next(e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == f"signoff:{action}")
    if value:
        button = {**button, "value": json.dumps({**json.loads(button["value"]), **value})}
    payload = {"type": "block_actions", "user": {"id": slack_user}, "api_app_id": "A1",
               "container": {"type": "message", "channel_id": message["channel"], "message_ts": "1700000000.000100"},
               "actions": [{"action_id": button["action_id"], "block_id": "b", "value": button.get("value"),
                            "type": "button", "action_ts": "1"}]}
    return urlencode({"payload": json.dumps(payload)})


async def _send(h: Harness, body: str, headers: dict[str, str], *, settle: bool = True) -> int:
    """Slack's POST of ``body``; ``settle``: then wait for the press's decision, which the app
    makes in the background once it has answered (Slack's 3 seconds)."""
    async with h.client() as c:  # no API key: Slack sends none
        r = await c.post("/api/v1/slack/interactions", content=body, headers=headers)
    if settle:
        await eventually(lambda: not h.app.state.slack_decisions, what="the press's decision to be made")
    return r.status_code


async def _decisions(h: Harness, job_id: str) -> list[dict[str, Any]]:
    return [e.data for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]


async def _assigned(h: Harness, fake: FakeSlack, who: str = "bob", **params: Any) -> tuple[str, dict[str, Any]]:
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, who)], "notify": ["slack"], **params},
                                        name="Refunds"))
    channel = await _slack_id(h, who)
    before = len(fake.sent("chat.postMessage", channel))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    return job_id, (await _posted(fake, channel, before + 1))[-1]


async def test_a_button_decides_once_as_the_mapped_person(h: Harness, fake: FakeSlack) -> None:
    job_id, message = await _assigned(h, fake)
    assert "Approve this refund?" in json.dumps(message["blocks"]) and "Refunds" in message["text"]
    assert [c[2] for c in fake.calls if c[0] == "chat.postMessage"][-1] == f"Bearer {TOKEN}"
    body = _press(message, "approve", await _slack_id(h, "bob"))
    assert await _send(h, body, signed(body)) == 200
    await h.wait_status(job_id, JobStatus.completed)
    decided = await _decisions(h, job_id)
    assert [(d["action_id"], d["decided_by"], d["via"]) for d in decided] == [("approve", uid(h, "bob"), "slack")]
    updated = fake.sent("chat.update", message["channel"])
    assert updated and "approve by" in updated[-1]["text"] and await user_name(h, "bob") in updated[-1]["text"]
    # pressed again (or replayed within five minutes): nothing more is decided, the message says who did
    seen = len(fake.sent("chat.update", message["channel"]))
    assert await _send(h, body, signed(body)) == 200
    assert len(await _decisions(h, job_id)) == 1
    # among the updates since (the closing note's own update of the message may come after it)
    await eventually(lambda: any("Already answered" in u["text"]
                                 for u in fake.sent("chat.update", message["channel"])[seen:]),
                     what="the message to say it was already answered")


async def test_unsigned_forged_and_replayed_requests_are_401(h: Harness, fake: FakeSlack) -> None:
    job_id, message = await _assigned(h, fake)
    body = _press(message, "approve", await _slack_id(h, "bob"))
    for headers in ({"content-type": "application/x-www-form-urlencoded"},
                    signed(body, secret="not-the-secret"),
                    signed(body, at=int(time.time()) - 6 * 60),  # replayed: older than five minutes
                    signed(body, at=int(time.time()) + 6 * 60),
                    {**signed(body), "x-slack-request-timestamp": "soon"},
                    {**signed(body), "x-slack-signature": "v0=" + "0" * 64}):
        assert await _send(h, body, headers) == 401, headers
    assert await _send(h, body + "&x=1", signed(body)) == 401  # the body changed after signing
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended and await _decisions(h, job_id) == []
    r = await resume(h, "bob", job_id, "reject")  # still bob's to decide
    assert r.status_code == 200


async def test_an_unknown_slack_user_or_one_who_may_not_decide_is_told_and_decides_nothing(h: Harness,
                                                                                       fake: FakeSlack) -> None:
    job_id, message = await _assigned(h, fake)
    stranger = "U" + uuid.uuid4().hex[:10].upper()
    body = _press(message, "approve", stranger)
    assert await _send(h, body, signed(body)) == 200
    told = fake.sent("chat.postEphemeral", message["channel"])
    assert told and told[-1]["user"] == stranger and "not linked" in told[-1]["text"]
    # a signoff user the message was not sent to (it was shared into a channel): not theirs to press
    body = _press(message, "approve", await _slack_id(h, "carol"))
    assert await _send(h, body, signed(body)) == 200
    told = fake.sent("chat.postEphemeral", message["channel"])
    assert told[-1]["user"] == await _slack_id(h, "carol") and "nothing was decided" in told[-1]["text"]
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended and await _decisions(h, job_id) == []
    # the person it was sent to, with a decision the resume's checks refuse (an action the request
    # does not offer, as a payload built by hand would send): told why, nothing decided
    body = _press(message, "approve", await _slack_id(h, "bob"), a="pay_twice")
    assert await _send(h, body, signed(body)) == 200
    told = fake.sent("chat.postEphemeral", message["channel"])
    assert told[-1]["user"] == await _slack_id(h, "bob") and "Nothing was decided" in told[-1]["text"]
    assert await _decisions(h, job_id) == []
    assert (await resume(h, "bob", job_id, "approve")).status_code == 200


async def test_slack_answering_429_or_500_is_retried_and_the_run_unaffected(h: Harness, fake: FakeSlack) -> None:
    fake.fail = [429, 500]
    job_id, message = await _assigned(h, fake)
    deadline = time.monotonic() + 30
    while True:  # the attempt that got through logs itself once Slack has answered it
        async with h.client("alice") as c:
            log = (await c.get(f"/api/v2/workflows/{job_id}/notifications")).json()
        if any(n["delivered"] for n in log):
            break
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)
    attempts = sorted((n["attempt"], n["delivered"], n["channel"]) for n in log)
    assert attempts == [(1, False, "slack"), (2, False, "slack"), (3, True, "slack")]
    assert "429" in sorted(log, key=lambda n: n["attempt"])[0]["error"]
    fake.fail = [500] * 1000
    try:
        flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob")], "notify": ["slack"]}))
        job_id = (await run_suspended(h, flow_id))["job_id"]
        assert (await resume(h, "bob", job_id, "approve")).status_code == 200
        await h.wait_status(job_id, JobStatus.completed)
    finally:
        fake.fail = []


async def test_a_decision_with_fields_opens_the_link_and_html_is_escaped(h: Harness, fake: FakeSlack) -> None:
    fields = {"Reject": {"type": "object", "required": ["reason"], "properties": {"reason": {"type": "string"}}}}
    job_id, message = await _assigned(h, fake, fields=fields, prompt="<!channel> pay <https://evil.example|here>?")
    buttons = {e["action_id"]: e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert "value" in buttons["signoff:approve"] and "url" not in buttons["signoff:approve"]
    assert buttons["signoff:reject"]["url"].startswith("https://signoff.example.com/d/")
    assert "value" not in buttons["signoff:reject"]
    text = json.dumps(message["blocks"])
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text and "<https://evil" not in text
    async with h.client() as c:
        page = await c.get(buttons["signoff:reject"]["url"].split("signoff.example.com", 1)[1])
    assert page.status_code == 200 and 'name="v.reject.reason"' in page.text
    assert job_id


async def test_a_request_answered_elsewhere_updates_the_message(h: Harness, fake: FakeSlack) -> None:
    job_id, message = await _assigned(h, fake)
    deadline = time.monotonic() + 30
    while True:  # the message's channel and ts are in the log once it was delivered
        async with h.client("alice") as c:
            log = (await c.get(f"/api/v2/workflows/{job_id}/notifications")).json()
        if any(n["delivered"] for n in log):
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    before = len(fake.sent("chat.update", message["channel"]))
    assert (await resume(h, "bob", job_id, "reject")).status_code == 200
    deadline = time.monotonic() + 30
    while len(fake.sent("chat.update", message["channel"])) <= before:
        assert time.monotonic() < deadline, "the message was not updated"
        await asyncio.sleep(0.05)
    update = fake.sent("chat.update", message["channel"])[-1]
    assert "Answered: reject by" in update["text"] and await user_name(h, "bob") in update["text"]
    assert not [b for b in update["blocks"] if b["type"] == "actions"]  # the buttons are gone


async def test_a_slack_press_racing_the_api_decides_exactly_once(h: Harness, fake: FakeSlack) -> None:
    """bob's button and carol's HTTP resume at once, 15 times (tests/helpers.scaled): one decision each time."""
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob"), await user_name(h, "carol")],
                                         "notify": ["slack"]}))
    bob = await _slack_id(h, "bob")
    won: dict[str, int] = {"slack": 0, "api": 0}
    n = scaled(15)
    for _ in range(n):
        before = len(fake.sent("chat.postMessage", bob))
        job_id = (await run_suspended(h, flow_id))["job_id"]
        message = (await _posted(fake, bob, before + 1))[-1]
        body = _press(message, "approve", bob)
        status, api = await asyncio.gather(_send(h, body, signed(body)), resume(h, "carol", job_id, "reject"))
        assert status == 200
        await h.wait_status(job_id, JobStatus.completed)
        decided = await _decisions(h, job_id)
        assert len(decided) == 1, decided
        won[decided[0]["via"]] += 1
        assert api.status_code == (200 if decided[0]["via"] == "api" else 409), api.text
    assert sum(won.values()) == n


async def test_the_press_is_answered_before_its_decision_is_made(h: Harness, fake: FakeSlack,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Slack wants an answer within 3 seconds: the app answers the press once it is verified and
    mapped, and decides in the background. The decision is held on an event here: the answer
    comes while it is held, and the decision and the message's update follow its release."""
    job_id, message = await _assigned(h, fake)
    release, entered = asyncio.Event(), asyncio.Event()
    real = h.service.resume

    async def slow_resume(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(h.service, "resume", slow_resume)
    body = _press(message, "approve", await _slack_id(h, "bob"))
    before = len(fake.sent("chat.update", message["channel"]))
    status = await asyncio.wait_for(_send(h, body, signed(body), settle=False), 30)
    assert status == 200
    await asyncio.wait_for(entered.wait(), 30)  # the decision is under way, held
    assert not release.is_set() and len(h.app.state.slack_decisions) == 1
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended and await _decisions(h, job_id) == []
    release.set()
    await h.wait_status(job_id, JobStatus.completed)
    decided = await _decisions(h, job_id)
    assert [(d["decided_by"], d["via"]) for d in decided] == [(uid(h, "bob"), "slack")]
    await eventually(lambda: any("approve by" in u["text"] for u in fake.sent("chat.update", message["channel"])[before:]),
                     what="the message updated to the decision")
