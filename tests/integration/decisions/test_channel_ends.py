"""How a request told by email and Slack ends there (DESIGN §14), through the real parts: a real
SMTP server (aiosmtpd), a local fake of Slack's Web API driven by ``slack_sdk``, the real app,
worker and Temporal dev server, each run's clock moved by per-workflow time skipping.

- Closing notes: whether the request is decided elsewhere, reaches its deadline
  (``on_timeout: fail``), is superseded by a newer run of the session, its run is stopped or
  waits past the deployment's maximum suspension,
  everyone who was told gets a short mail saying how it ended (not the person who decided) and
  each Slack message is updated (``chat.update``) to the outcome, its buttons gone.
- Reminders and escalation on real durable timers: ``remind_every`` mails and messages the
  approvers again, ``escalate_after`` + ``escalate_to`` tells the added approvers with links of
  their own (which decide as them); no reminder is sent after the decision.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import TimeSkipper, TimeSkippingConfig

from signoff.engine.models import TERMINAL_STATUSES, JobStatus
from signoff.service import with_converter
from tests.integration.api.conftest import Harness, harness
from tests.integration.decisions.conftest import SECRET, TOKEN, FakeSlack, Inbox
from tests.integration.decisions.gate_world import fast_forward, gate_flow, name_of, resume, save_flow
from tests.integration.decisions.test_email_links import CSRF, _links, _parts

HOUR = timedelta(hours=1)
PEOPLE = ("bob", "carol")


@pytest_asyncio.fixture(scope="module")
async def world(store_backend, tmp_path_factory, temporal_client, inbox, fake
                ) -> AsyncIterator[tuple[Harness, TimeSkipper]]:
    skipper = TimeSkipper(with_converter(temporal_client), config=TimeSkippingConfig(enabled=False))
    async with harness(store_backend, tmp_path_factory.mktemp("ends"), skipper.client,
                       smtp_url=f"smtp://127.0.0.1:{inbox.port}", smtp_from="signoff@example.com",  # type: ignore[attr-defined]
                       slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=f"{fake.url}/api/",
                       notify_timeout_seconds=2, public_url="https://signoff.example.com",
                       max_suspend_seconds=2 * 24 * 3600) as h:  # ("waited too long": 2 days, fast-forwarded)
        for name in PEOPLE:
            user = await h.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            h.users[name] = (user.id, await h.store.create_api_key(user.id))
            await h.store.set_contacts(user.id, {"email": f"{name}-{uuid.uuid4().hex[:6]}@example.com",
                                                 "slack": "U" + uuid.uuid4().hex[:10].upper()}, verified=True)
        yield h, skipper


async def _contact(h: Harness, who: str) -> tuple[str, str]:
    user = await h.store.get_user(h.users[who][0])
    assert user is not None and user.email and user.slack
    return user.email, user.slack


async def _until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := await check()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)
    return got


async def _start(h: Harness, flow_id: str, session_id: str | None = None) -> str:
    async with h.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 42", "mode": "background",
                                                     **({"session_id": session_id} if session_id else {})})
        assert r.status_code == 200, r.text
    job_id = r.json()["job_id"]
    job = await h.wait_status(job_id, JobStatus.suspended, *TERMINAL_STATUSES)
    assert job.status == JobStatus.suspended, await h.diagnose(job_id)
    return job_id


async def _log(h: Harness, job_id: str) -> list[Any]:
    return await h.store.list_notifications(job_id, limit=500)


async def _told(h: Harness, job_id: str, event: str, n: int) -> list[Any]:
    """The delivered notices of ``event``, once there are ``n``."""
    async def check() -> list[Any]:
        rows = [r for r in await _log(h, job_id) if r.event == event and r.delivered]
        return rows if len(rows) >= n else []
    return await _until(f"{n} delivered {event} notices of {job_id}", check)


def _mails_of(box: Inbox, address: str, flow: str) -> list[Any]:
    return [m for m in box.to(address) if str(m["Subject"]).startswith(f"[signoff] {flow}")
            or str(m["Subject"]).startswith(("[signoff] Reminder: " + flow, "[signoff] Escalated: " + flow))]


def _updates(fake: FakeSlack, slack_id: str, ts: str) -> list[dict[str, Any]]:
    return [b for b in fake.sent("chat.update", slack_id) if b.get("ts") == ts]


@pytest.mark.parametrize("end", ["decided", "expired", "superseded", "stopped", "waited too long"])
async def test_every_way_a_request_ends_closes_it_by_mail_and_in_slack(world, inbox: Inbox, fake: FakeSlack,
                                                                      end: str) -> None:
    h, skipper = world
    flow = f"Ends {end} {uuid.uuid4().hex[:4]}"
    params: dict[str, Any] = {"approvers": [await name_of(h, "bob"), await name_of(h, "carol")]}
    if end == "expired":
        params.update(timeout=3600, on_timeout="fail")
    flow_id = await save_flow(h, gate_flow(flow, **params))
    session = f"s-{uuid.uuid4().hex[:8]}"
    job_id = await _start(h, flow_id, session)
    told = await _told(h, job_id, "human_input_required", 4)  # bob and carol, by mail and in Slack
    messages = {r.user_id: r.ref.split(" ")[1] for r in told if r.channel == "slack"}
    assert len(messages) == 2 and all(messages.values())

    if end == "decided":
        assert (await resume(h, "bob", job_id, "approve")).status_code == 200
        outcome, word, status = f"approve by {await name_of(h, 'bob')}", "answered", JobStatus.completed
    elif end == "expired":
        assert await fast_forward(h, skipper, job_id, 2 * HOUR) in (True, False)
        outcome, word, status = "It reached its deadline", "answered", JobStatus.timed_out
    elif end == "waited too long":  # the deployment's maximum suspension (SIGNOFF_MAX_SUSPEND_SECONDS)
        assert await fast_forward(h, skipper, job_id, timedelta(days=3)) in (True, False)
        outcome, word, status = "The run waited longer than it may", "closed", JobStatus.timed_out
    elif end == "superseded":
        await _start(h, flow_id, session)
        outcome, word, status = "A newer run of the same conversation took its place", "closed", JobStatus.cancelled
    else:
        async with h.client("alice") as c:
            r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        assert r.status_code == 200, r.text
        outcome, word, status = "The run was stopped by its owner", "closed", JobStatus.cancelled
    await h.wait_status(job_id, status)

    # mailed: everyone told but the person who decided
    for who in PEOPLE:
        address, slack_id = await _contact(h, who)
        if end == "decided" and who == "bob":
            continue
        note = (await _until(f"the closing mail to {who}", lambda: _closing_mail(inbox, address, flow)))
        assert note["Subject"] == f"[signoff] {flow}: {word}"
        text, html = _parts(note)
        assert outcome in text and outcome in html and "/d/" not in text + html
    # in Slack: every message updated to the outcome, its buttons gone
    for who in PEOPLE:
        _, slack_id = await _contact(h, who)
        ts = messages[h.users[who][0]]
        updates = await _until(f"{who}'s message updated", _async(lambda: _updates(fake, slack_id, ts)))
        assert outcome in updates[-1]["text"], updates[-1]
        assert not [b for b in updates[-1]["blocks"] if b.get("type") == "actions"]
    # each note once, logged under the event that ended the request
    event = {"decided": "human_input_decision", "expired": "human_input_expired",
             "waited too long": "run_timed_out"}.get(end, "run_cancelled")
    closing = await _told(h, job_id, event, 3 if end == "decided" else 4)
    keys = [(r.user_id, r.channel) for r in closing]
    assert len(keys) == len(set(keys)), closing
    if end == "decided":  # the decider is not mailed how they decided
        assert (h.users["bob"][0], "email") not in keys
        assert _closing_mail_now(inbox, (await _contact(h, "bob"))[0], flow) is None


def _closing_mail_now(box: Inbox, address: str, flow: str) -> Any:
    found = [m for m in _mails_of(box, address, flow) if str(m["Subject"]).endswith((": answered", ": closed"))]
    return found[-1] if found else None


async def _closing_mail(box: Inbox, address: str, flow: str) -> Any:
    return _closing_mail_now(box, address, flow)


def _async(fn: Any) -> Any:
    async def call() -> Any:
        return fn()
    return call


async def test_reminders_and_escalation_on_durable_timers(world, inbox: Inbox, fake: FakeSlack) -> None:
    """bob is asked, reminded every hour; after 2.5 hours carol is added and told with her own
    link, which decides as her; no reminder follows the decision."""
    h, skipper = world
    flow = f"Timers {uuid.uuid4().hex[:4]}"
    flow_id = await save_flow(h, gate_flow(flow, approvers=[await name_of(h, "bob")], remind_every=3600,
                                           escalate_after=9000, escalate_to=[await name_of(h, "carol")]))
    job_id = await _start(h, flow_id)
    bob_mail, bob_slack = await _contact(h, "bob")
    carol_mail, carol_slack = await _contact(h, "carol")
    await _told(h, job_id, "human_input_required", 2)
    assert not _mails_of(inbox, carol_mail, flow)  # carol is not asked yet

    assert await fast_forward(h, skipper, job_id, HOUR + timedelta(minutes=5))
    await _told(h, job_id, "human_input_reminder", 2)  # bob, by mail and in Slack
    reminders = [m for m in _mails_of(inbox, bob_mail, flow) if str(m["Subject"]).startswith("[signoff] Reminder:")]
    assert len(reminders) == 1
    assert [_head(b) for b in _of_job(fake, bob_slack, job_id)].count("Reminder") == 1

    assert await fast_forward(h, skipper, job_id, HOUR + timedelta(minutes=30))  # a second reminder, the escalation
    escalated = await _told(h, job_id, "human_input_escalated", 2)
    assert {r.user_id for r in escalated} == {h.users["carol"][0]}  # only the added approver
    mail = await _until("carol's mail", _async(lambda: [m for m in _mails_of(inbox, carol_mail, flow)
                                                       if str(m["Subject"]).startswith("[signoff] Escalated:")]))
    assert [_head(b) for b in _of_job(fake, carol_slack, job_id)] == ["Escalated to you"]
    await _told(h, job_id, "human_input_reminder", 4)  # bob's second reminder, both channels
    assert [_head(b) for b in _of_job(fake, bob_slack, job_id)] == ["ask", "Reminder", "Reminder"]
    bob_links = {p for m in _mails_of(inbox, bob_mail, flow) for p in _links(_parts(m)[0]).values()}
    carol_link = _links(_parts(mail[-1])[0])["approve"]
    assert carol_link not in bob_links  # her own link
    async with h.client() as c:
        page = await c.get(carol_link)
        r = await c.post(carol_link.split("?")[0], data={"csrf": CSRF.search(page.text).group(1),  # type: ignore[union-attr]
                                                          "action_id": "approve"})
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    decided = [e.data for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]
    assert [(d["decided_by"], d["via"]) for d in decided] == [(h.users["carol"][0], "email")]

    await _told(h, job_id, "human_input_decision", 1)  # bob's closing notes are under way
    reminded = len([r for r in await _log(h, job_id) if r.event == "human_input_reminder"])
    await fast_forward(h, skipper, job_id, 5 * HOUR)  # the workflow is over: no timer is left to fire
    evts = await h.store.read_events(job_id)
    assert all(e.seq < decided_seq(evts) for e in evts if e.event == "human_input_reminder")
    assert len([r for r in await _log(h, job_id) if r.event == "human_input_reminder"]) == reminded


def decided_seq(evts: list[Any]) -> int:
    return [e.seq for e in evts if e.event == "human_input_decision"][0]


def _head(message: dict[str, Any]) -> str:
    """What a Slack message's first line starts with: Reminder, Escalated to you, or the ask."""
    first = message["blocks"][0]["text"]["text"]
    return next((lead for lead in ("Reminder", "Escalated to you") if first.startswith(lead)), "ask")


def _of_job(fake: FakeSlack, slack_id: str, job_id: str) -> list[dict[str, Any]]:
    """The messages posted to ``slack_id`` about the run ``job_id`` (its buttons name it)."""
    return [m for m in fake.sent("chat.postMessage", slack_id) if job_id in json.dumps(m)]
