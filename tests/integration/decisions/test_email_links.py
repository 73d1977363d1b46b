"""Requests by email and one-time decision links (DESIGN §14), through the real parts: a real SMTP
server (aiosmtpd) receives the mails the worker's activity sends, and the link in a mail is
followed through the real app (httpx) and decides exactly once, as the person it was sent to,
with every check of the HTTP resume.

Refused: a second use, an expired link, a link of a request decided elsewhere, a POST without
the page's form token or from another site, a forged token (404); a prefetcher's GET or HEAD
decides nothing. An SMTP server that refuses or hangs is retried, and the run never waits on it.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio

from signoff.engine import links
from signoff.engine.models import DecisionLink, JobStatus, utcnow
from tests.helpers import scaled
from tests.integration.api.conftest import Harness, harness
from tests.integration.decisions.conftest import (
    PEOPLE,
    Inbox,
    gate_flow,
    resume,
    run_suspended,
    uid,
    upload,
    user_name,
)

LINK = re.compile(r"https?://[^/\s\"]+(/d/([A-Za-z0-9_-]{43}))(?:\?action=([a-z_]+))?")
CSRF = re.compile(r'name="csrf" value="([^"]*)"')


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client, inbox) -> AsyncIterator[Harness]:
    port = inbox.port
    async with harness(store_backend, tmp_path_factory.mktemp("mail"), temporal_client,
                       smtp_url=f"smtp://127.0.0.1:{port}", smtp_from="signoff@example.com",
                       notify_timeout_seconds=2, public_url="https://signoff.example.com") as hx:
        for name in PEOPLE:
            user = await hx.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            hx.users[name] = (user.id, await hx.store.create_api_key(user.id))
        for name in ("alice", "bob", "carol"):  # dave and erin have no address
            await hx.store.set_contacts(uid(hx, name), {"email": f"{name}-{uuid.uuid4().hex[:6]}@example.com"},
                                        verified=True)
        yield hx


async def _address(h: Harness, who: str) -> str:
    user = await h.store.get_user(uid(h, who))
    assert user is not None and user.email
    return user.email


async def _mails(box: Inbox, address: str, n: int = 1, timeout: float = 60) -> list[email.message.EmailMessage]:
    deadline = time.monotonic() + timeout
    while len(box.to(address)) < n:
        assert time.monotonic() < deadline, f"{n} mail(s) to {address} never came: {len(box.to(address))}"
        await asyncio.sleep(0.05)
    return box.to(address)


def _parts(msg: email.message.EmailMessage) -> tuple[str, str]:
    text = msg.get_body(("plain",))
    html = msg.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


def _links(text: str) -> dict[str | None, str]:
    """action (None: the plain link) -> path."""
    return {m.group(3): m.group(1) + (f"?action={m.group(3)}" if m.group(3) else "") for m in LINK.finditer(text)}


async def _decisions(h: Harness, job_id: str) -> list[dict[str, Any]]:
    return [e.data for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]


async def _page(h: Harness, path: str) -> tuple[int, str]:
    async with h.client() as c:
        r = await c.get(path)
    return r.status_code, r.text


async def _post(h: Harness, path: str, form: dict[str, str], **headers: str) -> tuple[int, str]:
    async with h.client() as c:
        r = await c.post(path.split("?")[0], data=form, headers=headers)
    return r.status_code, r.text


async def _assigned(h: Harness, box: Inbox, who: str = "bob", **params: Any) -> tuple[str, str, email.message.EmailMessage]:
    """A run of alice's waiting for ``who`` (its only approver); its job id, the person's
    address and the mail they got."""
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, who)], **params}, name="Refunds"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    address = await _address(h, who)
    before = len(box.to(address))
    mails = await _mails(box, address, before + 1)
    return job_id, address, mails[-1]


async def test_the_mail_asks_and_its_link_decides_once_as_that_person(h: Harness, inbox) -> None:
    box = inbox
    job_id, address, msg = await _assigned(h, box)
    assert msg["Subject"] == "[signoff] Refunds: Approve this refund?"
    assert msg["From"] == "signoff@example.com" and msg["To"] == address
    text, html = _parts(msg)
    assert "refund 42" in text and "Approve this refund?" in html  # the prompt and the run's input
    found = _links(text)
    assert set(found) == {None, "approve", "reject"} and _links(html).keys() == found.keys()
    assert all(u.startswith("https://signoff.example.com/d/") for u in LINK.findall(text) and
               [m.group(0) for m in LINK.finditer(text)])
    assert "<img" not in html and "src=" not in html  # nothing fetched when the mail is opened
    # nobody else was told: alice (the owner, no approver) got nothing about it
    assert not [m for m in box.to(await _address(h, "alice")) if job_id in str(m)]

    # a prefetcher or a scanner opens the link: nothing is decided
    approve = found["approve"]
    async with h.client() as c:
        assert (await c.head(approve)).status_code == 200
        r = await c.get(approve)
    assert r.status_code == 200 and "Approve this refund?" in r.text and "set-cookie" not in r.headers
    assert 'value="approve"' in r.text and 'value="reject"' not in r.text  # the action preselected
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended and await _decisions(h, job_id) == []

    csrf = CSRF.search(r.text).group(1)  # type: ignore[union-attr]
    status, body = await _post(h, approve, {"csrf": csrf, "action_id": "approve"})
    assert status == 200 and "Your decision is recorded" in body, body
    await h.wait_status(job_id, JobStatus.completed)
    decided = await _decisions(h, job_id)
    assert len(decided) == 1 and decided[0]["decided_by"] == uid(h, "bob") and decided[0]["via"] == "email"
    stored = await h.store.get_link(links.token_hash(approve.split("/d/", 1)[1].split("?")[0]))
    assert stored is not None and stored.used_at is not None  # used: the link itself is spent

    # the same link again (replayed, or the button pressed twice): refused, the outcome shown
    status, body = await _post(h, approve, {"csrf": csrf, "action_id": "reject"})
    assert status == 409 and "Decided" in body and await user_name(h, "bob") in body
    code_, page = await _page(h, found["reject"])
    assert code_ == 200 and 'name="action_id"' not in page and await user_name(h, "bob") in page
    assert len(await _decisions(h, job_id)) == 1


async def test_a_post_without_its_page_token_or_from_another_site_decides_nothing(h: Harness, inbox) -> None:
    box = inbox
    job_id, _, msg = await _assigned(h, box)
    path = _links(_parts(msg)[0])[None]
    _, page = await _page(h, path)
    csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
    for form, headers in [({"action_id": "approve"}, {}),
                          ({"action_id": "approve", "csrf": "forged"}, {}),
                          ({"action_id": "approve", "csrf": csrf}, {"origin": "https://evil.example"}),
                          ({"action_id": "approve", "csrf": csrf}, {"sec-fetch-site": "cross-site"})]:
        status, _ = await _post(h, path, form, **headers)
        assert status == 403, (form, headers)
    assert await _decisions(h, job_id) == []
    # the link still works from its page
    status, _ = await _post(h, path, {"csrf": csrf, "action_id": "reject"})
    assert status == 200
    await h.wait_status(job_id, JobStatus.completed)
    assert [d["action_id"] for d in await _decisions(h, job_id)] == ["reject"]


async def test_forged_and_malformed_tokens_are_one_404(h: Harness, inbox) -> None:
    box = inbox
    job_id, _, msg = await _assigned(h, box)
    path = _links(_parts(msg)[0])[None]
    token = path.rsplit("/", 1)[1]
    near = token[:-1] + ("A" if token[-1] != "A" else "B")
    for forged in (near, "x" * 43, "short", token + "x", "%00" * 10, token[:20] + "%2F" + token[23:]):
        async with h.client() as c:
            for r in (await c.get(f"/d/{forged}"), await c.post(f"/d/{forged}", data={"action_id": "approve"}),
                      await c.head(f"/d/{forged}")):
                assert r.status_code == 404, (forged, r.request.method, r.status_code)
    assert await _decisions(h, job_id) == []
    assert await h.store.get_link(token) is None  # the token itself is not what is stored
    # the link grants sight of nothing else: the run and its card still need signing in
    async with h.client() as c:
        for other in (f"/runs/{job_id}", f"/runs/{job_id}/requests/gate:{job_id}", "/", "/history"):
            r = await c.get(other)
            assert r.status_code == 303 and r.headers["location"].startswith("/sign-in"), other
    assert await h.store.get_link(links.token_hash(token)) is not None


async def test_a_link_of_a_request_decided_elsewhere_shows_who_decided(h: Harness, inbox) -> None:
    box = inbox
    job_id, _, msg = await _assigned(h, box)
    path = _links(_parts(msg)[0])["approve"]
    _, page = await _page(h, path)
    csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
    r = await resume(h, "bob", job_id, "reject")
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    status, body = await _post(h, path, {"csrf": csrf, "action_id": "approve"})
    assert status == 409 and await user_name(h, "bob") in body and "Reject" in body
    status, body = await _page(h, path)
    assert status == 200 and 'name="action_id"' not in body
    assert [d["via"] for d in await _decisions(h, job_id)] == ["api"]


async def test_an_expired_link_decides_nothing(h: Harness, inbox) -> None:
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob")], "notify": []}))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    token = "t" * 43
    past = utcnow() - timedelta(seconds=1)
    await h.store.create_link(DecisionLink(token_hash=links.token_hash(token), job_id=job_id,
                                           request_id=f"gate:{job_id}", user_id=uid(h, "bob"), channel="email",
                                           csrf="c" * 32, created_at=past - timedelta(hours=1), expires_at=past))
    status, page = await _page(h, f"/d/{token}")
    assert status == 200 and "expired" in page and 'name="action_id"' not in page
    status, _ = await _post(h, f"/d/{token}", {"csrf": "c" * 32, "action_id": "approve"})
    assert status == 409
    job = await h.store.get_job(job_id)
    assert job is not None and job.status == JobStatus.suspended and await _decisions(h, job_id) == []


async def test_a_link_decides_with_that_persons_checks_and_a_refusal_keeps_it(h: Harness, inbox) -> None:
    """Values that break the schema: 422 on the page, the link still usable; a person who is no
    longer allowed (allow_self_approval false: the owner's own link) is refused."""
    box = inbox
    fields = {"Reject": {"type": "object", "required": ["reason"],
                         "properties": {"reason": {"type": "string", "minLength": 3}}}}
    job_id, _, msg = await _assigned(h, box, fields=fields)
    path = _links(_parts(msg)[0])["reject"]
    _, page = await _page(h, path)
    assert 'name="v.reject.reason"' in page
    csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
    status, body = await _post(h, path, {"csrf": csrf, "action_id": "reject", "v.reject.reason": "x"})
    assert status == 422, body
    assert await _decisions(h, job_id) == []
    status, body = await _post(h, path, {"csrf": csrf, "action_id": "reject", "v.reject.reason": "too dear"})
    assert status == 200, body
    await h.wait_status(job_id, JobStatus.completed)
    decided = await _decisions(h, job_id)
    assert [(d["action_id"], d["values"], d["via"]) for d in decided] == [("reject", {"reason": "too dear"}, "email")]

    # a link minted for someone who may not decide (the owner, allow_self_approval false): 403
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob")], "allow_self_approval": False,
                                         "notify": []}))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    job = await h.store.get_job(job_id)
    assert job is not None and job.pending is not None
    token = await links.mint(h.store, job_id=job_id, pending=job.pending, user_id=uid(h, "alice"), channel="email",
                             now=utcnow(), ttl_seconds=600)
    _, page = await _page(h, f"/d/{token}")
    csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
    status, body = await _post(h, f"/d/{token}", {"csrf": csrf, "action_id": "approve"})
    assert status == 403 and await _decisions(h, job_id) == []


