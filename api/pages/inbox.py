"""The inbox (``/``): what waits for the person, filtered by flow, session and kind, a page at a
time; and its live stream (``/inbox/live``, api/pages/live.py)."""

from __future__ import annotations

import functools

import math
from datetime import datetime, timedelta
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from signoff.engine.errors import SignoffError
from signoff.engine.models import Decision, utcnow
from signoff.service import RunService, batch
from signoff.service.backend import Resumed

from signoff.api.pages import formatting, live, queue, rules, waiting
from signoff.api.errors import InvalidRequest
from signoff.api.pages.page import PAGE_SIZE, Page, PageContext, clean, live_response, page_router, read_form, text
from signoff.api.ratelimit import paced_writes
from signoff.api.pages.render import fragment, render
from signoff.api.pages.views import Names

router = page_router()

KINDS = ("node_input", "tool_approval")
MAX_PAGE = 10_000  # the deepest page asked for (an offset is rows read)


def inbox_watcher(request: Request, service: RunService) -> live.InboxWatcher:
    """The process's one reader of the open inboxes (api/pages/live.py)."""
    watcher = getattr(request.app.state, "inbox_watcher", None)
    if watcher is None or watcher.service is not service:
        watcher = request.app.state.inbox_watcher = live.InboxWatcher(service)
    return watcher


SORTS = ("newest", "oldest", "deadline")
SCAN = 1000  # the waiting requests a search, the deadline order or the grouping read (the newest, or the oldest)


@router.get("/")
async def inbox(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                kind: str | None = None, p: int = 1, decided: str | None = None, refused: int | None = None,
                sort: str | None = None, q: str | None = None, group: str | None = None) -> Response:
    flow, session = clean(flow), clean(session)
    kind = kind if kind in KINDS else None
    sort = sort if sort in SORTS else "newest"
    needle = waiting.search_text(q)
    query_text = q.strip()[:waiting.SEARCH_MAX] if needle and q else ""
    grouped = group == "flow"
    # newest or oldest first: a page of rows (and one more: whether another page follows) and
    # bounded counts, never the whole waiting set: the store's indexed reads cost the page, not
    # the number waiting (docs/pages.md); past 1,000 a count says "1000+" and the pager no
    # longer counts pages. A search, the deadline order and the grouping read the first SCAN
    # waiting requests instead (the waiting set, bounded) and say so when there are more.
    everything = await page.service.inbox_count(page.user)
    request.state.inbox_count = await page.service.header_count(page.user)
    p = max(1, min(p, MAX_PAGE))
    names = Names(page.store)
    counts: dict[str, int] = {}
    if needle or sort == "deadline" or grouped:
        jobs = await page.service.inbox_page(page.user, flow_id=flow, session_id=session, kind=kind,
                                             limit=SCAN + 1, oldest=sort == "oldest")
        found = await waiting.inbox_items(names, jobs[:SCAN], page.user.id)
        if needle:
            found = [i for i in found if waiting.matches(i, needle)]
        if sort == "deadline":
            found = waiting.by_deadline(found)
        if grouped:
            found = waiting.by_flow(found)
            for i in found:
                counts[i.job.flow_id] = counts.get(i.job.flow_id, 0) + 1
        total: int | str = len(found)
        pages = max(1, math.ceil(len(found) / PAGE_SIZE))
        p = min(p, pages)
        shown = found[(p - 1) * PAGE_SIZE:p * PAGE_SIZE]
        older = len(found) > p * PAGE_SIZE
        truncated = len(jobs) > SCAN
    else:
        total = await page.service.inbox_count(page.user, flow_id=flow, session_id=session, kind=kind) \
            if flow or session or kind else everything
        pages = None if isinstance(total, str) else max(1, math.ceil(total / PAGE_SIZE))
        if pages is not None:
            p = min(p, pages)
        jobs = await page.service.inbox_page(page.user, flow_id=flow, session_id=session, kind=kind,
                                             limit=PAGE_SIZE + 1, offset=(p - 1) * PAGE_SIZE, oldest=sort == "oldest")
        older = len(jobs) > PAGE_SIZE
        shown = await waiting.inbox_items(names, jobs[:PAGE_SIZE], page.user.id)
        truncated = False
    await rules.mark(page.service.access, page.user, shown)
    flows = sorted([(fid, await names.flow_name(fid)) for fid in await page.service.inbox_flows(page.user)],
                   key=lambda f: f[1].lower())
    filters = {k: v for k, v in (("flow", flow), ("session", session), ("kind", kind), ("q", query_text)) if v}
    ordering = {k: v for k, v in (("sort", sort if sort != "newest" else None), ("group", "flow" if grouped else None))
                if v}
    # the bulk action's buttons: the options of the rows that can be decided from the list
    bulk = list({o.action_id: o.label for i in shown if i.quick for o in i.request.options}.items())[:4]
    # ``decided``: the bulk action's count, or the request a decision was just sent on
    bulk_count = int(decided) if decided and decided.isdigit() and len(decided) < 6 else None
    notice = _bulk_notice(bulk_count, refused)
    done = None if bulk_count is not None else await queue.done(page, decided)
    since = formatting.iso(utcnow() - timedelta(seconds=5))  # a pause the page's read just missed still comes
    voted = [i for i in shown if i.standing is not None and i.standing.voted]  # waiting on others
    # the stream is told which rows the page shows: it sends their changes, never the waiting set;
    # it adds a new request at the top only where the top is where it belongs (newest first, not
    # grouped; a search's only when it matches)
    adds = p == 1 and sort == "newest" and not grouped
    live_url = "/inbox/live?" + urlencode({**filters, **ordering, "rows": "1" if adds else "0", "since": since,
                                           "ids": ",".join(i.request.request_id for i in shown)})
    return render(request, "inbox.html", items=[i for i in shown if i not in voted], others=voted, total=total,
                  page_no=p, pages=pages, older=older, flows=flows, bulk=bulk, notice=notice, done=done,
                  filters=filters, sort=sort, grouped=grouped, group_counts=counts,
                  truncated=truncated, scan_cap=SCAN, live_url=live_url,
                  query=lambda **kw: "?" + urlencode({**filters, **ordering, **kw}))


