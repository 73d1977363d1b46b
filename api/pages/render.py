"""The pages' templates (api/pages/templates/, Jinja2, autoescaped) and their filters: a page
rendered whole (:func:`render`, with the signed-in person, the CSRF token and the inbox count
every page's frame shows) or a fragment for a live stream (:func:`fragment`)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from signoff.api.pages import formatting, forms, markdown

TEMPLATES = Path(__file__).resolve().parent / "templates"

# auto_reload off: the templates ship with the code, and a page of 25 inbox rows (each an
# include) would otherwise stat its templates' files 25 times
env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                  trim_blocks=True, lstrip_blocks=True, auto_reload=False)
env.filters.update(markdown=markdown.render, excerpt=markdown.excerpt, ago=formatting.ago,
                   stamp=formatting.stamp, iso=formatting.iso, duration=formatting.duration_text,
                   pretty=formatting.compact_json, q=lambda s: quote(str(s), safe=""),
                   time_left=formatting.time_left, clock=formatting.clock, when=formatting.when,
                   domid=lambda s: "i" + hashlib.sha1(str(s).encode()).hexdigest()[:12])
env.globals.update(STATUS_TEXT=formatting.STATUS_TEXT)

env.globals.update(remember_durations=forms.remember_durations)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    page = getattr(request.state, "page", None)  # the signed-in person's PageContext (api/pages/page.py)
    context.setdefault("user", page.user if page else None)
    context.setdefault("csrf", page.session.csrf if page else "")
    context.setdefault("inbox_count", getattr(request.state, "inbox_count", None))
    context["request"] = request
    context["path"] = request.url.path
    html = env.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status_code)


def fragment(template: str, **context: Any) -> str:
    return env.get_template(template).render(**context)