async def test_header_injection_and_html_in_what_the_flow_says_are_escaped(h: Harness, inbox) -> None:
    box = inbox
    prompt = "Pay <b>now</b>?\r\n<script>alert(1)</script><img src=\"https://evil.example/p.png\">"
    spec = gate_flow({"approvers": [await user_name(h, "carol")], "prompt": prompt})
    spec["name"] = "Refunds\r\nBcc: everyone@evil.example\r\nX-Evil: 1"
    flow_id = await upload(h, spec)  # a flow's name may hold line breaks: the mail must not take them
    job_id = (await run_suspended(h, flow_id))["job_id"]
    address = await _address(h, "carol")
    msg = [m for m in await _mails(box, address) if "Pay" in str(m["Subject"])][-1]
    rcpts = [rc for rc, m in box.mails if m is msg][0]
    assert rcpts == [address]  # nobody added by the flow's name
    assert msg["Bcc"] is None and msg["X-Evil"] is None
    assert "\r" not in msg["Subject"] and "\n" not in msg["Subject"]
    assert msg["Subject"].startswith("[signoff] Refunds Bcc: everyone@evil.example X-Evil: 1: Pay <b>now</b>?")
    _, html = _parts(msg)
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b>now" not in html and "<img" not in html
    # the link's page shows the prompt as the card does (sanitised Markdown: no script, no remote image)
    _, page = await _page(h, _links(_parts(msg)[0])[None])
    assert "<script>alert" not in page and "<img src=\"https://evil" not in page and "&lt;script&gt;" in page
    assert job_id


