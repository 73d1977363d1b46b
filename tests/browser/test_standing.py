"""The standing approvals page in a real browser (DESIGN §17): the person's rules listed, fitting
a phone's width and a desktop's, and revoked with its button (the form's CSRF token as every page
form); the header links to it."""

from __future__ import annotations

import uuid
from datetime import timedelta

from playwright.async_api import Browser, expect

from signoff.engine.models import StandingApproval, utcnow
from tests.browser.conftest import NARROW, Site, person, shoot


async def test_the_page_lists_a_rule_and_revokes_it(browser: Browser, site: Site) -> None:
    alice_id = site.h.users["alice"][0]
    now = utcnow()
    rule = await site.h.store.create_standing_approval(StandingApproval(
        id=f"sa_{uuid.uuid4().hex}", maker_id=alice_id, flow_id=site.h.flows["refund"], flow_owner_id=alice_id,
        tool=f"send_refund_{uuid.uuid4().hex[:6]}", scope="session", session_id="support-42",
        session_user_id=alice_id, job_id="j", request_id="r", created_at=now, expires_at=now + timedelta(hours=8)))
    async with person(browser, site, "alice", viewport=NARROW) as alice:
        page = alice.page
        await page.get_by_role("link", name="Standing approvals").click()
        row = page.locator(f'tr[data-rule="{rule.id}"]')
        await expect(row).to_contain_text(rule.tool)
        await expect(row).to_contain_text("support-42")
        await expect(row).to_contain_text("active")
        await shoot(page, "standing-approvals")
        await page.set_viewport_size(NARROW)
        await row.get_by_role("button", name="Revoke").click()
        await expect(page.locator("p.alert[role=status]")).to_contain_text("Revoked")
        await expect(page.locator(f'tr[data-rule="{rule.id}"]')).to_contain_text("revoked")
        assert (await site.h.store.get_standing_approval(rule.id)).revoked_at is not None
        alice.clean()
