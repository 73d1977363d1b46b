"""The inbox page a page at a time (issue 29): 25 rows newest first, the pager, the filters and
the counts read from the store's paged, indexed inbox (Store.inbox, inbox_count, inbox_flows),
never the whole waiting set; past 1,000 waiting the counts say "1000+". Through the real app
(its pages signed in as a person is), on SQLite and PostgreSQL; the waiting requests are
written as a run's pause writes them."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from signoff.engine.models import JobStatus, NewJob, Option, PendingRequest, utcnow
from tests.integration.api.conftest import REFUND, Harness, submit_suspended

pytestmark = [pytest.mark.temporal, pytest.mark.both_stores]  # the store's paged queries differ


async def waiting(h: Harness, user_id: str, n: int, *, flow_id: str, kind: str = "node_input",
                  first: int = 0) -> list[str]:
    """``n`` requests of ``user_id``'s runs of ``flow_id`` waiting, paused a second apart (the
    last the newest), written as a pause writes them; their job ids, oldest first."""
    sem = asyncio.Semaphore(16)
    start = utcnow() - timedelta(days=1)

    async def one(i: int) -> str:
        async with sem:
            job_id = str(uuid.uuid4())
            await h.store.create_job(NewJob(job_id=job_id, flow_id=flow_id, flow_version=1, user_id=user_id,
                                            session_id=f"s-{i % 3}", request={"input_value": f"refund {i}"}))
            await h.store.set_status(job_id, JobStatus.in_progress)
            pending = PendingRequest(
                request_id=f"gate:{job_id}", kind=kind, prompt=f"Approve refund number {i}?",
                options=[Option(action_id="approve", label="Approve"), Option(action_id="reject", label="Reject")],
                allowed_decisions=["approve", "reject"], paused_at=start + timedelta(seconds=i))
            await h.store.mark_suspended(job_id, pending, event=("human_input_required", pending.model_dump(mode="json")))
            return job_id

    return list(await asyncio.gather(*(one(first + i) for i in range(n))))


async def signed_in(h: Harness, who: str | None = None) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """A person signed in to the pages (a new one, or ``who`` of the harness): (user id, client)."""
    if who is None:
        user_id = (await h.store.create_user(f"inbox-{uuid.uuid4().hex[:8]}")).id
        key = await h.store.create_api_key(user_id)
    else:
        user_id, key = h.users[who]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app), base_url="http://t") as page:
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        r = await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})
        assert r.status_code == 303, r.text
        yield user_id, page


def rows(html: str) -> list[str]:
    """The job ids of the inbox's rows, in the page's order."""
    return re.findall(r'href="/runs/([^/"]+)/requests/', html)[::2]  # the title's link, then "Open"


def summary(html: str) -> str:
    return re.search(r"data-inbox-summary>([^<]*)<", html).group(1)


def pager(html: str) -> str:
    found = re.search(r'<nav class="pager".*?</nav>', html, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(0))).strip() if found else ""


async def test_the_inbox_is_paged_newest_first_with_its_filters_and_counts(api: Harness):
    async for me, page in signed_in(api):
        refunds, tools = f"flow-{uuid.uuid4().hex[:6]}", f"flow-{uuid.uuid4().hex[:6]}"
        for flow_id, name in ((refunds, "Refunds"), (tools, "Tool calls")):
            await api.store.save_flow(me, name, {"name": name, "nodes": [], "edges": []}, flow_id=flow_id)
        older = await waiting(api, me, 27, flow_id=refunds)
        newer = await waiting(api, me, 3, flow_id=tools, kind="tool_approval", first=27)
        newest_first = [*reversed(newer), *reversed(older)]

        r = await page.get("/")
        assert r.status_code == 200
        assert rows(r.text) == newest_first[:25]
        assert summary(r.text) == "30 requests wait for you."
        assert "<title>(30) Inbox" in r.text and 'data-inbox-count aria-label="30 waiting"' in r.text
        assert pager(r.text) == "Page 1 of 2 Older →"
        assert re.findall(r'<option value="(flow-[^"]+)"', r.text) == [refunds, tools]  # by name
        r = await page.get("/", params={"p": 2})
        assert rows(r.text) == newest_first[25:] and pager(r.text) == "← Newer Page 2 of 2"
        r = await page.get("/", params={"p": 99})  # past the end: the last page
        assert rows(r.text) == newest_first[25:]

        r = await page.get("/", params={"kind": "tool_approval"})
        assert rows(r.text) == list(reversed(newer)) and summary(r.text) == "3 requests wait for you (filtered)."
        assert pager(r.text) == ""
        r = await page.get("/", params={"flow": refunds, "p": 2})
        assert rows(r.text) == list(reversed(older))[25:] and pager(r.text) == "← Newer Page 2 of 2"
        r = await page.get("/", params={"session": "s-1", "flow": refunds})
        assert rows(r.text) == [j for j in reversed(older) if older.index(j) % 3 == 1]
        assert "<title>(30) Inbox" in r.text  # the header counts everything

        # a decided one leaves it, and the next fills the page
        assert await api.store.claim_suspended_for_resume(newer[-1], f"gate:{newer[-1]}")
        r = await page.get("/")
        assert rows(r.text) == newest_first[1:26] and summary(r.text) == "29 requests wait for you."


async def test_past_1000_waiting_the_counts_stop_counting(api: Harness):
    async for me, page in signed_in(api):
        flow_id = f"flow-{uuid.uuid4().hex[:6]}"
        jobs = await waiting(api, me, 1001, flow_id=flow_id)
        r = await page.get("/")
        assert summary(r.text) == "1000+ requests wait for you."
        assert "<title>(1000+) Inbox" in r.text
        assert rows(r.text) == list(reversed(jobs))[:25] and pager(r.text) == "Page 1 Older →"
        r = await page.get("/", params={"p": 41})  # rows 1,001 on: the oldest, the last page
        assert rows(r.text) == [jobs[0]] and pager(r.text) == "← Newer Page 41"
        # one fewer: counted again
        assert await api.store.claim_suspended_for_resume(jobs[0], f"gate:{jobs[0]}")
        r = await page.get("/")
        assert summary(r.text) == "1000 requests wait for you." and pager(r.text) == "Page 1 of 40 Older →"


async def test_ticked_rows_are_decided_in_one_go_each_once(api: Harness):
    """The inbox's bulk form: the rows ticked, one button, each request decided through the batch
    (its own checks and claim): one decided elsewhere after the page was drawn and one forged for
    another person's run are refused, the rest decided, and the inbox says so. Without the page's
    CSRF token nothing is decided."""
    async for me, page in signed_in(api, "alice"):
        jobs = [(await submit_suspended(api, session_id=f"bulk-{uuid.uuid4().hex[:6]}"))["job_id"] for _ in range(4)]
        async with api.client("bob") as c:
            r = await c.post("/api/v1/flows", json=REFUND)
        assert r.status_code == 201, r.text
        bobs = (await submit_suspended(api, "bob", flow_id=r.json()["id"]))["job_id"]
        html = (await page.get("/")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
        ticks = re.findall(r'<input type="checkbox" class="req-pick" name="item" value="([^"]+)" form="bulk"', html)
        assert set(ticks) >= {f"{j}|gate:{j}" for j in jobs}
        assert 'form id="bulk"' in html and ">Approve all ticked</button>" in html
        ticked = [f"{j}|gate:{j}" for j in jobs] + [f"{bobs}|gate:{bobs}"]

        async with api.client("alice") as c:  # decided elsewhere meanwhile
            r = await c.post(f"/api/v2/workflows/{jobs[1]}/resume",
                             json={"request_id": f"gate:{jobs[1]}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        r = await page.post("/inbox/decide", data={"item": ticked, "action_id": "approve"})  # no CSRF token
        assert r.status_code == 403
        assert (await api.store.get_job(jobs[0])).status == JobStatus.suspended
        r = await page.post("/inbox/decide", data={"csrf": csrf, "item": ticked, "action_id": "approve"})
        assert r.status_code == 303 and r.headers["location"] == "/?decided=3&refused=2", r.headers
        r = await page.get(r.headers["location"])
        assert "3 decided; 2 could not be" in r.text
        vias = []
        for job_id in jobs:
            await api.wait_status(job_id, JobStatus.completed)
            decisions = [e for e in await api.store.read_events(job_id) if e.event == "human_input_decision"]
            assert len(decisions) == 1, job_id
            vias.append(decisions[0].data["via"])
        assert vias.count("page") == 3, vias  # the three the form decided say where they were made
        assert (await api.store.get_job(bobs)).status == JobStatus.suspended  # not hers to decide
        r = await page.post("/inbox/decide", data={"csrf": csrf, "action_id": "approve"})  # nothing ticked
        assert r.headers["location"] == "/?decided=0&refused=0"
        assert "Nothing was decided" in (await page.get(r.headers["location"])).text
        r = await page.post("/inbox/decide", data={"csrf": csrf, "action_id": "approve",
                                                   "item": [f"{bobs}|gate:{bobs}"] * 101})
        assert r.status_code == 422 and "at most 100" in r.text


async def test_a_page_request_does_its_persons_work(api: Harness, monkeypatch: pytest.MonkeyPatch):
    """A page request takes its person's turns at the shared parts (the SQLite writer's:
    engine/fairgate.py), as a request with their API key does: the person's id is the task's
    ``current_user`` while the page is built (nobody's before the fix)."""
    from signoff.engine.fairgate import current_user

    seen: list[str] = []
    real = api.service.header_count

    async def header_count(user):
        seen.append(current_user())
        return await real(user)

    monkeypatch.setattr(api.service, "header_count", header_count)
    async for me, page in signed_in(api):
        assert (await page.get("/")).status_code == 200
        assert seen and set(seen) == {me}, seen