async def _log(h: Harness, who: str, job_id: str) -> tuple[int, Any]:
    async with h.client(who) as c:
        r = await c.get(f"/api/v2/workflows/{job_id}/notifications")
    return r.status_code, r.json()


async def test_an_smtp_server_that_refuses_or_hangs_is_retried_and_logged(h: Harness, inbox) -> None:
    box = inbox
    box.refuse, box.hang = 2, 1
    try:
        job_id, address, msg = await _assigned(h, box)  # refused twice, then no answer, then taken
    finally:
        box.refuse, box.hang = 0, 0
    deadline = time.monotonic() + 30
    while True:  # the attempt that got through logs itself once the server took the mail
        status, log = await _log(h, "alice", job_id)
        if status != 200 or any(n["delivered"] for n in log):
            break
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)
    assert status == 200
    attempts = sorted((n["attempt"], n["delivered"], n["channel"], n["user_id"]) for n in log)
    assert attempts == [(1, False, "email", uid(h, "bob")), (2, False, "email", uid(h, "bob")),
                        (3, False, "email", uid(h, "bob")), (4, True, "email", uid(h, "bob"))]
    errors = [n["error"] for n in sorted(log, key=lambda n: n["attempt"])]
    assert "451" in errors[0] and "did not answer" in errors[2] and errors[3] is None
    # the mail that came works (the links of the failed attempts were never seen by anyone)
    path = _links(_parts(msg)[0])["approve"]
    _, page = await _page(h, path)
    status, _ = await _post(h, path, {"csrf": CSRF.search(page).group(1), "action_id": "approve"})  # type: ignore[union-attr]
    assert status == 200
    await h.wait_status(job_id, JobStatus.completed)
    # the log is the owner's: an approver sees the run, not whom it asked; a stranger nothing
    assert (await _log(h, "bob", job_id))[0] == 403
    assert (await _log(h, "erin", job_id))[0] == 404


