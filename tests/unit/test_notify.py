"""Who is told of a request, on which channel (activities/notify.py, docs/channels.md), on the
in-memory store: the approvers with the channel's contact verified (the owner when none is named), not
the owner with allow_self_approval false, not who muted the owner, not at a reminder who voted
already, at an escalation only the people it added; notify [] none; a channel not configured
none; the closing note to who was told (delivered). And the mail's and the Slack message's words
for a hostile flow: one header line, escaped text."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from signoff.activities.notify import NotifyActivities
from signoff.engine import mail, slack
from signoff.engine.models import NewJob, Option, PendingRequest, utcnow
from signoff.engine.settings import Settings
from signoff.engine.store import open_store


def _pending(**fields) -> PendingRequest:
    fields.setdefault("prompt", "Approve?")
    return PendingRequest(request_id="gate:j1", paused_at=utcnow(),
                          options=[Option(action_id="approve", label="Approve"),
                                   Option(action_id="reject", label="Reject")], allowed_decisions=["approve", "reject"], **fields)


async def _world(tmp_path: Path, **settings_kw):
    store = open_store("memory://")
    await store.setup()
    people = {}
    for name in ("alice", "bob", "carol", "dave", "erin"):
        user = await store.create_user(name)
        if name != "erin":  # erin has no contact
            await store.set_contacts(user.id, {"email": f"{name}@example.com", "slack": f"U0{name.upper()}"},
                                     verified=True)
        people[name] = user.id
    job, _ = await store.create_job(NewJob(job_id="j1", flow_id="f", flow_version=1, user_id=people["alice"]))
    settings = Settings(home=tmp_path, **{"smtp_url": "smtp://127.0.0.1:1", "smtp_from": "s@example.com",
                                          "slack_bot_token": "xoxb-1", "slack_signing_secret": "s", **settings_kw})
    return store, people, job, NotifyActivities(store, settings)


def _told(deliveries) -> set[tuple[str, str]]:
    return {(d.user_id, d.channel) for d in deliveries}


async def test_who_is_told_of_a_request(tmp_path: Path) -> None:
    store, p, job, acts = await _world(tmp_path)
    both = lambda *names: {(p[n], c) for n in names for c in ("email", "slack")}  # noqa: E731
    refs = [f"user:{p['bob']}", f"user:{p['carol']}", f"user:{p['erin']}", f"user:{p['alice']}"]
    asked = _pending(approver_refs=refs, approvers=["bob", "carol", "erin", "alice"])
    assert _told(await acts._notifications(job, "human_input_required", asked, 1)) == both("bob", "carol", "alice")
    # nobody named: the run's owner
    assert _told(await acts._notifications(job, "human_input_required", _pending(), 1)) == both("alice")
    # allow_self_approval false: not the owner
    no_self = asked.model_copy(update={"allow_self_approval": False})
    assert _told(await acts._notifications(job, "human_input_required", no_self, 1)) == both("bob", "carol")
    # notify: [] none; [email] only email
    assert await acts._notifications(job, "human_input_required", asked.model_copy(update={"notify": []}), 1) == []
    only_email = asked.model_copy(update={"notify": ["email"]})
    assert {c for _, c in _told(await acts._notifications(job, "human_input_required", only_email, 1))} == {"email"}
    # carol muted alice: none of alice's requests reach her
    await store.mute(p["carol"], p["alice"])
    assert _told(await acts._notifications(job, "human_input_required", asked, 1)) == both("bob", "alice")
    await store.unmute(p["carol"], p["alice"])
    # a reminder skips who voted already
    await store.append_event("j1", "human_input_vote", {"request_id": "gate:j1", "user": p["bob"],
                                                        "action_id": "approve",
                                                        "at": datetime.now(timezone.utc).isoformat()})
    assert _told(await acts._notifications(job, "human_input_reminder", asked, 2)) == both("carol", "alice")
    # other events tell nobody
    assert await acts._notifications(job, "human_input_vote", asked, 3) == []


async def test_a_pending_contact_is_told_nothing(tmp_path: Path) -> None:
    store, p, job, acts = await _world(tmp_path)
    refs = [f"user:{p['bob']}", f"user:{p['carol']}"]
    asked = _pending(approver_refs=refs, approvers=["bob", "carol"])
    # carol gave a new address herself (pending), and bob a new Slack id: neither is told there
    await store.set_contacts(p["carol"], {"email": "someone-else@example.com"}, verified=False)
    await store.set_contacts(p["bob"], {"slack": "U0SOMEONE"}, verified=False)
    told = _told(await acts._notifications(job, "human_input_required", asked, 1))
    assert told == {(p["bob"], "email"), (p["carol"], "slack")}
    # the operator vouches for carol's: she is told there again
    await store.set_contacts(p["carol"], {"email": "someone-else@example.com"}, verified=True)
    told = _told(await acts._notifications(job, "human_input_required", asked, 1))
    assert told == {(p["bob"], "email"), (p["carol"], "slack"), (p["carol"], "email")}


async def test_an_escalation_tells_only_the_people_it_added(tmp_path: Path) -> None:
    store, p, job, acts = await _world(tmp_path)
    first = [f"user:{p['bob']}"]
    job = job.model_copy(update={"pending": _pending(approver_refs=first)})
    await store.set_request_approvers("j1", "gate:j1", first)
    await store.add_request_approvers("j1", "gate:j1", [f"user:{p['dave']}"])
    now = _pending(approver_refs=first)
    told = _told(await acts._notifications(job, "human_input_escalated", now, 4))
    assert told == {(p["dave"], "email"), (p["dave"], "slack")}


async def test_a_channel_not_configured_is_skipped(tmp_path: Path) -> None:
    _, p, job, acts = await _world(tmp_path, smtp_url=None, slack_bot_token=None)
    assert await acts._notifications(job, "human_input_required", _pending(), 1) == []
    _, p, job, acts = await _world(tmp_path, slack_bot_token=None)
    assert _told(await acts._notifications(job, "human_input_required", _pending(), 1)) == {(p["alice"], "email")}


async def test_the_closing_note_goes_to_who_was_told(tmp_path: Path) -> None:
    store, p, job, acts = await _world(tmp_path)
    # bob's Slack message failed; carol's mail went out but its outcome was never recorded (a
    # claim left unfinished): she may have it, so she is told how it ended too
    for who, channel, delivered, error in (("bob", "email", True, None), ("bob", "slack", False, "ratelimited"),
                                           ("carol", "slack", True, None), ("carol", "email", False, None)):
        await store.log_notification(job_id="j1", request_id="gate:j1", seq=1, event="human_input_required",
                                     channel=channel, user_id=p[who], attempt=1, delivered=delivered, error=error)
    await store.log_notification(job_id="j1", request_id="gate:other", seq=1, event="human_input_required",
                                 channel="email", user_id=p["dave"], attempt=1, delivered=True, error=None)
    closing = await acts._closing(job, "gate:j1", [("human_input_vote", 5), ("human_input_decision", 6)])
    assert _told(closing) == {(p["bob"], "email"), (p["carol"], "slack"), (p["carol"], "email")}
    assert {d.seq for d in closing} == {6}
    assert await acts._closing(job, "gate:j1", [("human_input_vote", 5)]) == []


def test_a_hostile_flow_makes_one_header_line_and_escaped_text() -> None:
    asked = mail.Asked(flow_name="Pay\r\nBcc: all@evil.example", owner_name="<b>mallory</b>",
                       pending=_pending(prompt="\u2028Approve\x00 <script>x</script>\nsecond line"),
                       input_text="<img src=x>", page_url="https://s.example/d/t",
                       action_urls=[("<i>Ok</i>", "https://s/d/t?a=1")], expires_at=utcnow(), deadline=None)
    subject = mail.subject(asked)
    assert "\r" not in subject and "\n" not in subject and "\u2028" not in subject and "\x00" not in subject
    assert subject == "[signoff] Pay Bcc: all@evil.example: Approve <script>x</script>"
    html = mail.html_body(asked, "bob@example.com")
    assert "<script>" not in html and "<img" not in html and "<b>mallory" not in html and "<i>Ok" not in html
    text, blocks = slack.blocks(slack.SlackAsk(flow_name="<!here>", owner_name="<@U1>", pending=asked.pending,
                                               job_id="j1", user_id="u1", input_text="<https://evil|x>", link_url=None))
    dumped = str(blocks)
    assert "<!here>" not in dumped and "<@U1>" not in dumped and "<https://evil" not in dumped
