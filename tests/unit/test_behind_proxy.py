"""The pages behind a TLS proxy that is not on loopback (issue 28): the browser's ``Origin`` is
``https://signoff.example.com`` while the app is spoken to in plain HTTP. The forms are
accepted from the public origin (SIGNOFF_PUBLIC_URL) or from the scheme a trusted proxy reports
(SIGNOFF_TRUSTED_PROXIES), and the cookies are ``Secure``; nobody else's ``Origin`` or forwarded
scheme is believed."""

from __future__ import annotations

import re

import httpx
import pytest

from signoff.api.app import create_app
from signoff.engine.settings import Settings
from signoff.engine.store.memory import MemoryStore

PUBLIC = "https://signoff.example.com"


async def app_and_key(tmp_path, **settings):
    store = MemoryStore()
    await store.setup()
    user = await store.create_user("alice")
    key = await store.create_api_key(user.id)
    return create_app(Settings(home=tmp_path, **settings), store=store), key


async def sign_in(app, key: str, *, client=("127.0.0.1", 5000), **headers: str) -> httpx.Response:
    """The sign-in form, then its POST, as a browser behind the proxy sends them (the cookies by
    hand: a Secure cookie is not sent back over the plain HTTP the proxy speaks)."""
    transport = httpx.ASGITransport(app=app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.example.com") as c:
        page = await c.get("/sign-in", headers=headers)
        assert page.status_code == 200
        token = re.search(r'name="token" value="([^"]+)"', page.text).group(1)
        cookie = page.headers["set-cookie"]
        pair = cookie.split(";", 1)[0]
        c.cookies.clear()
        r = await c.post("/sign-in", data={"token": token, "next": "/flows", "api_key": key},
                         headers={"cookie": pair, "sec-fetch-site": "same-origin", **headers})
        r.signin_cookie = cookie  # type: ignore[attr-defined]
        return r


def secure(set_cookie: str) -> bool:
    return "secure" in [p.strip().lower() for p in set_cookie.split(";")]


def session_cookie(r: httpx.Response) -> str:
    return next(c for c in r.headers.get_list("set-cookie") if c.startswith("signoff_session="))


async def test_the_public_origin_is_accepted_and_the_cookies_are_secure(tmp_path):
    app, key = await app_and_key(tmp_path, public_url=PUBLIC + "/")
    r = await sign_in(app, key, origin=PUBLIC)
    assert r.status_code == 303, r.text
    assert secure(r.signin_cookie) and secure(session_cookie(r))  # type: ignore[attr-defined]
    assert (await sign_in(app, key, origin="https://evil.example")).status_code == 403
    assert (await sign_in(app, key, origin="http://signoff.example.com:8443")).status_code == 403


async def test_a_trusted_proxy_off_loopback_tells_the_scheme(tmp_path):
    app, key = await app_and_key(tmp_path, trusted_proxies="10.0.0.7, 192.168.0.0/16")
    for proxy in ("10.0.0.7", "192.168.4.2"):
        r = await sign_in(app, key, client=(proxy, 4000), origin=PUBLIC, **{"x-forwarded-proto": "https",
                                                                              "x-forwarded-for": "203.0.113.9"})
        assert r.status_code == 303, r.text
        assert secure(session_cookie(r))
    # anyone else saying so is not believed: their form is from another origin than the one served
    r = await sign_in(app, key, client=("10.0.0.8", 4000), origin=PUBLIC, **{"x-forwarded-proto": "https"})
    assert r.status_code == 403


@pytest.mark.parametrize("bad", ["ftp://signoff.example.com", "https://signoff.example.com/app",
                                 "https://u:p@signoff.example.com", "https://signoff.example.com/?a=1", "signoff"])
def test_the_public_url_is_an_origin(bad):
    with pytest.raises(ValueError):
        Settings(public_url=bad)
    assert Settings(public_url="HTTPS://Signoff.Example.com:443/").public_url == PUBLIC