async def test_a_mail_sent_whose_log_write_failed_is_not_sent_again(h: Harness, inbox,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The SMTP server took the mail, then recording that failed: the activity fails and is
    retried, and the retry finds the claim of the attempt whose outcome is unknown and does not
    mail again (at most once, docs/channels.md "Once"); the mail that went works."""
    box = inbox
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob")]}, name="Once"))
    real_claim, real_finish = h.store.claim_notification, h.store.finish_notification
    ours: set[str] = set()
    failed: list[str] = []

    async def claim(**kw: Any) -> Any:
        got = await real_claim(**kw)
        job = await h.store.get_job(kw["job_id"])
        if got[0] is not None and job is not None and job.flow_id == flow_id:
            ours.add(got[0].id)
        return got

    async def finish(notification_id: str, **kw: Any) -> None:
        if notification_id in ours and kw.get("delivered") and not failed:
            failed.append(notification_id)
            raise RuntimeError("the database went away after the SMTP server took the mail")
        await real_finish(notification_id, **kw)

    monkeypatch.setattr(h.store, "claim_notification", claim)
    monkeypatch.setattr(h.store, "finish_notification", finish)
    address = await _address(h, "bob")
    before = len(box.to(address))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    await _mails(box, address, before + 1)
    deadline = time.monotonic() + 60
    while len((log := (await _log(h, "alice", job_id))[1])) < 2:  # the retry came, and logged itself
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)
    assert failed, "the forced failure never happened"
    rows = sorted((n["attempt"], n["delivered"], n["error"] or "") for n in log)
    assert [(a, d) for a, d, _ in rows] == [(1, False), (2, False)], rows
    assert rows[0][2] == "" and "not sent again" in rows[1][2]
    sent = [m for m in box.to(address)[before:] if m["Subject"].startswith("[signoff] Once:")]
    assert len(sent) == 1  # one mail, although the activity ran twice
    path = _links(_parts(sent[0])[0])["approve"]
    _, page = await _page(h, path)
    status, _ = await _post(h, path, {"csrf": CSRF.search(page).group(1), "action_id": "approve"})  # type: ignore[union-attr]
    assert status == 200
    await h.wait_status(job_id, JobStatus.completed)
    assert len([m for m in box.to(address)[before:] if m["Subject"].startswith("[signoff] Once:")]) == 1


async def test_a_dead_smtp_server_never_holds_the_run(h: Harness, inbox) -> None:
    box = inbox
    box.refuse = 10_000
    try:
        flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob")]}))
        job_id = (await run_suspended(h, flow_id))["job_id"]
        deadline = time.monotonic() + 60
        while not (await _log(h, "alice", job_id))[1]:  # an attempt failed
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        r = await resume(h, "bob", job_id, "approve")
        assert r.status_code == 200, r.text
        await h.wait_status(job_id, JobStatus.completed)
    finally:
        box.refuse = 0
    assert [d["via"] for d in await _decisions(h, job_id)] == ["api"]
    assert not any(n["delivered"] for n in (await _log(h, "alice", job_id))[1])


async def test_who_is_told(h: Harness, inbox) -> None:
    """No approvers: the run's owner; notify []: nobody; an approver without an address is
    skipped; a group's members are told."""
    box = inbox
    alice, carol = await _address(h, "alice"), await _address(h, "carol")
    before = len(box.to(alice))
    flow_id = await upload(h, gate_flow({}))
    own = (await run_suspended(h, flow_id))["job_id"]
    await _mails(box, alice, before + 1)
    quiet = await upload(h, gate_flow({"approvers": [await user_name(h, "carol")], "notify": []}))
    silent = (await run_suspended(h, quiet))["job_id"]
    nobody = await upload(h, gate_flow({"approvers": [await user_name(h, "dave")]}))
    unreachable = (await run_suspended(h, nobody))["job_id"]
    async with h.client("alice") as c:
        group = f"g-{uuid.uuid4().hex[:6]}"
        r = await c.post("/api/v1/groups", json={"name": group, "members": [await user_name(h, "carol")]})
        assert r.status_code == 201, r.text
    grouped = await upload(h, gate_flow({"approvers": [f"group:{group}"]}))
    carols = len(box.to(carol))
    via_group = (await run_suspended(h, grouped))["job_id"]
    await _mails(box, carol, carols + 1)
    deadline = time.monotonic() + 30
    while not (await _log(h, "alice", via_group))[1] or not (await _log(h, "alice", own))[1]:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert (await _log(h, "alice", silent))[1] == [] and (await _log(h, "alice", unreachable))[1] == []
    assert [n["user_id"] for n in (await _log(h, "alice", own))[1]] == [uid(h, "alice")]
    assert [n["user_id"] for n in (await _log(h, "alice", via_group))[1]] == [uid(h, "carol")]


async def test_a_link_racing_the_api_decides_exactly_once(h: Harness, inbox) -> None:
    """The link's POST (bob) and an HTTP resume (carol) at once, 20 times (tests/helpers.scaled): one decision each
    time, whoever is first; the loser is told who won."""
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob"), await user_name(h, "carol")],
                                         "notify": []}))
    won = {"email": 0, "api": 0}
    n = scaled(20)
    for _ in range(n):
        job_id = (await run_suspended(h, flow_id))["job_id"]
        job = await h.store.get_job(job_id)
        assert job is not None and job.pending is not None
        token = await links.mint(h.store, job_id=job_id, pending=job.pending, user_id=uid(h, "bob"), channel="email",
                                 now=utcnow(), ttl_seconds=600)
        _, page = await _page(h, f"/d/{token}")
        csrf = CSRF.search(page).group(1)  # type: ignore[union-attr]
        (status, body), api = await asyncio.gather(_post(h, f"/d/{token}", {"csrf": csrf, "action_id": "approve"}),
                                                   resume(h, "carol", job_id, "reject"))
        await h.wait_status(job_id, JobStatus.completed)
        decided = await _decisions(h, job_id)
        assert len(decided) == 1, decided
        won[decided[0]["via"]] += 1
        if decided[0]["via"] == "email":
            assert status == 200 and api.status_code == 409, (status, api.text)
        else:
            assert api.status_code == 200 and status == 409 and await user_name(h, "carol") in body, (status, body)
    assert sum(won.values()) == n


