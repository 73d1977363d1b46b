"""A decision link from a real mail, followed in Chromium (DESIGN §14): a real SMTP server
(aiosmtpd) receives the request's mail; its Approve button opens the link's page in a browser
that never signed in; opening it decides nothing, the page's button decides once, as the person
the mail was sent to, and the page then shows who decided; no cookie is set."""

from __future__ import annotations

import asyncio
import email
import email.policy
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from aiosmtpd.controller import Controller
from playwright.async_api import Browser, expect

from signoff.devserver import free_port
from signoff.engine.models import JobStatus
from tests.browser.conftest import WIDE, Person, Site, watch
from tests.integration.api.conftest import harness, serving

pytestmark = pytest.mark.temporal


class Inbox:
    def __init__(self) -> None:
        self.mails: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.mails.append(email.message_from_bytes(envelope.content, policy=email.policy.default))  # type: ignore[arg-type]
        return "250 OK"


@pytest.fixture(scope="module")
def inbox() -> Iterator[tuple[Inbox, int]]:
    box, port = Inbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


@pytest_asyncio.fixture(scope="module")
async def site(store_backend, tmp_path_factory, temporal_client, inbox) -> AsyncIterator[Site]:
    async with harness(store_backend, tmp_path_factory.mktemp("links"), temporal_client,
                       smtp_url=f"smtp://127.0.0.1:{inbox[1]}", smtp_from="signoff@example.com") as h:
        user = await h.store.create_user(f"bob-{uuid.uuid4().hex[:6]}")
        h.users["bob"] = (user.id, await h.store.create_api_key(user.id))
        await h.store.set_contacts(user.id, {"email": f"bob-{uuid.uuid4().hex[:6]}@example.com"},
                                     verified=True)
        async with serving(h.app, force_exit=True) as url:
            yield Site(h, url, store_backend)


async def test_a_mailed_link_decides_once_in_a_browser_that_never_signed_in(browser: Browser, site: Site,
                                                                             inbox) -> None:
    box, _ = inbox
    bob = await site.h.store.get_user(site.h.users["bob"][0])
    assert bob is not None and bob.email
    spec = {"name": "Refunds", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"prompt": "Refund **45 EUR** to order 1234?",
                                                         "approvers": [bob.name]}},
        {"id": "ok", "type": "TextOutput", "params": {"text": "Refund sent"}},
        {"id": "no", "type": "TextOutput"}],
        "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"},
                  {"from": "gate.branch_reject", "to": "no.input_value"}]}
    async with site.api("alice") as c:
        flow_id = (await c.post("/api/v1/flows", json=spec)).json()["id"]
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "order 1234", "mode": "sync",
                                                    "session_id": f"s-{uuid.uuid4().hex[:8]}"})
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + 60
    while not [m for m in box.mails if m["To"] == bob.email]:
        assert time.monotonic() < deadline, "no mail"
        await asyncio.sleep(0.05)
    mail = [m for m in box.mails if m["To"] == bob.email][-1]
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    path = re.search(r"https?://[^/\s]+(/d/[A-Za-z0-9_-]{43}\?action=approve)", text).group(1)  # type: ignore[union-attr]

    context = await browser.new_context(viewport=WIDE)
    page = await context.new_page()
    who = Person(context, page, site)
    watch(page, who)
    try:
        await page.goto(site.url + path)
        await expect(page.locator(".prompt")).to_contain_text("Refund 45 EUR to order 1234?")
        await expect(page.get_by_role("button", name="Approve")).to_be_visible()
        await expect(page.get_by_role("button", name="Reject")).to_have_count(0)  # the mail's choice, preselected
        job = await site.h.store.get_job(job_id)
        assert job is not None and job.status == JobStatus.suspended  # opening it decided nothing
        await page.get_by_role("button", name="Approve").click()
        await expect(page.locator("[data-link-note]")).to_contain_text("Your decision is recorded")
        await expect(page.locator("[data-outcome]")).to_contain_text(bob.name)
        await site.h.wait_status(job_id, JobStatus.completed)
        decided = [e.data for e in await site.h.store.read_events(job_id) if e.event == "human_input_decision"]
        assert [(d["action_id"], d["decided_by"], d["via"]) for d in decided] == [("approve", bob.id, "email")]
        await page.goto(site.url + path)
        await expect(page.locator("[data-outcome]")).to_contain_text(bob.name)
        await expect(page.locator("form.decide")).to_have_count(0)
        assert await context.cookies() == []
        who.clean()
    finally:
        await context.close()
