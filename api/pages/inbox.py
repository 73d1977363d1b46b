"""The inbox (``/``): what waits for the person, filtered by flow, session and kind, a page at a
time; and its live stream (``/inbox/live``, api/pages/live.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import Response

from signoff.engine.models import utcnow
from signoff.service import RunService

from signoff.api.pages import formatting, live, waiting
from signoff.api.pages.page import Page, PageContext, clean, live_response, page_router, paginate
from signoff.api.pages.render import fragment, render
from signoff.api.pages.views import Names

router = page_router()

KINDS = ("node_input", "tool_approval")


def inbox_watcher(request: Request, service: RunService) -> live.InboxWatcher:
    """The process's one reader of the open inboxes (api/pages/live.py)."""
    watcher = getattr(request.app.state, "inbox_watcher", None)
    if watcher is None or watcher.service is not service:
        watcher = request.app.state.inbox_watcher = live.InboxWatcher(service)
    return watcher


@router.get("/")
async def inbox(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                kind: str | None = None, p: int = 1) -> Response:
    flow, session = clean(flow), clean(session)
    kind = kind if kind in KINDS else None
    everything = await waiting.inbox_items(Names(page.store), await page.service.pending_for(page.user), page.user.id)
    request.state.inbox_count = len(everything)
    items = waiting.filter_inbox(everything, flow=flow, session=session, kind=kind)
    shown, p, pages = paginate(items, p)
    flows = sorted({(i.job.flow_id, i.flow_name) for i in everything}, key=lambda f: f[1].lower())
    filters = {k: v for k, v in (("flow", flow), ("session", session), ("kind", kind)) if v}
    since = formatting.iso(utcnow() - timedelta(seconds=5))  # a pause the page's read just missed still comes
    live_url = "/inbox/live?" + urlencode({**filters, "rows": "1" if p == 1 else "0", "since": since})
    return render(request, "inbox.html", items=shown, total=len(items), page_no=p, pages=pages, flows=flows,
                  filters=filters, live_url=live_url, query=lambda **kw: "?" + urlencode({**filters, **kw}))


@router.get("/inbox/live")
async def inbox_live(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                     kind: str | None = None, rows: str = "1", since: str | None = None) -> Response:
    flow, session = clean(flow), clean(session)
    kind = kind if kind in KINDS else None
    csrf = page.session.csrf
    try:
        after = formatting.aware(datetime.fromisoformat(since)) if since else None
    except ValueError:
        after = None

    async def row(item: waiting.InboxItem) -> str:
        return fragment("_inbox_row.html", item=item, csrf=csrf)

    page.service.feed.check(page.user.id)
    stream = live.inbox_stream(inbox_watcher(request, page.service), page.user, flow=flow, session=session,
                               kind=kind, add_rows=rows == "1", render_row=row, since=after)
    return live_response(request, page, stream)
