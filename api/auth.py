"""API-key authentication as ASGI middleware: it runs before the body is read, so a request
without a valid key gets 401 UNAUTHORIZED whatever its body (DESIGN §6)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response

PUBLIC_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


class AuthMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        key = None
        for name, value in scope.get("headers", ()):
            if name == b"x-api-key":
                key = value.decode("latin-1").strip()
                break
        user = None
        if key and len(key) <= 200:
            store = scope["app"].state.store
            user = await store.user_for_api_key(key)
        if user is None:
            msg = "Missing x-api-key header" if not key else "Invalid API key"
            response = error_response(401, "UNAUTHORIZED", f"{msg}; create a key with `signoff users create NAME`")
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["user"] = user
        await self.app(scope, receive, send)
