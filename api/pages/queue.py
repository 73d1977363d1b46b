"""Moving through the queue (issue 29): after a decision on a card, the next request that waits
for the person (or the inbox when nothing does), with a line saying what became of the one just
decided. Both read a bounded amount: one inbox page, one request's story."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from signoff.engine.errors import JobNotFound
from signoff.engine.models import as_utc
from signoff.service.access import asked_job, visible_job

from signoff.api.pages import markdown, rules, views, waiting
from signoff.api.pages.page import PAGE_SIZE, PageContext

SETTLE_SECONDS = 3.0  # how long the line waits for a decision in flight to be recorded
MAX_DONE = 400  # the ``decided`` parameter's length (a job id and a request id)


@dataclass
class Done:
    """What became of the request just decided, said on the page that follows."""

    title: str  # "Approve by alice"
    prompt: str  # the request's question, as a one-line excerpt
    url: str  # its card


def card_url(job_id: str, request_id: str) -> str:
    """A request's card (its path)."""
    return f"/runs/{quote(job_id, safe='')}/requests/{quote(request_id, safe=':')}"


def done_value(job_id: str, request_id: str) -> str:
    return f"{job_id}|{request_id}"


async def next_waiting(page: PageContext, job_id: str, request_id: str, paused_at: datetime | None) -> str | None:
    """The card of the request to decide next: the one after ``request_id`` in the inbox's order
    (newest first), else the newest; only requests the person may decide (not one they voted on,
    not one they may not decide). None when nothing else waits. Reads the inbox's first page."""
    jobs = await page.service.inbox_page(page.user, limit=PAGE_SIZE)
    items = [i for i in await waiting.inbox_items(views.Names(page.store), jobs, page.user.id)
             if not (i.job.job_id == job_id and i.request.request_id == request_id)]
    await rules.mark(page.service.access, page.user, items)
    items = [i for i in items if i.may_decide]
    if not items:
        return None
    after = as_utc(paused_at) if paused_at else None
    chosen = next((i for i in items if after is not None and as_utc(i.request.paused_at) <= after), items[0])
    return card_url(chosen.job.job_id, chosen.request.request_id)


async def done(page: PageContext, value: str | None) -> Done | None:
    """The ``decided`` parameter (``{job}|{request}``) as a line: what became of that request, if
    the person may see it (else nothing: the parameter is only ever a hint)."""
    if not value or len(value) > MAX_DONE or "|" not in value or "\x00" in value:
        return None
    job_id, request_id = value.split("|", 1)
    try:
        try:
            job = await visible_job(page.store, page.user, job_id)
        except JobNotFound:
            job = await asked_job(page.store, page.user, job_id, request_id)
    except JobNotFound:
        return None
    names = views.Names(page.store)
    view = await views.request_view(page.store, names, job, request_id)
    deadline = time.monotonic() + SETTLE_SECONDS  # a decision just sent is being recorded: say whose
    while view is not None and view.outcome.state == "applying" and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        job = await page.store.get_job(job_id) or job
        view = await views.request_view(page.store, names, job, request_id)
    if view is None:
        return None
    outcome = view.outcome
    if outcome.state == "open":
        title = "Your vote is recorded" if any(v.get("user") == page.user.id for v in outcome.votes) else "Sent"
    elif outcome.state == "applying":
        title = "Your decision is being applied"
    else:
        title = outcome.title
    return Done(title=title, prompt=markdown.excerpt(view.request.prompt or "A decision", 120),
                url=card_url(job_id, request_id))
