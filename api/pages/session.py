"""Signing in to the pages: a server-side session named by a sealed cookie, and CSRF tokens.

A session is a record in the store (a blob under ``pages/sessions/<user id>/``, keyed by a hash
of its id), so any API replica knows it, signing out ends it everywhere, and revoking a user's
keys (``signoff users revoke-key``) ends all their sessions (:func:`end_all`). The cookie holds only the
session id, sealed with the deployment's key (Fernet: encrypted and authenticated, so a forged or
altered cookie is no session); it is HttpOnly, SameSite=Strict, ``Secure`` over HTTPS and lasts
``SIGNOFF_PAGE_SESSION_HOURS``. The API key a person signs in with is checked once and never
kept: not in the cookie, not in the session, not in the browser's storage.

Every state-changing form carries the session's CSRF token (compared in constant time), and a
POST whose ``Origin`` or ``Sec-Fetch-Site`` says it comes from another site is refused first.
The sign-in form, before any session, carries a token bound to a short-lived sealed cookie
(double submit)."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from datetime import datetime, timedelta

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from signoff.engine.models import User, utcnow
from signoff.engine.secrets import SecretBox, SecretKeyError
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

COOKIE = "signoff_session"
SIGNIN_COOKIE = "signoff_signin"
PREFIX = "pages/sessions/"
SIGNIN_SECONDS = 3600


class PageSession(BaseModel):
    user_id: str
    csrf: str
    created_at: datetime
    expires_at: datetime


class CsrfRefused(Exception):
    """A state-changing request that is not from one of our own forms."""


class Sessions:
    """The sessions of one app (one store, one key)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._box: SecretBox | None = None

    @property
    def box(self) -> SecretBox:
        if self._box is None:
            self._box = SecretBox.for_settings(self.settings)
        return self._box

    @property
    def lifetime(self) -> timedelta:
        return timedelta(hours=self.settings.page_session_hours)

    @staticmethod
    def _key(named: str) -> str:
        """The store key of a session named ``<user id>/<session id>``."""
        user_id, _, sid = named.partition("/")
        return f"{PREFIX}{user_id}/{hashlib.sha256(sid.encode()).hexdigest()}"

    def _open(self, sealed: str | None) -> str | None:
        if not sealed or len(sealed) > 512:
            return None
        try:
            return self.box.open(sealed.encode("ascii"))
        except (SecretKeyError, UnicodeError, ValueError):
            return None

    def _session_named(self, request: Request) -> str | None:
        """The ``<user id>/<session id>`` the session cookie names, or None."""
        named = self._open(request.cookies.get(COOKIE))
        return named if named and "/" in named else None

    async def create(self, user: User) -> tuple[str, PageSession]:
        """A new session for ``user``: (the cookie's value, the session)."""
        named = f"{user.id}/{secrets.token_urlsafe(32)}"
        now = utcnow()
        session = PageSession(user_id=user.id, csrf=secrets.token_urlsafe(32), created_at=now,
                              expires_at=now + self.lifetime)
        await self.store.put_blob(self._key(named), session.model_dump_json().encode())
        return self.box.seal(named).decode("ascii"), session

    async def load(self, request: Request) -> tuple[PageSession, User] | None:
        """The request's session and its user, or None (no cookie, a forged one, expired, ended,
        or the user deleted)."""
        sid = self._session_named(request)
        if sid is None:
            return None
        raw = await self.store.get_blob(self._key(sid))
        if raw is None:
            return None
        try:
            session = PageSession.model_validate(json.loads(raw))
        except ValueError:
            return None
        if session.expires_at <= utcnow() or not sid.startswith(f"{session.user_id}/"):
            await self.store.delete_blobs(self._key(sid))
            return None
        user = await self.store.get_user(session.user_id)
        if user is None:
            return None
        return session, user

    async def end(self, request: Request) -> None:
        sid = self._session_named(request)
        if sid is not None:
            await self.store.delete_blobs(self._key(sid))

    # ---- cookies ------------------------------------------------------------------------------

    def secure(self, request: Request) -> bool:
        """Cookies are ``Secure`` over HTTPS: this request's (a trusted proxy's X-Forwarded-Proto
        counts), or the public origin's (SIGNOFF_PUBLIC_URL) when a TLS proxy says nothing."""
        return request.url.scheme == "https" or self.settings.public_https

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(COOKIE, value, max_age=int(self.lifetime.total_seconds()), path="/", httponly=True,
                            samesite="strict", secure=self.secure(request))

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=self.secure(request))

    # ---- the sign-in form's token (no session yet) ----------------------------------------------

    def signin_token(self, request: Request) -> tuple[str, str | None]:
        """The sign-in form's token and, when the browser has none yet, the cookie to set."""
        held = self._open(request.cookies.get(SIGNIN_COOKIE))
        if held:
            return held, None
        token = secrets.token_urlsafe(24)
        return token, self.box.seal(token).decode("ascii")

    def set_signin_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(SIGNIN_COOKIE, value, max_age=SIGNIN_SECONDS, path="/sign-in", httponly=True,
                            samesite="strict", secure=self.secure(request))

    def check_signin_token(self, request: Request, sent: str | None) -> None:
        held = self._open(request.cookies.get(SIGNIN_COOKIE))
        if not held or not sent or not hmac.compare_digest(held.encode(), sent.encode()):
            raise CsrfRefused("The sign-in form expired; reload the page and sign in again")


def check_same_origin(request: Request, public_url: str | None = None) -> None:
    """Refuse a state-changing request that a browser says comes from another site: its
    ``Origin`` must be this request's own (scheme as a trusted proxy says it) or the public
    origin (SIGNOFF_PUBLIC_URL, what people type behind a TLS proxy)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise CsrfRefused("This form was sent from another site")
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        expected = {f"{request.url.scheme}://{request.headers.get('host', '')}", public_url}
        if origin.lower() not in {e.lower() for e in expected if e}:
            raise CsrfRefused("This form was sent from another site")
    elif origin == "null":
        raise CsrfRefused("This form was sent from another site")


def check_csrf(session: PageSession, sent: str | None) -> None:
    if not sent or not hmac.compare_digest(session.csrf.encode(), str(sent).encode()):
        raise CsrfRefused("The form's security token is missing or out of date; reload the page and try again")


async def end_all(store: Store, user_id: str) -> int:
    """End every page session of ``user_id`` (their keys were revoked: a session signed in with
    one must not outlive it)."""
    return await store.delete_blobs(f"{PREFIX}{user_id}/")