async def test_a_request_answered_elsewhere_is_closed_by_mail(h: Harness, inbox) -> None:
    """bob and carol were mailed; bob decides through the API: carol is told how it ended (bob,
    who decided, is not)."""
    box = inbox
    bob, carol = await _address(h, "bob"), await _address(h, "carol")
    flow_id = await upload(h, gate_flow({"approvers": [await user_name(h, "bob"), await user_name(h, "carol")]},
                                        name="Closing"))
    n_bob, n_carol = len(box.to(bob)), len(box.to(carol))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    await _mails(box, bob, n_bob + 1)
    await _mails(box, carol, n_carol + 1)
    deadline = time.monotonic() + 30
    while len([n for n in (await _log(h, "alice", job_id))[1] if n["delivered"]]) < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert (await resume(h, "bob", job_id, "approve")).status_code == 200
    closing = (await _mails(box, carol, n_carol + 2))[-1]
    assert closing["Subject"] == "[signoff] Closing: answered"
    text, html = _parts(closing)
    assert f"approve by {await user_name(h, 'bob')}" in text and "/d/" not in text and "/d/" not in html
    await h.wait_status(job_id, JobStatus.completed)
    deadline = time.monotonic() + 30
    # (the row is claimed before the mail is sent and marked delivered once the server took it)
    while not [n for n in (await _log(h, "alice", job_id))[1] if n["event"] == "human_input_decision"
               and n["delivered"]]:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    closed = [n for n in (await _log(h, "alice", job_id))[1] if n["event"] == "human_input_decision"]
    assert [(n["user_id"], n["delivered"]) for n in closed] == [(uid(h, "carol"), True)]
    assert len(box.to(bob)) == n_bob + 1  # the decider got no closing note