@router.post("/inbox/decide")
async def decide_many(request: Request, page: PageContext = Page) -> Response:
    """The inbox's bulk action: the rows ticked (``item``: ``{job_id}|{request_id}``, at most
    100) each decided with the button's ``action_id``, through the same batch as
    ``POST /api/v2/workflows/resume-batch`` (service/batch.py: each its own checks and claim,
    each a write of the budget); back to the inbox with how many were decided and how many not
    (decided elsewhere meanwhile, not the person's to decide, or an action the request lacks)."""
    form = await read_form(request, page)  # same origin, CSRF, one write
    action = clean(text(form.get("action_id")))
    ticked = [v for v in (text(x) for x in form.getlist("item")) if v and "|" in v]
    if len(ticked) > batch.MAX_ITEMS:
        raise InvalidRequest(f"Choose at most {batch.MAX_ITEMS} requests at once")
    if action is None or not ticked:
        return RedirectResponse("/?" + urlencode({"decided": 0, "refused": 0}), status_code=303)
    items: list[batch.BatchItem | SignoffError] = []
    for value in ticked:
        job_id, request_id = value.split("|", 1)
        items.append(batch.BatchItem(job_id, request_id, Decision(action_id=action)))
    settings = request.app.state.settings
    outcomes = await batch.resume_batch(functools.partial(page.service.resume, via="page"), page.user, items,
                                        concurrency=settings.resume_batch_concurrency,
                                        admit=paced_writes(request.app.state.write_buckets, page.user.id))
    decided = sum(isinstance(o, Resumed) for o in outcomes)
    return RedirectResponse("/?" + urlencode({"decided": decided, "refused": len(outcomes) - decided}),
                            status_code=303)


@router.get("/inbox/live")
async def inbox_live(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                     kind: str | None = None, rows: str = "1", since: str | None = None, ids: str = "",
                     sort: str | None = None, q: str | None = None, group: str | None = None) -> Response:
    flow, session = clean(flow), clean(session)
    kind = kind if kind in KINDS else None
    needle = waiting.search_text(q)
    # a new request goes on top only in the inbox's own order (newest first, not grouped)
    adds = rows == "1" and (sort or "newest") == "newest" and group != "flow"
    csrf = page.session.csrf
    try:
        after = formatting.aware(datetime.fromisoformat(since)) if since else None
    except ValueError:
        after = None

    async def row(item: waiting.InboxItem) -> str:
        if needle and not waiting.matches(item, needle):
            return ""  # not what the page searched for: nothing to add
        await rules.mark(page.service.access, page.user, [item])
        return fragment("_inbox_row.html", item=item, csrf=csrf)

    page.service.feed.check(page.user.id)
    shown = [i for i in (clean(x) for x in ids[:live.MAX_SHOWN * 210].split(",")[:live.MAX_SHOWN]) if i]
    stream = live.inbox_stream(inbox_watcher(request, page.service), page.user, flow=flow, session=session,
                               kind=kind, add_rows=adds, render_row=row, since=after, shown_ids=shown,
                               header_count=functools.partial(page.service.header_count, page.user))
    return live_response(request, page, stream)


@router.get("/inbox/count/live")
async def count_live(request: Request, page: PageContext = Page) -> Response:
    """The header's Inbox count, live on every page (the inbox page's own stream carries it there)."""
    page.service.feed.check(page.user.id)
    stream = live.count_stream(inbox_watcher(request, page.service), page.user,
                               functools.partial(page.service.header_count, page.user))
    return live_response(request, page, stream)


def _bulk_notice(decided: int | None, refused: int | None) -> str | None:
    """What the bulk action did, said back on the inbox it returned to."""
    if decided is None:
        return None
    decided, refused = max(0, min(decided, batch.MAX_ITEMS)), max(0, min(refused or 0, batch.MAX_ITEMS))
    if not decided and not refused:
        return "Nothing was decided: tick the requests, then choose a decision."
    said = f"{decided} decided" if decided != 1 else "1 decided"
    if refused:
        said += (f"; {refused} could not be (decided elsewhere meanwhile, no longer yours to decide, or without "
                 "that option): open them to see why")
    return said + "."
