"""A decision link's page (``/d/{token}``, DESIGN §14; docs/security.md, "Decision links").

Whoever holds the link sees one request's card without signing in, as the person it was sent
to, and decides it once from that page's form. ``GET`` and ``HEAD`` only show (a mail scanner or
a link preview opens links and must decide nothing); the ``POST`` carries the page's form token
(random per link) and passes the same-origin check of every form, takes the link's one use
(Store.use_link) and decides through ``RunService.resume`` as that person, with ``via`` the
channel the link was sent on: every check of the HTTP resume holds (approver, values, exactly
once). A decision refused before it was sent (403, 422) gives the use back so it can be
corrected; one that lost to another decision (409) keeps it. A link that was used, expired or
whose request was decided shows who decided what and when. A link shows nothing else: no run
page, no other request, no inbox (those need signing in).

A token that is malformed or matches no link is one 404, whatever it is: the store is asked by
the token's SHA-256, so how long the lookup takes says nothing about how close a guess was.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.engine import links
from signoff.engine.errors import JobNotFound, SignoffError
from signoff.engine.models import DecisionLink, Job, User, utcnow

from signoff.api.errors import STATUS_BY_CODE, InvalidRequest
from signoff.api.limits import check_body
from signoff.api.models import ResumeRequest
from signoff.api.pages import card, context, forms, rules, views
from signoff.api.pages.page import page_router, text
from signoff.api.pages.render import render
from signoff.api.pages.session import CsrfRefused, check_same_origin
from signoff.api.ratelimit import check_write

router = page_router()


class _Found:
    def __init__(self, link: DecisionLink, job: Job, person: User, view: views.RequestView) -> None:
        self.link, self.job, self.person, self.view = link, job, person, view


async def _found(request: Request, token: str) -> _Found:
    """The link, its run, its person and the request as it is now; JobNotFound (404) for a
    token that is malformed or no link's, or whose run or person is gone."""
    store = request.app.state.store
    digest = links.token_hash(token) if links.well_formed(token) else None
    link = await store.get_link(digest) if digest else None
    if link is None or digest is None or not hmac.compare_digest(link.token_hash, digest):
        raise JobNotFound("No such link")
    job = await store.get_job(link.job_id)
    person = await store.get_user(link.user_id)
    view = await views.request_view(store, views.Names(store), job, link.request_id) if job else None
    if job is None or person is None or view is None:
        raise JobNotFound("No such link")
    return _Found(link, job, person, view)


async def _facts(request: Request, found: _Found, view: views.RequestView) -> Any:
    """What the card shows beside the question (api/pages/context.py), as the link's person sees it."""
    store = request.app.state.store
    job = view.job
    flow = await store.get_flow(job.flow_id, version=job.flow_version) or await store.get_flow(job.flow_id)
    until = None if view.is_open else (view.outcome.decided_at or job.updated_at)
    return await context.facts(store, found.person, job, view.request, flow, until)


async def _page(request: Request, found: _Found, token: str, status: int = 200, *, chosen: str | None = None,
                link_note: str | None = None, **card_kw: Any) -> Response:
    """The link's page: the card with its forms posting to the link (while it can decide), or
    the request's outcome."""
    link, view = found.link, found.view
    usable = link.used_at is None and link.expires_at > utcnow()
    if view.is_open and not usable and link_note is None:
        link_note = ("This link was used already." if link.used_at is not None else "This link has expired.") + \
            " Open signoff and sign in to see the request."
    # while it waits, its rules in words, as the card says them (api/pages/rules.py)
    line = await rules.rules_line(views.Names(request.app.state.store), view.job, view.request,
                                  view.outcome.votes) if view.is_open else None
    ctx = card.card_context(view, facts=await _facts(request, found, view), rules_line=line, **card_kw)
    ctx["card_url"] = f"/d/{quote(token, safe='')}"
    ctx["offer_remember"] = False  # a standing approval is made signed in, on the card (DESIGN §17)
    if not usable:  # nothing to decide from here: the card shows the request and what became of it
        ctx["groups"], ctx["choices"], ctx["allowed"] = [], [], set()
    elif chosen is not None and view.request.kind != "tool_approval":
        # the message's button for one action: only that action, with its fields, to confirm
        ctx["groups"] = [dict(g, options=[o for o in g["options"] if o.action_id == chosen])
                         for g in ctx["groups"] if any(o.action_id == chosen for o in g["options"])]
        ctx["choices"] = [dict(c, checked=True) for c in ctx["choices"] if c["option"].action_id == chosen]
    response = render(request, "link.html", status, **ctx, csrf=link.csrf if usable else "", link=link,
                      usable=usable, person=found.person.name, chosen=chosen, link_note=link_note)
    response.headers["X-Robots-Tag"] = "noindex, nofollow"
    return response


