"""/docs and /redoc are served by signoff (issue 28): they load nothing from another origin (no
CDN: they work offline, and no other site's script runs beside a person's API key), run no
inline script, answer under a strict Content-Security-Policy, and every asset they name is
served here."""

from __future__ import annotations

import re

import httpx
import pytest

from signoff.api.app import create_app
from signoff.engine.settings import Settings
from signoff.engine.store.memory import MemoryStore


@pytest.fixture
async def client(tmp_path):
    store = MemoryStore()
    await store.setup()
    app = create_app(Settings(home=tmp_path), store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


@pytest.mark.parametrize("page,needs", [("/docs", ("swagger-ui-bundle.js", "swagger-ui.css", "/static/docs.js")),
                                        ("/redoc", ("redoc.standalone.js",))])
async def test_the_api_docs_load_only_from_signoff(client, page, needs):
    r = await client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"(https?:)?//", r.text), "the page names another origin"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", r.text), "an inline script"
    csp = dict(part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'" and r.headers["x-frame-options"] == "DENY"
    assets = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    for need in needs:
        assert any(a.endswith(need) for a in assets), need
    for asset in assets:
        got = await client.get(asset)
        assert got.status_code == 200, asset
        assert len(got.content) > 100, asset
        if asset.endswith(".js"):
            assert "javascript" in got.headers["content-type"], asset
    spec = next(a for a in re.findall(r'(?:data-spec-url|spec-url)="([^"]+)"', r.text))
    assert (await client.get(spec)).json()["openapi"].startswith("3.")


async def test_swagger_ui_is_started_without_a_validator_call_elsewhere(client):
    js = (await client.get("/static/docs.js")).text
    assert "validatorUrl: null" in js and "SwaggerUIBundle(" in js
    assert not re.search(r"https?://", js)
