"""Accessibility checked by axe-core (issue 29): every page a person meets — sign-in (signed out),
inbox, a gate card, a tool-approval card, History, Flows, a flow's page, a run page, the standing
approvals page, the decision link page and a contact's confirmation page (signed out) — has no axe
violation of impact serious or critical, at
1440 x 900 and 390 x 844.

axe-core is the npm package beside @ag-ui/client (tests/agui/package.json; installed by
``scripts/ensure-agui-client``). The pages' CSP allows no inline script, so the contexts of this
test alone are made with ``bypass_csp=True`` to inject it (``page.add_script_tag`` with its
content); every other browser test keeps the CSP on and fails on any violation of it."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from signoff.engine import links, verify
from signoff.engine.models import ContactToken, StandingApproval, utcnow
from tests.browser.conftest import NARROW, Site, person
from tests.browser.test_card import _agent_run, refund_agent
from tests.browser.test_pages import pause

pytestmark = pytest.mark.temporal

AXE = Path(__file__).resolve().parents[1] / "agui" / "node_modules" / "axe-core" / "axe.min.js"
WIDE_1440 = {"width": 1440, "height": 900}
BAD = ("serious", "critical")


@dataclass
class Pages:
    gate: str
    tool: str
    run: str
    link: str
    confirmation: str


@pytest_asyncio.fixture(scope="module")
async def pages(site: Site) -> AsyncIterator[Pages]:
    """What the pages show: a waiting gate, a waiting tool call, a decided run (History), a
    standing approval, and a decision link for the gate."""
    if not AXE.exists():
        pytest.fail(f"axe-core is not at {AXE}: run ./scripts/ensure-agui-client (make test does)")
    gate = await pause(site)
    decided = await pause(site)
    async with site.api("alice") as c:
        r = await c.post(f"/api/v2/workflows/{decided['job_id']}/resume",
                         json={"request_id": decided["human_request"]["request_id"],
                               "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    alice_id = site.h.users["alice"][0]
    now = utcnow()
    await site.h.store.create_standing_approval(StandingApproval(
        id=f"sa_{uuid.uuid4().hex}", maker_id=alice_id, flow_id=site.h.flows["refund"], flow_owner_id=alice_id,
        tool="send_refund", scope="session", session_id="support-42", session_user_id=alice_id, job_id="j",
        request_id="r", created_at=now, expires_at=now + timedelta(hours=8)))
    job = await site.h.store.get_job(gate["job_id"])
    assert job is not None and job.pending is not None
    token = await links.mint(site.h.store, job_id=job.job_id, pending=job.pending, user_id=alice_id, channel="email",
                             now=now, ttl_seconds=3600)
    # a contact's confirmation page (docs/channels.md, "Verified contacts"): alice's pending address
    await site.h.store.set_contacts(alice_id, {"email": f"alice-{uuid.uuid4().hex[:6]}@example.com"}, verified=False)
    alice = await site.h.store.get_user(alice_id)
    assert alice is not None and alice.email
    confirm = secrets.token_urlsafe(32)
    await site.h.store.create_contact_token(
        ContactToken(token_hash=verify.token_hash(confirm), user_id=alice_id, channel="email", address=alice.email,
                     csrf=secrets.token_urlsafe(24), created_at=now, expires_at=now + timedelta(hours=1)),
        since=now - timedelta(hours=1), max_per_user=100, max_per_address=100)
    with refund_agent(site) as (_llm, _target, spec):
        tool_job, tool_request = await _agent_run(site, spec)
        yield Pages(gate=f"/runs/{gate['job_id']}/requests/{gate['human_request']['request_id']}",
                    tool=f"/runs/{tool_job}/requests/{tool_request}", run=f"/runs/{decided['job_id']}",
                    link=links.link_url("", token, "approve"), confirmation=verify.verify_url("", confirm))


async def violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's violations of impact serious or critical on the page as it is now."""
    await page.add_script_tag(content=AXE.read_text())
    found = await page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => ({target: n.target.join(' '), summary: n.failureSummary}))}));
    }""")
    return [v for v in found if v["impact"] in BAD]


@pytest.mark.parametrize("viewport", [WIDE_1440, NARROW], ids=["1440", "390"])
async def test_no_serious_or_critical_axe_violation(browser: Browser, site: Site, pages: Pages,
                                                    viewport: dict[str, int]) -> None:
    found: dict[str, list[dict[str, Any]]] = {}
    # signed out: the sign-in page and a mailed decision link
    context = await browser.new_context(viewport=viewport, bypass_csp=True)
    try:
        page = await context.new_page()
        for name, path, ready in (("sign-in", "/sign-in", page.get_by_label("API key")),
                                  ("decision link", pages.link, page.get_by_role("button", name="Approve")),
                                  ("contact confirmation", pages.confirmation,
                                   page.get_by_role("button", name="It is me: confirm"))):
            await page.goto(site.url + path)
            await expect(ready).to_be_visible()
            found[name] = await violations(page)
        # the check can fail: a button without a name is a critical violation, and axe reports it
        await page.evaluate("document.querySelector('main').append(document.createElement('button'))")
        assert [v["id"] for v in await violations(page)] == ["button-name"]
    finally:
        await context.close()
    async with person(browser, site, "alice", viewport=viewport, bypass_csp=True) as alice:
        page = alice.page
        for name, path, ready in (
                ("inbox", "/", page.get_by_role("heading", name="Inbox", exact=True)),
                ("gate card", pages.gate, page.get_by_role("button", name="Approve")),
                ("tool-approval card", pages.tool, page.locator("form[data-tool-form]")),
                ("history", "/history", page.get_by_role("heading", name="History", exact=True)),
                ("flows", "/flows", page.get_by_role("heading", name="Flows", exact=True)),
                ("a flow", f"/flows/{site.h.flows['refund']}", page.get_by_role("heading", name="Shared with")),
                ("run", pages.run, page.locator("main")),
                ("standing approvals", "/standing-approvals", page.locator("tr[data-rule]").first)):
            await page.goto(site.url + path)
            await expect(ready).to_be_visible()
            found[name] = await violations(page)
        alice.clean()
    bad = {name: v for name, v in found.items() if v}
    assert bad == {}, "\n".join(
        f"{name}: {v['id']} ({v['impact']}) {v['help']}: {n['target']} — {n['summary']}"
        for name, vs in bad.items() for v in vs for n in v["nodes"])
