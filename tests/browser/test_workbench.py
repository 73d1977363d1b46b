"""Moving through the queue (issue 29) in a real browser against a real signoff: keyboard
shortcuts (j/k, o, a, r, e, ?) that decide ten requests without a mouse, the next waiting request
after a decision, a quick action held 5 s with an honest Undo (nothing sent until then; without
JavaScript it is sent at once and the list stays)."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, expect

from signoff.engine.models import JobStatus
from tests.browser.conftest import Site, person
from tests.browser.test_card import shoot
from tests.browser.test_pages import decision_events, pause
from tests.browser.test_rules import card, gate_flow, people, vote

pytestmark = pytest.mark.temporal


async def gates(site: Site, owner: str, n: int, flow_id: str | None = None) -> list[tuple[str, str]]:
    """``n`` runs of ``owner`` paused at a plain gate (Approve / Reject), oldest first."""
    flow_id = flow_id or await gate_flow(site, owner=owner)
    out = []
    for i in range(n):
        resp = await pause(site, user=owner, flow=flow_id, input_value=f"Purchase {i + 1}: {100 + i} EUR")
        out.append((resp["job_id"], resp["human_request"]["request_id"]))
    return out


async def test_ten_requests_decided_with_the_keyboard_alone(browser: Browser, site: Site) -> None:
    """From the inbox: j selects the first row, o opens it, and a approves; each decision goes to
    the next waiting card with the focus on its primary action, the last one back to the list.
    No mouse, no Tab: ten keys ``a`` decide ten requests, each exactly once."""
    who = await people(site, "kim")
    runs = await gates(site, who["kim"], 10)
    async with person(browser, site, who["kim"]) as kim:
        page = kim.page
        await page.reload()
        await expect(page.locator("[data-live-inbox] > li.req")).to_have_count(10)
        await page.keyboard.press("?")  # the help
        await expect(page.locator("#shortcuts")).to_be_visible()
        await expect(page.locator("#shortcuts")).to_contain_text("Next / previous request")
        await page.keyboard.press("Escape")
        await expect(page.locator("#shortcuts")).to_be_hidden()
        await page.keyboard.press("j")
        await page.keyboard.press("j")
        await page.keyboard.press("k")  # back to the first row (newest first)
        first = page.locator("[data-live-inbox] > li.req").first
        await expect(first).to_have_class(re.compile("is-current"))
        await expect(first.locator(".req-title a")).to_be_focused()
        await page.keyboard.press("o")
        for i in range(10):
            await expect(page).to_have_url(re.compile(r"/runs/[^/]+/requests/"))
            await page.wait_for_load_state("load")
            approve = page.locator(".card-actions").get_by_role("button", name="Approve", exact=True)
            await expect(approve).to_be_focused()  # the primary action, for Enter or a
            if i == 1:
                await expect(page.locator("[data-done]")).to_contain_text("Approve by")
                if site.backend == "sqlite":
                    await shoot(page, "card-next")
            before = page.url
            await page.keyboard.press("a")
            await page.wait_for_url(lambda url, before=before: url != before)
        await expect(page).to_have_url(re.compile(r"/\?decided="))  # nothing else waits: the list
        await expect(page.locator("[data-done]")).to_contain_text("Approve by")
        await expect(page.locator("[data-live-inbox] > li.req")).to_have_count(0)
        for job_id, _ in runs:
            await site.h.wait_status(job_id, JobStatus.completed)
            decided = await decision_events(site, job_id)
            assert [d["action_id"] for d in decided] == ["approve"], decided
        kim.clean()


async def test_r_rejects_from_the_card(browser: Browser, site: Site) -> None:
    who = await people(site, "lee")
    (job_id, request_id), = await gates(site, who["lee"], 1)
    async with person(browser, site, who["lee"]) as lee:
        page = lee.page
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await page.keyboard.press("r")
        await expect(page).to_have_url(re.compile(r"/\?decided="))
        await expect(page.locator("[data-done]")).to_contain_text("Reject by")
        await site.h.wait_status(job_id, JobStatus.completed)
        assert [d["action_id"] for d in await decision_events(site, job_id)] == ["reject"]
        lee.clean()


async def test_a_quick_action_is_held_five_seconds_and_undo_sends_nothing(browser: Browser, site: Site) -> None:
    """A quick action from the list stays in the list: the row goes, an Undo shows, and nothing
    is sent for 5 s (the browser's clock, driven by the test). Undo brings the row back and the
    request still waits after the 5 s; a second action not undone is sent when they pass."""
    who = await people(site, "max")
    (old_job, _), (new_job, new_req) = await gates(site, who["max"], 2)
    async with person(browser, site, who["max"]) as mx:
        page = mx.page
        await page.clock.install()
        await page.reload()
        row = page.locator(f'li.req[data-request-id="{new_req}"]')
        await expect(row).to_be_visible()
        await row.get_by_role("button", name="Approve").click()
        await expect(row).to_be_hidden()
        bar = page.locator("[data-undo-bar]")
        await expect(bar).to_be_visible()
        await expect(bar).to_contain_text("sent in 5 s")
        if site.backend == "sqlite":
            await shoot(page, "inbox-undo")
        await bar.get_by_role("button", name="Undo").click()
        await expect(row).to_be_visible()
        await expect(bar).to_be_hidden()
        await page.clock.fast_forward(10_000)  # well past the hold: the undone action never leaves
        assert (await site.h.store.get_job(new_job)).status == JobStatus.suspended
        assert await decision_events(site, new_job) == []

        other = page.locator("[data-live-inbox] > li.req").nth(1)
        await other.get_by_role("button", name="Reject").click()
        await expect(bar).to_contain_text("Reject")
        assert await decision_events(site, old_job) == []  # held, not sent
        await page.clock.fast_forward(5_100)
        await site.h.wait_status(old_job, JobStatus.completed)
        assert [d["action_id"] for d in await decision_events(site, old_job)] == ["reject"]
        await expect(page).to_have_url(re.compile(r"/$"))  # still the list
        await expect(row).to_be_visible()
        assert (await site.h.store.get_job(new_job)).status == JobStatus.suspended
        mx.clean()


async def test_without_javascript_a_quick_action_is_sent_at_once_and_the_list_stays(browser: Browser,
                                                                                     site: Site) -> None:
    who = await people(site, "noa")
    (job_id, request_id), = await gates(site, who["noa"], 1)
    async with person(browser, site, who["noa"], java_script_enabled=False) as noa:
        page = noa.page
        await page.reload()
        row = page.locator(f'li.req[data-request-id="{request_id}"]')
        await row.get_by_role("button", name="Approve").click()
        await expect(page).to_have_url(re.compile(r"/\?decided="))
        await expect(page.locator("[data-done]")).to_contain_text("Approve by")
        await expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
        await site.h.wait_status(job_id, JobStatus.completed)
        noa.clean()


async def test_votes_and_the_header_count_are_live(browser: Browser, site: Site) -> None:
    """On an open card, another approver's vote shows in the rules line without a reload; the
    person's own vote from elsewhere turns the buttons into "You approved · waiting for 1 more";
    the header's Inbox count, on a card page, follows without a reload and leaves out what the
    person voted on."""
    who = await people(site, "dave", "erin", "carol")
    flow_id = await gate_flow(site, approvers=[who["dave"], who["erin"], who["carol"]], required_approvals=3)
    resp = await pause(site, flow=flow_id, input_value="New laptops, 12,000 EUR")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, who["dave"]) as dave:
        page = dave.page
        await page.goto(card(site, job_id, request_id))
        pill = page.locator("[data-inbox-count]")
        await expect(pill).to_have_text("1")
        await expect(page.locator("[data-rules]")).to_contain_text("3 approvals")
        await vote(site, who["carol"], job_id, request_id)
        await expect(page.locator("[data-rules]")).to_contain_text(f"1 of 3 approvals · {who['carol']} approved")
        await expect(page.get_by_role("button", name="Approve")).to_be_visible()
        await vote(site, who["dave"], job_id, request_id)  # dave votes elsewhere (the API, another tab)
        await expect(page.locator("[data-rules]")).to_contain_text("2 of 3 approvals")
        await expect(page.locator("[data-voted]")).to_have_text("You approved · waiting for 1 more")
        await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(pill).to_have_text("0")  # it waits on others now: not counted
        other = await gate_flow(site, approvers=[who["dave"]])
        await pause(site, flow=other, input_value="Printer toner, 80 EUR")
        await expect(pill).to_have_text("1")  # a new request for dave, counted live
        await page.reload()
        await expect(pill).to_have_text("1")  # the server says the same
        dave.clean()


async def test_history_exports_what_is_filtered_as_csv(browser: Browser, site: Site) -> None:
    """The History's CSV: the filtered rows, every voter, the channel, the values; quoted as CSV
    quotes, and a cell that a spreadsheet would run as a formula starts with a quote."""
    import csv
    import io

    who = await people(site, "ola")
    flow_id = await gate_flow(site, owner=who["ola"])
    hostile = '=HYPERLINK("http://evil.example","click"), "quoted" and a\nsecond line'
    resp = await pause(site, user=who["ola"], flow=flow_id, input_value=hostile)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with site.api(who["ola"]) as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": request_id, "decision": {"action_id": "reject"}})
        assert r.status_code == 200, r.text
    await site.h.wait_status(job_id, JobStatus.completed)
    other = await gates(site, who["ola"], 1)  # another flow, filtered out below
    async with site.api(who["ola"]) as c:
        r = await c.post(f"/api/v2/workflows/{other[0][0]}/resume",
                         json={"request_id": other[0][1], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    async with person(browser, site, who["ola"]) as ola:
        page = ola.page
        await page.goto(f"{site.url}/history?flow={flow_id}")
        link = page.get_by_role("link", name="Export CSV")
        assert await link.get_attribute("href") == f"/history.csv?flow={flow_id}"
        r = await page.request.get(site.url + (await link.get_attribute("href")))
        assert r.status == 200 and r.headers["content-type"].startswith("text/csv")
        rows = list(csv.reader(io.StringIO(await r.text())))
        assert rows[0][:3] == ["decided_at", "flow", "run"]
        assert [row[2] for row in rows[1:]] == [job_id]  # only the filtered flow
        row = dict(zip(rows[0], rows[1]))
        assert row["question"].startswith("'=HYPERLINK(")  # never a formula
        assert '"quoted"' in row["question"]
        assert row["outcome"] == "reject" and row["decision"] == "Reject"
        assert row["decided_by"] == who["ola"] and row["via"] == "api"
        signed_out = await browser.new_context()
        r = await signed_out.request.get(site.url + "/history.csv")
        assert r.status in (200, 303, 401, 404) and "text/csv" not in r.headers.get("content-type", "")
        await signed_out.close()
        ola.clean()
