"""The decision card as an approver's workbench (DESIGN §10, issue 29) in a real browser against a
real signoff: what a person approves is what runs (an edited tool argument is never dropped by a
plain Approve, with or without JavaScript), a values card asks for the decision first, and the
card shows what a person needs to decide (the run's input, the conversation, the model's turn and
earlier tool results, the step it stops at) beside the question."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from signoff.engine.models import JobStatus
from tests.browser.conftest import NARROW, SHOTS, Site, decided_card, person
from tests.browser.test_pages import decision_events, pause, session

pytestmark = pytest.mark.temporal

WIDE_1440 = {"width": 1440, "height": 900}


async def shoot(page: Page, name: str) -> None:
    """Screenshots at 1440 x 900 and 390 x 844 (full page, ``tests/browser/screenshots/``), each
    after checking that nothing is wider than the screen."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    for label, viewport in (("1440", WIDE_1440), ("390", NARROW)):
        await page.set_viewport_size(viewport)
        overflow = await page.evaluate("""() => {
            const w = document.documentElement.clientWidth;
            // the run graph scrolls inside its own region (.graph-scroll) on a phone: what it
            // holds may be wider, the region and the page may not
            return [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > w + 1 && !e.parentElement.closest('.graph-scroll'))
                .slice(0, 5).map(e => e.tagName + '.' + e.getAttribute('class'));
        }""")
        assert overflow == [], f"{name} at {viewport['width']} px is wider than the screen: {overflow}"
        await page.screenshot(path=str(SHOTS / f"{name}-{label}.png"), full_page=True)
    if size:
        await page.set_viewport_size(size)


