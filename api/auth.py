"""API-key authentication and the body size limit, as ASGI middleware.

The key is checked before the body is read, so a request without a valid key gets 401
UNAUTHORIZED whatever its body (DESIGN §6), even a huge one; so does a request to the protocols'
endpoints (``/mcp``, ``/a2a/...``: DESIGN §15). Then a body over
``settings.max_body_bytes`` gets 413 BODY_TOO_LARGE: at once when Content-Length says so,
or as soon as a streamed body passes the limit."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.api.errors import error_response
from signoff.engine.fairgate import acting_for
from signoff.engine.store.base import StoreUnavailable


def guarded(path: str) -> bool:
    """Whether a request to ``path`` needs an API key (and gets the body limit)."""
    return path.startswith("/api/") or path == "/mcp" or path.startswith("/mcp/") or path.startswith("/a2a/")


PUBLIC_PATHS = frozenset({"/health", "/health/live", "/health/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
# Requests another service signs instead of sending a key: their route checks the signature before
# anything else (Slack's X-Slack-Signature: api/routes/slack.py); the body limit still applies
SIGNED_PATHS = frozenset({"/api/v1/slack/interactions"})


class AuthMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not guarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["path"] in SIGNED_PATHS:
            await self._limited(scope, receive, send)
            return
        key = None
        for name, value in scope.get("headers", ()):
            if name == b"x-api-key":
                key = value.decode("latin-1").strip()
                break
        user = None
        if key and len(key) <= 200:
            store = scope["app"].state.store
            try:
                user = await store.user_for_api_key(key)
            except StoreUnavailable as err:  # the key cannot be checked now: 503, try again
                response = error_response(503, err.code, "The database is not available right now; try again")
                await response(scope, receive, send)
                return
        if user is None:
            msg = "Missing x-api-key header" if not key else "Invalid API key"
            response = error_response(401, "UNAUTHORIZED", f"{msg}; create a key with `signoff users create NAME`")
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["user"] = user
        with acting_for(user.id):  # the request's work takes this user's turns (engine/fairgate.py)
            await self._limited(scope, receive, send)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The rest of the app, its body within ``max_body_bytes`` (413 BODY_TOO_LARGE)."""
        limit = scope["app"].state.settings.max_body_bytes
        declared = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
        if declared is not None and declared > limit:
            response = error_response(413, "BODY_TOO_LARGE", f"The request body is larger than {limit} bytes")
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, f"The request body is larger than {limit} bytes")
            return message

        await self.app(scope, limited_receive, send)
