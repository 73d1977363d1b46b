"""What every page route shares: its errors as pages (:class:`PageRoute`), the signed-in person
(:func:`signed_in`, ``Page``), a posted form read after the same-origin, CSRF, size and write-rate
checks (:func:`read_form`), a live stream re-checked while it is open (:func:`live_response`),
and the small readings of query and form values. Each page's router (api/pages/inbox.py,
card.py, run.py, flows.py, history.py, signin.py) is made by :func:`page_router`."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.engine.errors import JobNotFound, SignoffError
from signoff.engine.fairgate import act_for
from signoff.engine.models import User
from signoff.engine.store.base import Store
from signoff.service import RunService
from signoff.service.access import visible_job

from signoff.api.auth import guarded
from signoff.api.deps import service_of
from signoff.api.errors import STATUS_BY_CODE, printable, retry_headers
from signoff.api.pages.render import render
from signoff.api.pages.session import CsrfRefused, PageSession, Sessions, check_csrf, check_same_origin
from signoff.api.ratelimit import check_write
from signoff.api.sse import sse_response

T = TypeVar("T")

PAGE_SIZE = 25  # the rows of a list page (the inbox, the history)
NOT_FOUND_TEXT = "There is no such page, or it is not yours to see."
UNAVAILABLE_TEXT = "signoff cannot reach its database or Temporal right now. Try again in a few seconds."


class SignInRequired(Exception):
    pass


class PageRoute(APIRoute):
    """A page route: its errors are pages (404 for anything you may not see), never JSON."""

    def get_route_handler(self) -> Callable:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInRequired:
                if request.method != "GET" or request.url.path.endswith("/live"):
                    return Response(status_code=204 if request.url.path.endswith("/live") else 401)
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse("/sign-in?" + urlencode({"next": target}), status_code=303)
            except CsrfRefused as e:
                return render(request, "error.html", 403, title="Refused", message=str(e))
            except SignoffError as e:
                status = STATUS_BY_CODE.get(e.code, 500)
                if status == 404:
                    return render(request, "error.html", 404, title="Not found", message=NOT_FOUND_TEXT)
                if status == 503:  # the database or Temporal is away for a moment
                    response = render(request, "error.html", 503, title="Unavailable", message=UNAVAILABLE_TEXT)
                elif status >= 500:
                    raise
                else:
                    response = render(request, "error.html", status, title="Refused", message=printable(e.message))
                response.headers.update(retry_headers(status, e.details))
                return response
            except RequestValidationError:
                return render(request, "error.html", 404, title="Not found", message=NOT_FOUND_TEXT)
            except StarletteHTTPException as e:
                return render(request, "error.html", e.status_code, title="Refused", message=str(e.detail))

        return handler


def not_found_pages(api_handler: Callable[[Request, Any], Awaitable[Response]]) \
        -> Callable[[Request, Any], Awaitable[Response]]:
    """The app's handler of HTTP errors with one change: a 404 for a path outside the API's
    (``/api``, ``/mcp``, ``/a2a``: api/auth.py, ``guarded``) is the pages' "Not found" page, in
    their frame (the signed-in person's, when a page session stands) with a link home. The API's
    own 404s keep their JSON with a ``code``; so does every other status."""
    async def handler(request: Request, exc: Any) -> Response:
        if getattr(exc, "status_code", None) != 404 or guarded(request.url.path):
            return await api_handler(request, exc)
        try:
            found = await sessions_of(request).load(request)
        except Exception:  # the frame only: a store away for a moment still gets its 404 page
            found = None
        session, user = found if found else (None, None)
        return render(request, "error.html", 404, title="Not found", message=NOT_FOUND_TEXT,
                      user=user, csrf=session.csrf if session else "")

    return handler


def page_router() -> APIRouter:
    """A router of pages: its routes' errors are pages, and none is in the OpenAPI schema."""
    return APIRouter(route_class=PageRoute, include_in_schema=False)


# ---- who is signed in -------------------------------------------------------------------------------


@dataclass
class PageContext:
    session: PageSession
    user: User
    store: Store
    service: RunService
    sessions: Sessions


def sessions_of(request: Request) -> Sessions:
    app = request.app
    if getattr(app.state, "page_sessions", None) is None:
        app.state.page_sessions = Sessions(app.state.store, app.state.settings)
    return app.state.page_sessions


async def signed_in(request: Request) -> PageContext:
    sessions = sessions_of(request)
    found = await sessions.load(request)
    if found is None:
        raise SignInRequired()
    session, user = found
    act_for(user.id)  # the request's work takes this user's turns (engine/fairgate.py), as an API key's does
    page = PageContext(session=session, user=user, store=request.app.state.store, service=service_of(request),
                       sessions=sessions)
    request.state.page = page
    return page


Page = Depends(signed_in)


async def with_count(request: Request, page: PageContext) -> None:
    """The inbox count every page's frame shows."""
    # a number, or "1000+"; without what the person voted on (it waits on others)
    request.state.inbox_count = await page.service.header_count(page.user)


# ---- live streams -----------------------------------------------------------------------------------


def still_signed_in(request: Request, page: PageContext, job_id: str | None = None) -> Callable[[], Any]:
    """For a live stream's re-check: the page session that opened it still stands (not signed
    out, expired or ended with the person's keys) and its person may still see ``job_id``."""
    async def allowed() -> bool:
        loaded = await page.sessions.load(request)
        if loaded is None or loaded[1].id != page.user.id:
            return False
        if job_id is not None:
            try:
                await visible_job(page.store, loaded[1], job_id)
            except JobNotFound:
                return False
        return True

    return allowed


def live_response(request: Request, page: PageContext, stream: AsyncIterator[bytes],
                  job_id: str | None = None) -> Response:
    """A page's live stream (api/pages/live.py) as Server-Sent Events, for as long as
    :func:`still_signed_in` holds (api/sse.py: sse_response)."""
    return sse_response(stream, still_signed_in(request, page, job_id), settings=request.app.state.settings,
                        feed=page.service.feed, user_id=page.user.id, headers={"Cache-Control": "no-store"})


# ---- forms and query values ------------------------------------------------------------------------


async def read_form(request: Request, page: PageContext | None = None, *, files: int = 0) -> FormData:
    """The posted form, after the same-origin and CSRF checks and within the body limit."""
    check_same_origin(request, request.app.state.settings.public_url)
    limit = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise StarletteHTTPException(413, f"The form is larger than {limit} bytes")
    if page is not None:  # a signed-in person's form is a write like the API's (SIGNOFF_WRITE_RATE)
        check_write(request.app.state.write_buckets, page.user.id)
    form = await request.form(max_files=files, max_fields=1000, max_part_size=limit)
    if page is not None:
        check_csrf(page.session, text(form.get("csrf")))
    return form


def paginate(items: list[T], p: int) -> tuple[list[T], int, int]:
    """Page ``p`` of ``items`` (kept within 1 and the last page): its rows, ``p`` and the count of pages."""
    pages = max(1, math.ceil(len(items) / PAGE_SIZE))
    p = min(max(1, p), pages)
    return items[(p - 1) * PAGE_SIZE: p * PAGE_SIZE], p, pages


def text(value: Any) -> str | None:
    """A form value that is text (not a file)."""
    return value if isinstance(value, str) else None


def clean(value: str | None, limit: int = 200) -> str | None:
    """A filter or id from a query or form: stripped and cut, None when empty or holding NUL."""
    value = (value or "").strip()
    return value[:limit] if value and "\x00" not in value else None


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site, else ``/``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target or len(target) > 2000:
        return "/"
    return target