def _turn(content: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The model says something and asks for one tool call in the same message."""
    call = {"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}
    return {"kind": "message", "message": {"role": "assistant", "content": content, "tool_calls": [call]}}


@contextmanager
def refund_agent(site: Site, turn: str = "The refund is **15 EUR**; I send it to order 1234. <img src=x onerror=alert(1)>"
                 ) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """A fake model that works the amount out with the calculator (runs freely), then proposes
    ``refund`` with body "15 EUR to order 1234" (gated: approve, edit, reject, respond)."""
    from tests.fixtures.fake_openai import FakeOpenAI, ToolTarget, say

    with FakeOpenAI() as llm, ToolTarget() as target:
        site.h.egress.add(llm, target)
        llm.add(_turn("First the amount: 3 items at 5 EUR.", "calculator", {"expression": "3 * 5"}),
                _turn(turn, "refund", {"body": "15 EUR to order 1234"}),
                say("Refund sent."))
        spec = {"name": f"Refund agent {uuid.uuid4().hex[:4]}",
                "nodes": [{"id": "ask", "type": "ChatInput"},
                          {"id": "agent", "type": "Agent", "params": {
                              "model": "fake-model", "base_url": llm.base_url, "system_prompt": "You send refunds.",
                              "retry_backoff": 0.01}},
                          {"id": "calc", "type": "Calculator", "params": {"tool_name": "calculator",
                                                                          "tool_description": "Arithmetic"}},
                          {"id": "pay", "type": "HTTPRequest", "params": {
                              "url": f"{target.url}/refunds", "method": "POST", "tool_name": "refund",
                              "tool_description": "Send a refund", "approval_actions": ["approve", "edit", "reject",
                                                                                         "respond"]}},
                          {"id": "out", "type": "ChatOutput"}],
                "edges": [{"from": "ask.message", "to": "agent.input_value"},
                          {"from": "calc.tool", "to": "agent.tools"},
                          {"from": "pay.tool", "to": "agent.tools"},
                          {"from": "agent.response", "to": "out.input_value"}]}
        yield llm, target, spec


async def _agent_run(site: Site, spec: dict[str, Any], text: str = "Refund order 1234: 3 broken cups") -> tuple[str, str]:
    async with site.api("alice") as c:
        r = await c.post("/api/v1/flows", json=spec)
        assert r.status_code == 201, r.text
    resp = await pause(site, flow=r.json()["id"], input_value=text)
    assert resp["human_request"]["kind"] == "tool_approval"
    return resp["job_id"], resp["human_request"]["request_id"]


async def test_an_edited_argument_reaches_the_tool_as_typed(browser: Browser, site: Site) -> None:
    """Change an argument: the primary action becomes "Approve edited call" with the change shown
    old -> new, plain Approve is gone, and what runs is exactly what was typed (issue 29: on main
    the primary Approve ran the proposal, 15 EUR, and nothing said so)."""
    typed = "45 EUR to order 1234 – “express”  "  # non-ASCII, trailing spaces: exactly as typed
    with refund_agent(site) as (_llm, target, spec):
        job_id, request_id = await _agent_run(site, spec)
        async with person(browser, site, "alice", viewport=WIDE_1440) as alice:
            page = alice.page
            await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
            # beside the question: the input, the model's turn (Markdown, rendered and sanitised), the
            # earlier tool result, the step
            facts = page.locator("aside.card-context")
            await expect(facts.locator("[data-ctx-input]")).to_have_text("Refund order 1234: 3 broken cups")
            await expect(facts.locator("[data-ctx-turn] strong")).to_have_text("15 EUR")
            await expect(facts.locator("[data-ctx-turn]")).to_contain_text("<img src=x onerror=alert(1)>")  # text
            await expect(page.locator("img[src=x], [onerror]")).to_have_count(0)
            await expect(facts.locator("[data-ctx-tools]")).to_contain_text("calculator")
            await expect(facts.locator("[data-ctx-tools]")).to_contain_text("3 * 5")
            await expect(facts.locator("[data-ctx-tools] .ctx-result")).to_contain_text("15")
            await expect(facts.locator("[data-ctx-step]")).to_contain_text("agent (Agent), asking to run refund")
            # a right column on a wide screen
            box, question = await facts.bounding_box(), await page.get_by_label("body").bounding_box()
            assert box and question and box["x"] > question["x"] + question["width"], (box, question)
            if site.backend == "sqlite":
                await shoot(page, "card-tool")
            form = page.locator("form[data-tool-form]")
            primary = form.locator(".btn-primary")
            await expect(primary).to_have_text("Approve")
            await expect(form.get_by_role("button", name="Approve edited call")).to_be_hidden()
            await expect(form.locator("[data-arg-diff]")).to_be_hidden()
            await page.get_by_label("body").fill(typed)
            await expect(primary).to_have_text("Approve edited call")
            await expect(form.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
            diff = form.locator("[data-arg-diff]")
            await expect(diff).to_be_visible()
            await expect(diff.locator("del")).to_have_text("15 EUR to order 1234")
            await expect(diff.locator("ins")).to_have_text(typed)
            if site.backend == "sqlite":
                await shoot(page, "card-tool-edited")
            await primary.click()
            await decided_card(page)
            await expect(page.locator("[data-outcome]")).to_contain_text("Approve edited call by alice")
            await site.h.wait_status(job_id, JobStatus.completed)
            assert [h["body"] for h in target.hits] == [typed]
            decided = await decision_events(site, job_id)
            assert decided[0]["action_id"] == "edit" and decided[0]["values"]["args"] == {"body": typed}
            # the decided card shows the change, not the proposal alone
            await expect(page.locator("[data-decided-args] del")).to_have_text("15 EUR to order 1234")
            await expect(page.locator("[data-decided-args] ins")).to_have_text(typed)
            await expect(page.locator(".chosen")).to_contain_text("Approve edited call")
            if site.backend == "sqlite":
                await shoot(page, "card-tool-decided")
            alice.clean()


async def test_without_javascript_a_plain_approve_never_drops_an_edit(browser: Browser, site: Site) -> None:
    """No script: the server decides from what was submitted. An edited argument sent with the
    plain Approve runs nothing; the card comes back with the change old -> new and "Approve
    edited call" as its primary action, which runs the call as typed."""
    with refund_agent(site) as (_llm, target, spec):
        job_id, request_id = await _agent_run(site, spec)
        async with person(browser, site, "alice", java_script_enabled=False) as alice:
            page = alice.page
            await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
            form = page.locator("form[data-tool-form]")
            await page.get_by_label("body").fill("45 EUR to order 1234")
            await form.get_by_role("button", name="Approve", exact=True).click()
            await expect(page.get_by_role("alert")).to_contain_text("nothing was sent")
            form = page.locator("form[data-tool-form]")
            await expect(form.locator("[data-arg-diff] del")).to_have_text("15 EUR to order 1234")
            await expect(form.locator("[data-arg-diff] ins")).to_have_text("45 EUR to order 1234")
            await expect(page.get_by_label("body")).to_have_value("45 EUR to order 1234")  # kept
            await expect(form.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
            assert (await site.h.store.get_job(job_id)).status == JobStatus.suspended
            assert target.hits == []
            if site.backend == "sqlite":
                await shoot(page, "card-tool-edit-nojs")
            await form.locator(".btn-primary").click()
            await decided_card(page)
            await expect(page.locator("[data-outcome]")).to_contain_text("by alice")
            await site.h.wait_status(job_id, JobStatus.completed)
            assert [h["body"] for h in target.hits] == ["45 EUR to order 1234"]
            alice.clean()




def _values_flow() -> dict[str, Any]:
    """A gate whose options ask different values: Approve an amount and a channel, Reject a reason
    (required, a pattern) and whether to tell the customer; both have a note (the same field)."""
    note = {"type": "string", "maxLength": 100, "title": "Note for the file"}
    return {"name": f"Refund with reason {uuid.uuid4().hex[:4]}",
            "nodes": [{"id": "ask", "type": "ChatInput"},
                      {"id": "card", "type": "Prompt", "params": {"template": "Approve the refund for: {request}"}},
                      {"id": "gate", "type": "HumanInput", "params": {
                          "decisions": ["Approve", "Reject"],
                          "fields": {"Reject": {"type": "object", "required": ["reason"], "properties": {
                              "reason": {"type": "string", "minLength": 5, "pattern": "^[A-Z]", "title": "Reason",
                                         "description": "Starts with a capital letter."},
                              "notify": {"type": "boolean", "title": "Tell the customer"}, "note": note}},
                                     "Approve": {"type": "object", "required": ["amount"], "properties": {
                                         "amount": {"type": "number", "maximum": 100, "title": "Amount"},
                                         "channel": {"enum": ["bank", "card"], "title": "Channel"},
                                         "note": note}}}}},
                      {"id": "ok", "type": "ChatOutput", "params": {"display_name": "Send the refund", "text": "sent"}},
                      {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}}],
            "edges": [{"from": "ask.message", "to": "card.request"},
                      {"from": "card.prompt", "to": "gate.prompt"},
                      {"from": "gate.branch_approve", "to": "ok.input_value"},
                      {"from": "gate.branch_reject", "to": "no.input_value"}]}


async def _values_run(site: Site, sid: str | None = None) -> tuple[str, str]:
    async with site.api("alice") as c:
        r = await c.post("/api/v1/flows", json=_values_flow())
        assert r.status_code == 201, r.text
    sid = sid or session()
    flow_id = r.json()["id"]
    earlier = await pause(site, flow=flow_id, input_value="Order 77: the lid was cracked", session_id=sid)
    async with site.api("alice") as c:  # an earlier run of the session, decided
        r = await c.post(f"/api/v2/workflows/{earlier['job_id']}/resume", json={
            "request_id": earlier["human_request"]["request_id"],
            "decision": {"action_id": "approve", "values": {"amount": 5}}})
        assert r.status_code == 200, r.text
    await site.h.wait_status(earlier["job_id"], JobStatus.completed)
    resp = await pause(site, flow=flow_id, input_value="Order 1234: 3 broken cups, 45 EUR", session_id=sid)
    return resp["job_id"], resp["human_request"]["request_id"]


async def test_a_values_card_asks_for_the_decision_first(browser: Browser, site: Site) -> None:
    """Options with different values: a segmented control first, then only the chosen option's
    fields under its heading; a refusal says what to fix in people's words and keeps the choice
    and what was typed; the decided values show under their schema titles. Beside the question:
    the run's input, the session's earlier conversation, the step and where each answer leads."""
    job_id, request_id = await _values_run(site)
    async with person(browser, site, "alice", viewport=WIDE_1440) as alice:
        page = alice.page
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        await expect(page.locator(".prompt")).to_have_text("Approve the refund for: Order 1234: 3 broken cups, 45 EUR")
        facts = page.locator("aside.card-context")
        await expect(facts.locator("[data-ctx-input]")).to_have_text("Order 1234: 3 broken cups, 45 EUR")
        await expect(facts.locator("[data-ctx-chat]")).to_contain_text("Order 77: the lid was cracked")
        await expect(facts.locator("[data-ctx-chat]")).to_contain_text("sent")
        await expect(facts.locator("[data-ctx-step]")).to_contain_text("gate")
        await expect(facts.locator(".ctx-leads li").first).to_contain_text(re.compile("^Approve.*Send the refund$"))
        form = page.locator("form[data-choose]")
        decision = form.get_by_role("group", name="Your decision")
        await expect(decision.get_by_role("radio")).to_have_count(2)
        await expect(form.locator("[data-option]:visible")).to_have_count(0)  # nothing before a choice
        await decision.get_by_text("Reject", exact=True).click()
        reject = form.locator('[data-option="reject"]')
        await expect(reject).to_be_visible()
        await expect(form.locator('[data-option="approve"]')).to_be_hidden()
        await expect(reject.get_by_role("heading")).to_contain_text("Reject")
        await expect(form.get_by_label("Note for the file")).to_have_count(2)  # one per option, in the DOM
        await expect(form.locator("[data-choose-submit]")).to_have_text("Reject")
        if site.backend == "sqlite":
            await shoot(page, "card-values")
        await reject.get_by_label("Reason").fill("bad reason")
        await reject.get_by_label("Tell the customer").check()
        await form.locator("[data-choose-submit]").click()
        # refused: in people's words, the choice and what was typed kept
        await expect(page.get_by_role("alert")).to_contain_text("Please fix the field marked below.")
        reject = page.locator('form[data-choose] [data-option="reject"]')
        await expect(reject.locator(".field-error")).to_contain_text(
            "This is not in the form asked for (see below). Starts with a capital letter.")
        await expect(page.get_by_role("radio", name="Reject")).to_be_checked()
        await expect(reject.get_by_label("Reason")).to_have_value("bad reason")
        await expect(reject.get_by_label("Tell the customer")).to_be_checked()
        assert (await site.h.store.get_job(job_id)).status == JobStatus.suspended
        if site.backend == "sqlite":
            await shoot(page, "card-values-422")
        await page.locator("form[data-choose] .segments").get_by_text("Approve", exact=True).click()
        await expect(page.get_by_role("radio", name="Approve")).to_be_checked()
        approve = page.locator('form[data-choose] [data-option="approve"]')
        await approve.get_by_label("Amount").fill("45.5")
        await approve.get_by_label("Channel").select_option("card")
        await page.locator("[data-choose-submit]").click()
        await decided_card(page)
        await expect(page.locator("[data-outcome]")).to_contain_text("Approve by alice")
        values = page.locator("[data-decided-values]")
        await expect(values).to_contain_text("Amount")
        await expect(values).to_contain_text("45.5")
        await expect(values).to_contain_text("Channel")
        decisions = await decision_events(site, job_id)
        assert decisions[0]["values"] == {"amount": 45.5, "channel": "card"}
        if site.backend == "sqlite":
            await shoot(page, "card-values-decided")
        alice.clean()


async def test_a_values_card_without_javascript(browser: Browser, site: Site) -> None:
    """No script: every option's fields show, each under its heading; sent without a choice, the
    card asks for one; the chosen option's fields are the ones read (the other's are not)."""
    job_id, request_id = await _values_run(site)
    async with person(browser, site, "alice", viewport=WIDE_1440, java_script_enabled=False) as alice:
        page = alice.page
        await page.goto(f"{site.url}/runs/{job_id}/requests/{request_id}")
        form = page.locator("form[data-choose]")
        await expect(form.locator("[data-option]")).to_have_count(2)
        await expect(form.locator('[data-option="approve"] h3')).to_contain_text("Approve")
        await expect(form.locator('[data-option="reject"] h3')).to_contain_text("Reject")
        await form.locator('[data-option="approve"]').get_by_label("Note for the file").fill("not this one")
        await form.get_by_role("button", name="Send decision").click()
        await expect(page.get_by_role("alert")).to_contain_text("Choose a decision first: Approve or Reject.")
        assert (await site.h.store.get_job(job_id)).status == JobStatus.suspended
        if site.backend == "sqlite":
            await shoot(page, "card-values-nojs")
        form = page.locator("form[data-choose]")
        await expect(form.locator('[data-option="approve"]').get_by_label("Note for the file")).to_have_value(
            "not this one")  # kept
        await form.get_by_text("Reject", exact=True).click()
        reject = form.locator('[data-option="reject"]')
        await reject.get_by_label("Reason").fill("Cracked on arrival")
        await reject.get_by_label("Note for the file").fill("photo in ticket 9")
        await form.get_by_role("button", name="Send decision").click()
        await decided_card(page)
        await expect(page.locator("[data-outcome]")).to_contain_text("Reject by alice")
        await expect(page.locator("[data-decided-values]")).to_contain_text("Note for the file")
        decisions = await decision_events(site, job_id)
        assert decisions[0]["values"] == {"reason": "Cracked on arrival", "notify": False, "note": "photo in ticket 9"}
        alice.clean()