@router.api_route("/d/{token}", methods=["GET", "HEAD"])
async def show(request: Request, token: str, action: str | None = None) -> Response:
    """The link's card. Never decides, whatever the query says."""
    found = await _found(request, token)
    if request.method == "HEAD":
        return Response(status_code=200, headers={"Cache-Control": "no-store"})
    chosen = action if action in found.view.request.allowed_decisions else None
    return await _page(request, found, token, chosen=chosen)


async def _form(request: Request, found: _Found) -> Any:
    check_same_origin(request, request.app.state.settings.public_url)
    limit = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise StarletteHTTPException(413, f"The form is larger than {limit} bytes")
    check_write(request.app.state.write_buckets, found.person.id)
    form = await request.form(max_files=0, max_fields=1000, max_part_size=limit)
    sent = text(form.get("csrf"))
    if not sent or not hmac.compare_digest(found.link.csrf.encode(), sent.encode()):
        raise CsrfRefused("This decision was not sent from its link's page; open the link and decide there")
    return form


@router.post("/d/{token}")
async def decide(request: Request, token: str) -> Response:
    store = request.app.state.store
    service = request.app.state.service
    found = await _found(request, token)
    form = await _form(request, found)
    link, view = found.link, found.view
    req = view.request
    action = text(form.get("action_id")) or ""
    typed = forms.typed_values(form, card.value_prefix(req, action))
    typed_args = forms.typed_args(form)
    typed_message = {k.split(".", 1)[1]: str(v) for k, v in form.items() if k.startswith("message.")}
    typed_by_option = {o.action_id: forms.typed_values(form, card.value_prefix(req, o.action_id)) for o in req.options}
    used_at = utcnow()
    if not await store.use_link(link.token_hash, used_at):
        found = await _found(request, token)  # what became of it
        return await _page(request, found, token, 409)
    try:
        action, values = card._decision_from(view, form)
        try:
            body = ResumeRequest.model_validate({"request_id": link.request_id,
                                                 "decision": {"action_id": action, "values": values}})
        except ValidationError as e:
            raise InvalidRequest("; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in e.errors()[:5]))
        check_body(body, request.app.state.settings, text=("decision",))
        resumed = await service.resume(found.person, link.job_id, link.request_id, body.decision, via=link.channel)
    except (card.EditNotSent, card.NoChoice) as refused:  # nothing sent: the use is given back
        await store.unuse_link(link.token_hash, used_at)
        return await _page(request, found, token, 422, typed_args=typed_args, typed_message=typed_message,
                           error=card._refusal(view, refused), typed_by_option=typed_by_option,
                           error_action="approve" if isinstance(refused, card.EditNotSent) else None)
    except SignoffError as err:
        status = STATUS_BY_CODE.get(err.code, 500)
        if status == 409:  # another decision won (or this person voted already): the use stands
            found.view = await card._request(_AsPerson(request, found.person), link.job_id, link.request_id,
                                             settle=True, lost=err.code == "NOT_RESUMABLE", decided=True)
            found.link = link.model_copy(update={"used_at": used_at})
            note = "Your vote was already counted." if err.code == "ALREADY_VOTED" else None
            return await _page(request, found, token, 409, conflict=err.code != "ALREADY_VOTED", link_note=note)
        await store.unuse_link(link.token_hash, used_at)  # refused before anything was sent: correct it
        if status in (403, 422):
            field_errors, message = card._problems_by_field(err, (req.fields or {}).get(action))
            return await _page(request, found, token, status, typed=typed, field_errors=field_errors,
                               typed_args=typed_args, typed_message=typed_message, error=message, error_action=action,
                               typed_by_option=typed_by_option)
        raise
    found.link = link.model_copy(update={"used_at": used_at})
    found.view = await card._request(_AsPerson(request, found.person), link.job_id, link.request_id, settle=True,
                                     decided=True)
    note = f"Your vote is recorded ({resumed.votes}/{resumed.required} approvals)." \
        if resumed.status == "vote_recorded" else "Your decision is recorded."
    return await _page(request, found, token, link_note=note)


class _AsPerson:
    """What card._request reads of a signed-in page (its store and person), for the link's person."""

    def __init__(self, request: Request, person: User) -> None:
        self.store = request.app.state.store
        self.user = person
