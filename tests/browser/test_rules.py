"""A request's rules visible before anyone breaks them (issue 29, DESIGN §9-§10), in a real browser
against a real signoff: the quorum card says how many approvals it has and needs, who voted,
whom it waits on and whom it escalates to; someone who may not decide sees why instead of
buttons; a voter's request waits on others; anyone who was asked sees a decided request's
outcome, nobody else."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from signoff.engine.models import JobStatus

from tests.browser.conftest import Site, decided_card, person, send_held
from tests.browser.test_card import shoot
from tests.browser.test_pages import pause

pytestmark = pytest.mark.temporal


async def people(site: Site, *names: str) -> dict[str, str]:
    """Users made for one test (signed in by their key, as the harness's own), by short name: their
    full names (short name and a random tail, so tests never share a person)."""
    full = {}
    for name in names:
        user = await site.h.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
        site.h.users[user.name] = (user.id, await site.h.store.create_api_key(user.id))
        full[name] = user.name
    return full


async def gate_flow(site: Site, owner: str = "alice", name: str | None = None, **params: Any) -> str:
    """A gate flow of ``owner`` (approve or reject; ``params`` the gate's), uploaded: its id."""
    spec = {"name": name or f"Spend approval {uuid.uuid4().hex[:4]}",
            "nodes": [{"id": "ask", "type": "ChatInput"},
                      {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"], **params}},
                      {"id": "ok", "type": "ChatOutput", "params": {"text": "approved"}},
                      {"id": "no", "type": "ChatOutput", "params": {"text": "rejected"}}],
            "edges": [{"from": "ask.message", "to": "gate.prompt"},
                      {"from": "gate.branch_approve", "to": "ok.input_value"},
                      {"from": "gate.branch_reject", "to": "no.input_value"}]}
    async with site.api(owner) as c:
        r = await c.post("/api/v1/flows", json=spec)
        assert r.status_code == 201, r.text
        return r.json()["id"]


async def vote(site: Site, user: str, job_id: str, request_id: str, action: str = "approve") -> dict[str, Any]:
    async with site.api(user) as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": request_id, "decision": {"action_id": action}})
    assert r.status_code in (200, 202), r.text
    return r.json()


async def quorum(site: Site) -> tuple[dict[str, str], str, str]:
    """A run of alice's waiting on two approvals of bob and the group finance (dave, erin),
    escalating to carol after two days; bob has voted. Returns the people, the job and request."""
    who = await people(site, "carol", "dave", "erin")
    alice_id = site.h.users["alice"][0]
    finance = f"finance-{uuid.uuid4().hex[:4]}"
    await site.h.store.create_group(alice_id, finance)
    await site.h.store.add_group_members(alice_id, finance, [site.h.users[who["dave"]][0],
                                                             site.h.users[who["erin"]][0]])
    bob = (await site.h.store.get_user(site.h.users["bob"][0])).name
    flow_id = await gate_flow(site, approvers=[bob, f"group:{finance}"], required_approvals=2,
                              escalate_after={"value": 2, "unit": "Days"}, escalate_to=[who["carol"]])
    resp = await pause(site, flow=flow_id, input_value="Team offsite, 4,000 EUR")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    voted = await vote(site, "bob", job_id, request_id)
    assert voted.get("status") == "vote_recorded", voted
    who.update(finance=finance, bob=bob)
    return who, job_id, request_id


def card(site: Site, job_id: str, request_id: str) -> str:
    return f"{site.url}/runs/{job_id}/requests/{request_id}"


async def test_a_quorum_card_says_its_rules(browser: Browser, site: Site) -> None:
    """"1 of 2 approvals · bob approved · waiting on finance (dave, erin) · escalates to carol in
    2 days", under the question, for an approver who has not voted yet."""
    who, job_id, request_id = await quorum(site)
    async with person(browser, site, who["dave"]) as dave:
        await dave.page.goto(card(site, job_id, request_id))
        line = dave.page.locator("[data-rules]")
        await expect(line).to_have_text(re.compile(
            rf"^\s*1 of 2 approvals · {re.escape(who['bob'])} approved · waiting on {re.escape(who['finance'])} "
            rf"\({re.escape(who['dave'])} and {re.escape(who['erin'])}\) · escalates to {re.escape(who['carol'])} "
            r"in 2 days\s*$"))
        await expect(dave.page.get_by_role("button", name="Approve")).to_be_visible()
        if site.backend == "sqlite":
            await shoot(dave.page, "rules-quorum")
        dave.clean()


async def test_the_owner_without_self_approval_never_sees_an_approve_button(browser: Browser, site: Site) -> None:
    """alice's run names her and bob but forbids self-approval: her inbox row and her card say
    why in words and offer no button (the server would refuse it); bob's card offers them."""
    alice = (await site.h.store.get_user(site.h.users["alice"][0])).name
    bob = (await site.h.store.get_user(site.h.users["bob"][0])).name
    flow_id = await gate_flow(site, approvers=[alice, bob], allow_self_approval=False)
    resp = await pause(site, flow=flow_id, input_value="My own expenses, 90 EUR")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    reason = "You started this run; someone else must approve it."
    async with person(browser, site, "alice") as owner:
        row = owner.page.locator(f'li.req[data-request-id="{request_id}"]')
        await expect(row.locator("[data-may-not]")).to_have_text(reason)
        await expect(row.get_by_role("button")).to_have_count(0)
        await owner.page.goto(card(site, job_id, request_id))
        await expect(owner.page.locator("[data-may-not]")).to_have_text(reason)
        await expect(owner.page.locator("[data-rules]")).to_have_text(re.compile(rf"^\s*waiting on {re.escape(bob)}\s*$"))
        await expect(owner.page.get_by_role("heading", level=1)).to_have_text("Waiting for a decision")
        await expect(owner.page.locator("form.decide")).to_have_count(0)
        await expect(owner.page.get_by_role("button", name="Approve")).to_have_count(0)
        if site.backend == "sqlite":
            await shoot(owner.page, "rules-self-approval")
        owner.clean()
    async with person(browser, site, "bob") as approver:
        await approver.page.goto(card(site, job_id, request_id))
        await expect(approver.page.locator("[data-may-not]")).to_have_count(0)
        await approver.page.get_by_role("button", name="Approve").click()
        await decided_card(approver.page)
        await expect(approver.page.locator("[data-outcome]")).to_contain_text(f"Approve by {bob}")
        approver.clean()


async def test_a_request_you_voted_on_waits_on_others(browser: Browser, site: Site) -> None:
    """dave votes from his inbox: his card says "You approved · waiting for 1 more" (no buttons
    again), and his inbox lists the request under "Waiting on others", without buttons; once
    erin's vote completes the quorum it leaves his inbox."""
    who, job_id, request_id = await quorum(site)  # bob has voted: 1 of 2; dave's vote completes it
    async with person(browser, site, who["dave"]) as dave:
        row = dave.page.locator(f'[data-live-inbox] > li.req[data-request-id="{request_id}"]')
        await expect(row).to_be_visible()
        await dave.page.goto(card(site, job_id, request_id))
        await expect(dave.page.locator("[data-rules]")).to_contain_text("1 of 2 approvals")
        await dave.page.get_by_role("button", name="Approve").click()
        # the quorum of 2 is complete with dave: the card is decided
        await decided_card(dave.page)
        await expect(dave.page.locator("[data-outcome]")).to_contain_text("Approve")
        dave.clean()
    flow_id = await gate_flow(site, approvers=[who["dave"], who["erin"], who["carol"]], required_approvals=3)
    resp = await pause(site, flow=flow_id, input_value="New laptops, 12,000 EUR")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    await vote(site, who["carol"], job_id, request_id)
    async with person(browser, site, who["dave"]) as dave:
        page = dave.page
        await page.clock.install()
        await page.reload()
        row = page.locator(f'[data-live-inbox] > li.req[data-request-id="{request_id}"]')
        await row.get_by_role("button", name="Approve").click()
        await send_held(page)
        await expect(row).to_have_count(0)
        await page.goto(card(site, job_id, request_id))
        await expect(page.locator("[data-voted]")).to_have_text("You approved · waiting for 1 more")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Waiting on others")
        await expect(page.locator("form.decide")).to_have_count(0)
        await page.goto(site.url + "/")
        await expect(row).to_have_count(0)
        other = page.locator(f'[data-waiting-others] > li.req[data-request-id="{request_id}"]')
        await expect(other.locator("[data-voted]")).to_have_text("You approved · waiting for 1 more")
        await expect(other.get_by_role("button")).to_have_count(0)
        if site.backend == "sqlite":
            await shoot(page, "rules-waiting-on-others")
        await vote(site, who["erin"], job_id, request_id)  # the third: decided, it leaves (live)
        await expect(other).to_have_count(0)
        dave.clean()


async def test_anyone_asked_sees_the_decided_view_nobody_else(browser: Browser, site: Site) -> None:
    """bob and dave complete the quorum; erin (asked through the group finance, never voted)
    opens the request after the run ended: the decided view, who and when, not 404 (and no link
    to a run that is not hers to see). carol (only its escalation would have asked her, and it
    never came) and frank (never asked) get the same 404 as a request that does not exist."""
    who, job_id, request_id = await quorum(site)
    who.update(await people(site, "frank"))
    await vote(site, who["dave"], job_id, request_id)
    await site.h.wait_status(job_id, JobStatus.completed)
    async with person(browser, site, who["erin"]) as erin:
        r = await erin.page.goto(card(site, job_id, request_id))
        assert r is not None and r.status == 200
        outcome = erin.page.locator("[data-outcome]")
        await expect(outcome).to_contain_text(f"Approve by {who['dave']}")
        await expect(outcome.locator(".outcome-when")).to_contain_text(re.compile(r"Decided \d{4}-\d\d-\d\d"))
        await expect(outcome).to_contain_text(who["bob"])  # the votes: bob's and dave's
        await expect(erin.page.locator("form.decide")).to_have_count(0)
        await expect(erin.page.locator(f'a[href="/runs/{job_id}"]')).to_have_count(0)
        r = await erin.page.goto(f"{site.url}/runs/{job_id}")
        assert r is not None and r.status == 404
        if site.backend == "sqlite":
            await erin.page.goto(card(site, job_id, request_id))
            await shoot(erin.page, "rules-asked-decided")
        erin.clean()
    for stranger in (who["carol"], who["frank"]):
        async with person(browser, site, stranger) as other:
            r = await other.page.goto(card(site, job_id, request_id))
            assert r is not None and r.status == 404
            unknown = await other.page.goto(card(site, job_id, "gate:nope"))
            assert unknown is not None and unknown.status == 404
            await expect(other.page.locator("main")).not_to_contain_text(who["dave"])


async def test_a_stopped_runs_card_says_stopped(browser: Browser, site: Site) -> None:
    """A run stopped while it waits: its chat card on the run page says the run was stopped,
    not "superseded by a new run" (there is none); a superseded one still says superseded."""
    sid = f"s-{uuid.uuid4().hex[:10]}"
    first = (await pause(site, session_id=sid))["job_id"]
    second = (await pause(site, session_id=sid))["job_id"]  # supersedes the first
    async with site.api("alice") as c:
        r = await c.post("/api/v2/workflows/stop", json={"job_id": second})
        assert r.status_code == 200, r.text
    await site.h.wait_status(second, JobStatus.cancelled)
    async with person(browser, site, "alice") as alice:
        await alice.page.goto(f"{site.url}/runs/{second}")
        closed = alice.page.locator(f'li.msg-card[data-job="{second}"] [data-card-closed]')
        await expect(closed).to_have_text(re.compile(r"^\s*Closed: the run was stopped\s*$"))
        closed = alice.page.locator(f'li.msg-card[data-job="{first}"] [data-card-closed]')
        await expect(closed).to_have_text(re.compile(r"^\s*Closed: superseded by a new run\s*$"))
        alice.clean()


async def test_history_marks_each_way_a_request_ends(browser: Browser, site: Site) -> None:
    """History: approve, reject, expired (its deadline decided), superseded and stopped each wear
    their own mark; Reject never wears Approve's green check."""
    who = await people(site, "hank")
    hank = who["hank"]
    flow_id = await gate_flow(site, owner=hank)
    late_flow = await gate_flow(site, owner=hank, timeout=1, on_timeout="default", default_action="approve")
    jobs: dict[str, str] = {}
    for kind in ("approve", "reject"):
        resp = await pause(site, hank, flow=flow_id, input_value=f"{kind} this")
        jobs[kind] = resp["job_id"]
        await vote(site, hank, resp["job_id"], resp["human_request"]["request_id"], kind)
    async with site.api(hank) as c:  # the deadline decides: a background run, its gate expires by itself
        r = await c.post("/api/v2/workflows", json={"flow_id": late_flow, "mode": "background",
                                                    "input_value": "nobody answers", "session_id": f"s-{uuid.uuid4().hex}"})
        assert r.status_code == 200, r.text
        jobs["expired"] = r.json()["job_id"]
    sid = f"s-{uuid.uuid4().hex[:10]}"
    jobs["superseded"] = (await pause(site, hank, flow=flow_id, session_id=sid, input_value="superseded"))["job_id"]
    jobs["stopped"] = (await pause(site, hank, flow=flow_id, session_id=sid, input_value="stopped"))["job_id"]
    async with site.api(hank) as c:
        assert (await c.post("/api/v2/workflows/stop", json={"job_id": jobs["stopped"]})).status_code == 200
    for kind in ("approve", "reject", "expired"):
        await site.h.wait_status(jobs[kind], JobStatus.completed)
    async with person(browser, site, hank) as h:
        await h.page.goto(site.url + "/history")
        rows = h.page.locator("table.history tbody tr")
        await expect(rows).to_have_count(5)
        for kind, job_id in jobs.items():
            row = rows.filter(has=h.page.locator(f'a[href="/runs/{job_id}"]'))
            await expect(row.locator("[data-mark]")).to_have_attribute("data-mark", kind)
        reject = rows.filter(has=h.page.locator(f'a[href="/runs/{jobs["reject"]}"]')).locator("[data-mark]")
        assert await reject.evaluate("e => getComputedStyle(e).color") != \
            await rows.filter(has=h.page.locator(f'a[href="/runs/{jobs["approve"]}"]')).locator("[data-mark]").evaluate(
                "e => getComputedStyle(e).color")
        if site.backend == "sqlite":
            await shoot(h.page, "rules-history-marks")
        backgrounds = {}
        for kind in ("approve", "reject"):  # the decided card too: a rejection is not a green box
            await h.page.goto(card(site, jobs[kind], f"gate:{jobs[kind]}"))
            outcome = h.page.locator("[data-outcome]")
            await expect(outcome).to_have_attribute("data-mark", kind)
            backgrounds[kind] = await outcome.evaluate("e => getComputedStyle(e).backgroundColor")
        assert backgrounds["approve"] != backgrounds["reject"], backgrounds
        await h.page.goto(f"{site.url}/runs/{jobs['reject']}")  # and the run page's Decisions
        await expect(h.page.locator("li.decision-row")).to_have_attribute("data-mark", "reject")
        if site.backend == "sqlite":
            await shoot(h.page, "rules-rejected-card")
        h.clean()


async def test_an_approver_added_by_the_escalation_sees_the_decided_view(browser: Browser, site: Site) -> None:
    """carol is asked only through the escalation (after a second); bob decides; once the run
    has ended (its stored approvers deleted) carol still sees who decided, from the request's
    escalation event."""
    who = await people(site, "carol")
    bob = (await site.h.store.get_user(site.h.users["bob"][0])).name
    flow_id = await gate_flow(site, approvers=[bob], escalate_after=1, escalate_to=[who["carol"]])
    resp = await pause(site, flow=flow_id, input_value="Escalated spend")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    for _ in range(600):  # the escalation's durable timer, then its event (no time asserted)
        if await site.h.store.read_events_named(job_id, "human_input_escalated"):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the escalation never came")
    await vote(site, "bob", job_id, request_id)
    await site.h.wait_status(job_id, JobStatus.completed)
    assert await site.h.store.request_approvers(job_id, request_id) == []
    async with person(browser, site, who["carol"]) as carol:
        r = await carol.page.goto(card(site, job_id, request_id))
        assert r is not None and r.status == 200
        await expect(carol.page.locator("[data-outcome]")).to_contain_text(f"Approve by {bob}")
        carol.clean()
