"""The approver's workbench, the rest (issue 29) in a real browser against a real signoff: the
inbox sorted by deadline or age, searched by input, flow and session, grouped by flow (the bulk
action and j/k still work inside the groups); every time in the browser's own time zone with a
relative hint (server-side one UTC format); the Flows page's recent runs stacked on a phone; a
flow's own page (graph, spec, runs, share, export, delete; a stranger gets the 404 page).

One module-scoped site; each test loads a page and checks several things on it."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import NARROW, Site, person
from tests.browser.test_card import refund_agent, shoot
from tests.browser.test_pages import pause
from tests.browser.test_rules import gate_flow, people, quorum

pytestmark = pytest.mark.temporal

WIDE_1440 = {"width": 1440, "height": 900}
ZONE = "Asia/Kathmandu"  # UTC+05:45: no browser default and no rounding hides a wrong zone


async def row_ids(page: Page) -> list[str]:
    return await page.locator("[data-live-inbox] > li.req").evaluate_all("rows => rows.map(r => r.dataset.requestId)")


async def test_inbox_sorts_searches_and_groups(browser: Browser, site: Site) -> None:
    who = await people(site, "uma")
    uma = who["uma"]
    plain = await gate_flow(site, owner=uma)  # no deadline
    soon = await gate_flow(site, owner=uma, timeout=600)  # 10 min
    later = await gate_flow(site, owner=uma, timeout=7200)  # 2 h
    # paused in this order (oldest first): none, soon, later, soon again
    r_plain = await pause(site, user=uma, flow=plain, input_value="Laptop for Alpha team", session_id="north-7")
    r_soon = await pause(site, user=uma, flow=soon, input_value="Refund GAMMA order", session_id="south-2")
    r_later = await pause(site, user=uma, flow=later, input_value="Office chairs", session_id="east-1")
    r_soon2 = await pause(site, user=uma, flow=soon, input_value="Train tickets", session_id="west-9")
    rid = {k: r["human_request"]["request_id"] for k, r in
           (("plain", r_plain), ("soon", r_soon), ("later", r_later), ("soon2", r_soon2))}
    async with person(browser, site, uma, viewport=WIDE_1440, timezone_id=ZONE) as who_uma:
        page = who_uma.page
        await page.goto(site.url + "/")
        assert await row_ids(page) == [rid["soon2"], rid["later"], rid["soon"], rid["plain"]]  # newest first
        # times: written once on the server in UTC, shown in the browser's zone with a hint
        raw = await (await page.request.get(site.url + "/")).text()
        assert re.search(r"<time datetime=\"[^\"]+\" data-when [^>]*>\d{4}-\d\d-\d\d \d\d:\d\d UTC · (just now|\d+ min ago)</time>",
                         raw), "the server's one format"
        due = page.locator(f"li[data-request-id='{rid['soon']}'] .deadline time")
        iso = await due.get_attribute("datetime")
        local = datetime.fromisoformat(iso).astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%d %H:%M")
        await expect(due).to_have_text(re.compile(re.escape(local) + r" GMT\+5:45 · in (9|10) min"))
        asked = page.locator(f"li[data-request-id='{rid['plain']}'] .req-asked time")
        await expect(asked).not_to_contain_text("UTC")
        await expect(asked).to_contain_text(re.compile(r"GMT\+5:45 · (just now|\d+ min ago)"))

        # by deadline, soonest first, those without one last; the sort stays in the links and the live stream
        await page.get_by_label("Sort", exact=True).select_option("deadline")
        await page.get_by_role("button", name="Apply").click()
        await expect(page).to_have_url(re.compile(r"sort=deadline"))
        assert await row_ids(page) == [rid["soon"], rid["soon2"], rid["later"], rid["plain"]]
        assert "sort=deadline" in (await page.locator("[data-live-inbox]").get_attribute("data-live-url") or "")
        # waiting longest first
        await page.goto(site.url + "/?sort=oldest")
        assert await row_ids(page) == [rid["plain"], rid["soon"], rid["later"], rid["soon2"]]
        await expect(page.get_by_label("Sort", exact=True)).to_have_value("oldest")

        # search: the run's input (any case), the session, the flow's name; a pattern is plain text
        for typed, found in (("gamma", [rid["soon"]]), ("NORTH-7", [rid["plain"]]), ("Laptop for alpha", [rid["plain"]]),
                             ("t.*s", [])):
            await page.goto(site.url + "/")
            await page.get_by_label("Search", exact=True).fill(typed)
            await page.get_by_label("Search", exact=True).press("Enter")  # a GET form: no script needed
            await expect(page.locator("[data-inbox-summary]")).to_contain_text("matching")
            assert await row_ids(page) == found, typed
        async with site.api(uma) as c:
            flow_name = (await c.get(f"/api/v1/flows/{later}")).json()["name"]
        await page.goto(site.url + "/?q=" + flow_name.split()[-1])
        assert await row_ids(page) == [rid["later"]]
        long = "x" * 5000  # bounded: cut to 200 characters, never an error
        resp = await page.goto(site.url + "/?q=" + long)
        assert resp is not None and resp.status == 200
        assert len(await page.get_by_label("Search", exact=True).input_value()) == 200

        # grouped by flow: a heading per flow with its count; j/k and the bulk action work inside
        await page.goto(site.url + "/?group=flow&sort=deadline")
        headings = page.locator("[data-live-inbox] > li.req-group h2")
        await expect(headings).to_have_count(3)
        texts = [t.strip() for t in await headings.all_text_contents()]
        assert sum("(2 waiting)" in t for t in texts) == 1 and sum("(1 waiting)" in t for t in texts) == 2, texts
        await expect(page.get_by_label("Group by flow")).to_be_checked()
        await page.keyboard.press("j")
        first = page.locator("[data-live-inbox] > li.req").first
        await expect(first).to_have_class(re.compile("is-current"))
        await expect(first.locator(".req-title a")).to_be_focused()
        await page.keyboard.press("j")
        await expect(page.locator("[data-live-inbox] > li.req").nth(1)).to_have_class(re.compile("is-current"))
        await shoot(page, "inbox-grouped")
        for key in ("soon", "plain"):  # rows under two different headings
            await page.locator(f"li[data-request-id='{rid[key]}'] .req-pick").check()
        await page.get_by_role("button", name="Approve all ticked").click()
        await expect(page.locator(".bulk-notice")).to_contain_text("2 decided")
        assert sorted(await row_ids(page)) == sorted([rid["later"], rid["soon2"]])
        who_uma.clean()


async def test_flows_page_on_a_phone_and_a_flows_own_page(browser: Browser, site: Site) -> None:
    who = await people(site, "ola", "pia", "quinn")
    flow_id = await gate_flow(site, owner=who["ola"])
    await pause(site, user=who["ola"], flow=flow_id, input_value="A run for the table", session_id="phone-1")
    async with person(browser, site, who["ola"], viewport=NARROW) as ola:
        page = ola.page
        await page.goto(site.url + "/flows")
        table = page.locator(".runs-table")
        await expect(table).to_be_visible()
        # at 390 px every cell is a stacked row as wide as the table, none narrower than its content
        cells = await table.locator("tbody td").evaluate_all("""tds => tds.map(td => ({
            label: td.dataset.label, width: td.getBoundingClientRect().width, content: td.scrollWidth,
            client: td.clientWidth, table: td.closest('table').getBoundingClientRect().width}))""")
        assert cells and all(c["content"] <= c["client"] + 1 for c in cells), cells
        assert all(c["width"] >= c["table"] - 24 for c in cells), cells
        await shoot(page, "flows")
        # the flow's own page, linked from the list
        await page.get_by_role("link", name=re.compile("Spend approval")).first.click()
        await expect(page).to_have_url(re.compile(r"/flows/[^/?]+$"))
        url = page.url
        await expect(page.locator(".graph .node")).to_have_count(4)
        await expect(page.locator(".graph")).to_contain_text("HumanInput")
        await page.get_by_text("The spec as JSON").click()
        await expect(page.locator(".spec-box pre")).to_contain_text('"type": "HumanInput"')
        await expect(page.locator(".runs-table")).to_contain_text("phone-1")
        async with page.expect_download() as dl:
            await page.get_by_role("link", name="Export spec").click()
        exported = json.loads(Path(await (await dl.value).path()).read_text())
        assert [n["id"] for n in exported["nodes"]] == ["ask", "gate", "ok", "no"]
        await shoot(page, "flow")
        # share with pia: she may run it (and sees it, without the owner's forms); then unshare
        await page.get_by_label(re.compile("Share with")).fill(who["pia"])
        await page.get_by_role("button", name="Share", exact=True).click()
        await expect(page.locator(".alert-info")).to_contain_text(f"Shared with {who['pia']}")
        async with site.api(who["pia"]) as c:
            assert (await c.get(f"/api/v1/flows/{flow_id}")).status_code == 200
        async with person(browser, site, who["pia"]) as pia:
            await pia.page.goto(url)
            await expect(pia.page.get_by_role("heading", name=re.compile("Spend approval"))).to_be_visible()
            await expect(pia.page.get_by_role("heading", name="Delete")).to_have_count(0)
            pia.clean()
        await page.get_by_role("button", name=re.compile("Stop sharing")).click()
        await expect(page.locator(".alert-info")).to_contain_text("may no longer run it")
        async with site.api(who["pia"]) as c:
            assert (await c.get(f"/api/v1/flows/{flow_id}")).status_code == 404
        await page.get_by_label(re.compile("Share with")).fill("nobody-" + who["pia"])
        await page.get_by_role("button", name="Share", exact=True).click()
        await expect(page.get_by_role("alert")).to_contain_text("No one is named")
        # a stranger: the HTML 404 page, the same as a made-up id
        async with person(browser, site, who["quinn"]) as quinn:
            for target in (url, site.url + "/flows/no-such-flow", url + "/export"):
                resp = await quinn.page.goto(target)
                assert resp is not None and resp.status == 404
                await expect(quinn.page.get_by_role("heading", name="Not found")).to_be_visible()
            quinn.clean()
        # delete: only once confirmed (the browser asks for the box; the server checks it too)
        await page.goto(url)
        token = await page.locator("form[action$='/delete'] input[name=csrf]").input_value()
        unconfirmed = await page.request.post(url + "/delete", form={"csrf": token}, headers={"Origin": site.url})
        assert unconfirmed.status == 422 and "Tick the box to confirm" in await unconfirmed.text()
        no_token = await page.request.post(url + "/delete", form={"confirm": "yes"}, headers={"Origin": site.url})
        assert no_token.status == 403
        await page.get_by_role("button", name="Delete flow").click()
        await expect(page).to_have_url(url)  # the required box held it back
        await page.get_by_label(re.compile("Delete “")).check()
        await page.get_by_role("button", name="Delete flow").click()
        await expect(page).to_have_url(re.compile(r"/flows\?deleted="))
        await expect(page.locator(".alert-info")).to_contain_text("Deleted")
        async with site.api(who["ola"]) as c:
            assert (await c.get(f"/api/v1/flows/{flow_id}")).status_code == 404
        ola.clean()




async def test_the_docs_pictures_a_realistic_inbox_and_a_card_with_its_context(browser: Browser, site: Site) -> None:
    """The README's and docs/pages.md's pictures (tests/browser/screenshots/docs-*.png, copied to
    docs/images/ by hand): an approver's inbox with gates under deadlines, a tool approval of an
    agent and a quorum someone else voted on; the tool approval's card with its context."""
    who, quorum_job, quorum_request = await quorum(site)
    dave = who["dave"]
    purchase = await gate_flow(site, dave, "Purchase approval", timeout=4 * 3600)
    contract = await gate_flow(site, dave, "Contract review", timeout=26 * 3600)
    await pause(site, user=dave, flow=contract, input_value="Renew the cleaning contract with Brightway, 12 months",
                session_id="facilities")
    await pause(site, user=dave, flow=purchase, input_value="Laptop for the new designer: MacBook Pro 14, 2,399 EUR",
                session_id="onboarding-ana")
    turn = "The refund is **15 EUR**: 3 cups at 5 EUR. I send it to order 1234."
    with refund_agent(site, turn) as (_llm, _target, spec):
        async with site.api(dave) as c:
            r = await c.post("/api/v1/flows", json={**spec, "name": "Refund agent"})
            assert r.status_code == 201, r.text
        tool = await pause(site, user=dave, flow=r.json()["id"], input_value="Refund order 1234: 3 broken cups",
                           session_id="support-1234")
        assert tool["human_request"]["kind"] == "tool_approval"
        await pause(site, user=dave, flow=purchase, input_value="Standing desk for Omar, 640 EUR", session_id="office")
        async with person(browser, site, dave, viewport=WIDE_1440) as d:
            page = d.page
            await page.goto(site.url + "/")
            rows = page.locator("[data-live-inbox] > li.req")
            await expect(rows).to_have_count(5)
            await expect(page.locator(f"li[data-request-id='{quorum_request}']")).to_contain_text("Needs 2 approvals")
            await expect(page.locator(".badge-tool")).to_have_count(1)
            await expect(page.locator(".deadline")).to_have_count(3)
            await shoot(page, "docs-inbox")
            await page.goto(f"{site.url}/runs/{tool['job_id']}/requests/{tool['human_request']['request_id']}")
            await expect(page.locator("aside.card-context [data-ctx-input]")).to_have_text("Refund order 1234: 3 broken cups")
            await shoot(page, "docs-card")
            d.clean()
