"""An unknown path (issue 29): outside the API's (``/api``, ``/mcp``, ``/a2a``) it is the pages'
HTML "Not found" page in their frame with a link home, signed out or signed in; under ``/api`` it
stays the API's JSON 404 with a ``code``. Over HTTP through the real app."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import Harness
from tests.integration.api.test_inbox_pages import signed_in

pytestmark = pytest.mark.temporal  # the store has no part in it

UNKNOWN = ("/no-such-page", "/runs/x/y/z/nothing", "/static/no-such.css", "/%3Cscript%3Ealert(1)%3C%2Fscript%3E")


def _is_404_page(r) -> None:
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "<h1 id=\"err-title\">Not found</h1>" in r.text and 'href="/"' in r.text
    assert "/static/signoff.css" in r.text  # the pages' layout
    assert "<script>alert" not in r.text


async def test_an_unknown_page_is_an_html_404_signed_out_or_in(api: Harness):
    async with api.client() as anon:
        for path in UNKNOWN:
            r = await anon.get(path, headers={"accept": "text/html"})
            _is_404_page(r)
            assert "Sign out" not in r.text
    async for _, page in signed_in(api, "alice"):
        for path in UNKNOWN:
            r = await page.get(path)
            _is_404_page(r)
            assert "Sign out" in r.text and 'name="csrf" value=""' not in r.text  # the person's frame


async def test_an_unknown_api_path_keeps_the_json_404(api: Harness):
    for who in (None, "alice"):
        async with api.client(who) as c:
            for path in ("/api/v1/no-such-thing", "/api/v2/workflows/x/nothing/here"):
                r = await c.get(path, headers={"accept": "text/html"})
                if who is None:
                    assert r.status_code == 401 and r.json()["detail"]["code"] == "UNAUTHORIZED"
                    continue
                assert r.status_code == 404, r.text
                assert r.headers["content-type"].startswith("application/json")
                assert r.json()["detail"]["code"] == "NOT_FOUND"
    async with api.client("alice") as c:  # a method the page does not take is still the API's answer
        r = await c.post("/no-such-page")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        r = await c.delete("/api/v1/flows")
        assert r.status_code == 405 and r.json()["detail"]["code"]
