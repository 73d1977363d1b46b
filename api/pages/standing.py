"""Standing approvals (``/standing-approvals``, DESIGN §17): the rules the person made and those
on flows they own (tool, flow, scope, expiry, uses), each with a Revoke button (a form with the
CSRF token, as every other page form). Revoking asks a person again at the rule's next call."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from signoff.engine.errors import StandingApprovalNotFound
from signoff.engine.models import utcnow
from signoff.engine.standing import rule_public
from signoff.service import standing

from signoff.api.pages import formatting
from signoff.api.pages.page import Page, PageContext, page_router, read_form, with_count
from signoff.api.pages.render import render

router = page_router()


@router.get("/standing-approvals")
async def standing_approvals(request: Request, page: PageContext = Page) -> Response:
    store, now = page.store, utcnow()
    rules = await standing.rules_of(store, page.user)
    flows: dict[str, str] = {}
    people: dict[str, str] = {}
    rows = []
    for rule in rules:
        if rule.flow_id not in flows:
            flow = await store.get_flow(rule.flow_id)
            flows[rule.flow_id] = flow.name if flow is not None else rule.flow_id
        if rule.maker_id not in people:
            maker = await store.get_user(rule.maker_id)
            people[rule.maker_id] = maker.name if maker is not None else "(deleted user)"
        rows.append({**rule_public(rule, now), "flow_name": flows[rule.flow_id], "maker_name": people[rule.maker_id],
                     "mine": rule.maker_id == page.user.id, "expires_when": formatting.when(rule.expires_at)})
    await with_count(request, page)
    return render(request, "standing.html", rules=rows, revoked=request.query_params.get("revoked"))


@router.post("/standing-approvals/{rule_id}/revoke")
async def revoke(request: Request, rule_id: str, page: PageContext = Page) -> Response:
    await read_form(request, page)  # same origin, CSRF, size, write rate
    try:
        await standing.revoke(page.store, page.user, rule_id)
    except StandingApprovalNotFound:
        await with_count(request, page)
        return render(request, "error.html", 404, title="Not found",
                      message="No such standing approval (or it is not yours to revoke).")
    return RedirectResponse("/standing-approvals?revoked=1", status_code=303)
