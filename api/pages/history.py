"""The history (``/history``): the requests the person's runs asked and they decided, and those
of others' runs they voted on or decided, once closed, newest first, filtered by flow and
outcome, a page at a time."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import Response

from signoff.service.access import runs_taken_part

from signoff.api.pages import views
from signoff.api.pages.card import card_url
from signoff.api.pages.page import Page, PageContext, clean, page_router, paginate, with_count
from signoff.api.pages.render import render

router = page_router()

RUNS = 200  # the person's runs (and others' they took part in) read, each


@router.get("/history")
async def history(request: Request, page: PageContext = Page, flow: str | None = None, action: str | None = None,
                  p: int = 1) -> Response:
    flow, action = clean(flow), clean(action)
    store = page.store
    names = views.Names(store)
    decided: list[views.RequestView] = []
    flows: dict[str, str] = {}
    for job in await runs_taken_part(store, page.user, limit=RUNS):
        events = await store.read_events(job.job_id, limit=100_000)
        mine = job.user_id == page.user.id
        theirs = set() if mine else views.requests_decided_by(events, page.user.id)
        for rid in views.request_ids_of(events):
            if not mine and rid not in theirs:
                continue  # in someone else's run, only what this person decided or voted on
            view = await views.request_view(store, names, job, rid, events)
            if view is None or view.outcome.state in ("open", "applying"):
                continue
            flows[job.flow_id] = view.flow_name
            if flow and job.flow_id != flow:
                continue
            if action and (view.outcome.action_label or view.outcome.state) != action:
                continue
            decided.append(view)
    decided.sort(key=lambda v: v.outcome.decided_at or v.request.paused_at, reverse=True)
    shown, p, pages = paginate(decided, p)
    filters = {k: v for k, v in (("flow", flow), ("action", action)) if v}
    await with_count(request, page)
    return render(request, "history.html", items=shown, total=len(decided),
                  page_no=p, pages=pages, flows=sorted(flows.items(), key=lambda f: f[1].lower()), filters=filters,
                  query=lambda **kw: "?" + urlencode({**filters, **kw}), card_url=card_url)
