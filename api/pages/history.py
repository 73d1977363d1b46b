"""The history (``/history``): the requests the person's runs asked and they decided, and those
of others' runs they voted on or decided, once closed, newest first, filtered by flow and
outcome, a page at a time."""

from __future__ import annotations

import csv
import io
import json
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import Response

from signoff.service.access import runs_taken_part

from signoff.engine import plaintext

from signoff.api.pages import formatting, views
from signoff.api.pages.card import card_url
from signoff.api.pages.page import Page, PageContext, clean, page_router, paginate, with_count
from signoff.api.pages.render import render

router = page_router()

RUNS = 200  # the person's runs (and others' they took part in) read, each


async def _decided(page: PageContext, flow: str | None, action: str | None
                   ) -> tuple[list[views.RequestView], dict[str, str]]:
    """The person's decided or closed requests with the filters, newest first, and the flows seen."""
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
    return decided, flows


@router.get("/history")
async def history(request: Request, page: PageContext = Page, flow: str | None = None, action: str | None = None,
                  p: int = 1) -> Response:
    flow, action = clean(flow), clean(action)
    decided, flows = await _decided(page, flow, action)
    shown, p, pages = paginate(decided, p)
    filters = {k: v for k, v in (("flow", flow), ("action", action)) if v}
    await with_count(request, page)
    return render(request, "history.html", items=shown, total=len(decided),
                  page_no=p, pages=pages, flows=sorted(flows.items(), key=lambda f: f[1].lower()), filters=filters,
                  query=lambda **kw: "?" + urlencode({**filters, **kw}), card_url=card_url,
                  csv_url="/history.csv" + ("?" + urlencode(filters) if filters else ""))


CSV_ROWS = 5_000  # the rows of one export (the history itself reads at most RUNS runs)
CSV_CELL = 4_000  # the characters of one cell
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would read a cell starting so as a formula


def csv_cell(value: Any) -> str:
    """A cell as text, cut, and never a formula: one starting with = + - @ (or a tab or CR) gets a
    leading quote, as OWASP's CSV injection advice says."""
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                                     default=str)
    text = text[:CSV_CELL]
    return "'" + text if text.startswith(FORMULA) else text


def _votes(outcome: views.Outcome) -> str:
    return "; ".join(f"{v.get('user_name') or v.get('user')}: {v.get('action_id')}"
                     f"{' via ' + str(v['via']) if v.get('via') else ''}" for v in outcome.votes[:100])


@router.get("/history.csv")
async def history_csv(request: Request, page: PageContext = Page, flow: str | None = None,
                      action: str | None = None) -> Response:
    """What the history shows with the same filters, as CSV (at most CSV_ROWS rows): when, flow,
    run, request, kind, question, outcome, decision, who decided, via, every voter, values."""
    flow, action = clean(flow), clean(action)
    decided, _ = await _decided(page, flow, action)
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(["decided_at", "flow", "run", "request", "kind", "question", "outcome", "decision", "decided_by",
                     "via", "votes", "values"])
    for view in decided[:CSV_ROWS]:
        o = view.outcome
        when = formatting.iso(o.decided_at) if o.decided_at else ""
        writer.writerow([csv_cell(c) for c in (
            when, view.flow_name, view.job.job_id, view.request.request_id, view.kind_label,
            plaintext.one_line(view.request.prompt or "", 2_000), o.mark[0], o.action_label or o.title, o.decided_by,
            o.via, _votes(o), o.values if o.values else "")])
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="signoff-history.csv"',
                             "Cache-Control": "no-store"})
