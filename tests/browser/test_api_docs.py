"""/docs and /redoc render in a real browser from signoff's own files, under their CSP (issue 28):
the operations are listed, nothing is fetched from another origin (ReDoc's sidebar names its
maker's logo on a CDN: the CSP blocks it, and the image hides itself), and no other CSP
violation or script error is reported."""

from __future__ import annotations

from playwright.async_api import Browser, Request, expect

from tests.browser.conftest import WIDE, Person, Site, watch

REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


async def test_the_api_docs_render_offline_under_their_csp(browser: Browser, site: Site) -> None:
    context = await browser.new_context(viewport=WIDE)
    page = await context.new_page()
    who = Person(context, page, site)
    watch(page, who)
    fetched: list[str] = []
    blocked: list[str] = []

    def finished(request: Request) -> None:
        if not request.url.startswith((site.url, "data:", "blob:")):
            fetched.append(request.url)

    def failed(request: Request) -> None:
        if "ERR_BLOCKED_BY_CSP" in (request.failure or ""):
            blocked.append(request.url)

    page.on("requestfinished", finished)
    page.on("requestfailed", failed)
    try:
        await page.goto(site.url + "/docs")
        await expect(page.locator(".opblock").first).to_be_visible()  # the operations, rendered by Swagger UI
        await expect(page.locator(".opblock-summary-path", has_text="/api/v2/workflows").first).to_be_visible()
        await page.goto(site.url + "/redoc")
        await expect(page.get_by_role("heading", name="signoff").first).to_be_visible()  # ReDoc's title
        await expect(page.get_by_text("/api/v2/workflows").first).to_be_attached()
        assert fetched == [] and set(blocked) <= {REDOC_LOGO}
        who.console_errors = [e for e in who.console_errors if REDOC_LOGO not in e]
        who.clean()
    finally:
        await context.close()
