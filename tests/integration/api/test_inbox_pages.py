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
from tests.integration.api.conftest import Harness

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


async def signed_in(h: Harness) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    user = await h.store.create_user(f"inbox-{uuid.uuid4().hex[:8]}")
    key = await h.store.create_api_key(user.id)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app), base_url="http://t") as page:
        token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)
        r = await page.post("/sign-in", data={"token": token, "next": "/", "api_key": key})
        assert r.status_code == 303, r.text
        yield user.id, page


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
