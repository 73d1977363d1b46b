"""Signing in with an API key, and out (a page session: api/pages/session.py)."""

from __future__ import annotations

import asyncio

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from signoff.api.pages.page import Page, PageContext, page_router, read_form, safe_next, sessions_of, text
from signoff.api.pages.render import render

router = page_router()


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str | None = None) -> Response:
    sessions = sessions_of(request)
    if await sessions.load(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    token, cookie = sessions.signin_token(request)
    response = render(request, "signin.html", token=token, next=safe_next(next))
    if cookie:
        sessions.set_signin_cookie(request, response, cookie)
    return response


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    sessions = sessions_of(request)
    form = await read_form(request)
    sessions.check_signin_token(request, text(form.get("token")))
    key = (text(form.get("api_key")) or "").strip()
    target = safe_next(text(form.get("next")))
    user = await request.app.state.store.user_for_api_key(key) if key and len(key) <= 200 else None
    if user is None:
        token, _ = sessions.signin_token(request)
        await asyncio.sleep(0.2)  # a guess costs a little
        return render(request, "signin.html", 401, token=token, next=target,
                      error="That API key is not valid. Create one with `signoff users create NAME`.")
    value, _session = await sessions.create(user)
    response = RedirectResponse(target, status_code=303)
    sessions.set_cookie(request, response, value)
    response.delete_cookie("signoff_signin", path="/sign-in")
    return response


@router.post("/sign-out")
async def sign_out(request: Request, page: PageContext = Page) -> Response:
    await read_form(request, page)
    await page.sessions.end(request)
    page.service.feed.recheck(page.user.id)  # this session's open streams end now
    response = RedirectResponse("/sign-in", status_code=303)
    page.sessions.clear_cookie(request, response)
    return response
