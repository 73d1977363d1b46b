"""Browser tests: Playwright for Python driving Debian's Chromium (``scripts/ensure-chromium``,
launched by its executable path: Playwright's own browser download cannot be reached) against a
real signoff: the app with its pages behind uvicorn on 127.0.0.1, a real worker on the session's
Temporal dev server, on SQLite and on PostgreSQL (the API tests' harness).

Screenshots go to ``tests/browser/screenshots/`` (not committed), at 390 and 1280 pixels wide."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, ConsoleMessage, Dialog, Page, async_playwright, expect

from tests.integration.api.conftest import Harness, harness, serving

CHROMIUM = os.environ.get("SIGNOFF_TEST_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parent / "screenshots"
NARROW = {"width": 390, "height": 844}
WIDE = {"width": 1280, "height": 900}

expect.set_options(timeout=20_000)  # a loaded 2-core machine; expect() polls, it never sleeps


@dataclass
class Site:
    h: Harness
    url: str
    backend: str

    def api(self, user: str) -> httpx.AsyncClient:
        """The JSON API over real HTTP, as another process would use it."""
        return httpx.AsyncClient(base_url=self.url, headers={"x-api-key": self.h.users[user][1]}, timeout=60)


@pytest_asyncio.fixture(scope="module")
async def site(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Site]:
    async with harness(store_backend, tmp_path_factory.mktemp("pages"), temporal_client) as h:
        async with serving(h.app, force_exit=True) as url:  # open live pages (SSE) would hold a graceful stop
            yield Site(h, url, store_backend)


@pytest_asyncio.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium is not at {CHROMIUM}: run ./scripts/ensure-chromium (make test does)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM)
        try:
            yield b
        finally:
            await b.close()


@dataclass
class Person:
    """One signed-in browser context, with what its pages said that a test must see."""

    context: BrowserContext
    page: Page
    site: Site
    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    async def new_page(self) -> Page:
        page = await self.context.new_page()
        watch(page, self)
        return page

    def clean(self) -> None:
        """No dialog ever fired and no page broke the CSP or raised an error."""
        assert self.dialogs == [], self.dialogs
        assert self.console_errors == [], self.console_errors


def watch(page: Page, person: Person) -> None:
    async def on_dialog(dialog: Dialog) -> None:
        person.dialogs.append(dialog.message)
        await dialog.dismiss()

    def on_console(msg: ConsoleMessage) -> None:
        # a 404 or 409 page the test asked for is an answer, not a broken page
        if msg.type == "error" and not msg.text.startswith("Failed to load resource: the server responded"):
            person.console_errors.append(msg.text)

    page.on("dialog", on_dialog)
    page.on("console", on_console)
    page.on("pageerror", lambda err: person.console_errors.append(str(err)))


@contextlib.asynccontextmanager
async def person(browser: Browser, site: Site, user: str, viewport: dict[str, int] | None = None,
                 **context_kw: Any) -> AsyncIterator[Person]:
    """A browser context signed in as ``user`` through the sign-in page."""
    context = await browser.new_context(viewport=viewport or WIDE, **context_kw)
    page = await context.new_page()
    who = Person(context, page, site)
    watch(page, who)
    try:
        await page.goto(site.url + "/")
        await expect(page).to_have_url(f"{site.url}/sign-in?next=%2F")
        await page.get_by_label("API key").fill(site.h.users[user][1])
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
        yield who
    finally:
        await context.close()


async def shoot(page: Page, name: str) -> list[Path]:
    """Screenshots of the page at 390 and 1280 pixels wide (full page)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    paths = []
    for label, viewport in (("narrow", NARROW), ("wide", WIDE)):
        await page.set_viewport_size(viewport)
        overflow = await page.evaluate("""() => {
            const w = document.documentElement.clientWidth;
            if (document.documentElement.scrollWidth <= w) return [];
            return [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > w + 1 && !e.closest('.graph-scroll'))
                .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));
        }""")
        assert overflow == [], f"{name} at {viewport['width']} px is wider than the screen: {overflow}"
        path = SHOTS / f"{name}-{label}.png"
        await page.screenshot(path=str(path), full_page=True)
        paths.append(path)
    if size:
        await page.set_viewport_size(size)
    return paths


async def decided_card(page: Page) -> None:
    """After a decision on a card the page moves on (the next waiting request, or the list) and
    says what became of the one decided (``[data-done]``): its link opens the decided card. A
    refused decision (409) stays on the card, which then shows its outcome."""
    done = page.locator("[data-done] a")
    closed = page.locator("article.is-closed [data-outcome]")
    await expect(done.or_(closed).first).to_be_visible()
    if await done.count():
        await done.click()
        await expect(closed).to_be_visible()


async def send_held(page: Page) -> None:
    """A quick action from the list is held 5 s (the Undo) before it is sent: the test's clock
    (``page.clock.install()`` before the page loaded) runs past it."""
    await expect(page.locator("[data-undo-bar]")).to_be_visible()
    await page.clock.fast_forward(5_100)
    await expect(page.locator("[data-undo-bar]")).to_be_hidden()
