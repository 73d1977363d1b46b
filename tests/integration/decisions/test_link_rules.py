"""A decision link's page (``/d/{token}``) says the request's rules in words like the card does
(api/pages/rules.py, issue 29): how many approvals it needs and has, who voted, whom it waits on;
nothing once the request no longer waits. Over HTTP through the real app and a real Temporal."""

from __future__ import annotations

import html
import re

import pytest

from signoff.engine import links
from signoff.engine.models import JobStatus, utcnow
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import gate_flow, resume, run_suspended, uid, upload, user_name

pytestmark = pytest.mark.temporal

RULES = re.compile(r'<p class="rules-line" data-rules>(.*?)</p>', re.S)
CSRF = re.compile(r'name="csrf" value="([^"]*)"')


def _rules(page: str) -> str | None:
    found = RULES.search(page)
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip() if found else None


async def _link_page(h: Harness, path: str) -> str:
    async with h.client() as c:
        r = await c.get(path)
    assert r.status_code == 200, r.text
    return r.text


async def test_the_link_page_shows_the_rules_line(h: Harness) -> None:
    bob, carol = await user_name(h, "bob"), await user_name(h, "carol")
    flow_id = await upload(h, gate_flow({"approvers": [bob, carol], "required_approvals": 2, "notify": []},
                                        name="link-rules"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    job = await h.store.get_job(job_id)
    assert job is not None and job.pending is not None
    token = await links.mint(h.store, job_id=job_id, pending=job.pending, user_id=uid(h, "bob"), channel="email",
                             now=utcnow(), ttl_seconds=600)
    path = f"/d/{token}"

    assert _rules(await _link_page(h, path)) == f"0 of 2 approvals · waiting on {bob}, {carol}"
    r = await resume(h, "carol", job_id, "approve")
    assert r.status_code == 200, r.text
    page = await _link_page(h, path)
    assert _rules(page) == f"1 of 2 approvals · {carol} approved · waiting on {bob}"

    async with h.client() as c:  # bob decides from the link: the request no longer waits, no rules line
        r = await c.post(path, data={"csrf": CSRF.search(page).group(1), "action_id": "approve"})  # type: ignore[union-attr]
    assert r.status_code == 200, r.text
    await h.wait_status(job_id, JobStatus.completed)
    assert _rules(await _link_page(h, path)) is None


async def test_a_plain_gate_has_no_rules_line_on_its_link(h: Harness) -> None:
    flow_id = await upload(h, gate_flow({"notify": []}, name="link-plain"))
    job_id = (await run_suspended(h, flow_id))["job_id"]
    job = await h.store.get_job(job_id)
    assert job is not None and job.pending is not None
    token = await links.mint(h.store, job_id=job_id, pending=job.pending, user_id=uid(h, "alice"), channel="email",
                             now=utcnow(), ttl_seconds=600)
    page = await _link_page(h, f"/d/{token}")
    assert 'name="action_id"' in page and _rules(page) is None
