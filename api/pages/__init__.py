"""The person's pages (DESIGN §10), served by the API process at ``/`` (the JSON API stays under
``/api``): sign in with an API key, the inbox, decision cards, run pages, flows and history.
Server-rendered (Jinja2); a little JavaScript (``static/signoff.js``) only for live updates.
docs/pages.md tells how they work.

One router per page (signin, inbox, card, run, flows, history), each thin: who may see and run
what is :mod:`signoff.service.access`'s, every decision goes through ``RunService.resume`` and
every run through ``RunService.submit``; a page reads its form or query, calls them and renders
the answer. What they share is in ``page`` (errors as pages, the signed-in person, forms, live
streams) and ``render`` (templates and their filters); what they show is told by ``views`` (a
request and its outcome), ``waiting`` (inbox rows), ``graph``, ``timeline`` and ``formatting``."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.api.pages import card, flows, history, inbox, link, run, signin, standing, verify
from signoff.api.pages.page import not_found_pages
from signoff.api.pages.security import PageHeaders

STATIC = Path(__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Add the pages, their static files and their security headers to ``app``; an unknown
    path outside the API's (``/api``, ``/mcp``, ``/a2a``) is the pages' 404 page, not JSON."""
    for page in (signin, inbox, card, link, run, flows, history, standing, verify):
        app.include_router(page.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(PageHeaders)
    app.add_exception_handler(StarletteHTTPException,
                              not_found_pages(app.exception_handlers[StarletteHTTPException]))
