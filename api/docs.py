"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served by signoff
itself: no CDN (they work offline, and nothing of another origin runs next to a person's API
key), under a Content-Security-Policy of their own. The UIs' files come from the
``fastapi-offline`` package (its static folder only: swagger-ui-dist 5, Apache-2.0; ReDoc 2,
MIT), mounted at ``/docs/assets``; Swagger UI is started by ``/static/docs.js`` (no inline
script). Styles may be inline (both UIs set them from script); scripts only from this origin."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(str(files("fastapi_offline") / "static"))
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}

SWAGGER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - API</title>
<link rel="icon" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui" data-spec-url="{openapi}"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script></body></html>
"""

REDOC = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - API reference</title>
<link rel="icon" href="/docs/assets/favicon.png"></head>
<body><redoc spec-url="{openapi}"></redoc>
<script src="/docs/assets/redoc.standalone.js"></script></body></html>
"""


def install(app: FastAPI) -> None:
    """``/docs``, ``/redoc`` and their assets (the app is made with docs_url=None, redoc_url=None)."""
    app.mount("/docs/assets", StaticFiles(directory=ASSETS), name="docs-assets")
    openapi = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return HTMLResponse(SWAGGER.format(title=app.title, openapi=openapi), headers=HEADERS)

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return HTMLResponse(REDOC.format(title=app.title, openapi=openapi), headers=HEADERS)
