"""The person's pages (DESIGN §10), served by the API process at ``/`` (the JSON API stays under
``/api``): sign in with an API key, the inbox, decision cards, run pages, flows and history.
Server-rendered (Jinja2); a little JavaScript (``static/signoff.js``) only for live updates.
docs/pages.md tells how they work."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from signoff.api.pages.routes import router
from signoff.api.pages.security import PageHeaders

STATIC = Path(__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Add the pages, their static files and their security headers to ``app``."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(PageHeaders)
