"""MCP over Streamable HTTP at ``/mcp`` (DESIGN §15): the caller is the user the request's
``x-api-key`` names, checked by :class:`~signoff.api.auth.AuthMiddleware` as for ``/api/``
(before the body is read; the body bounded by SIGNOFF_MAX_BODY_BYTES), read again at every
request (a session is only the SDK's bookkeeping: whoever sends a request acts as themselves)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from signoff.engine.models import User
from signoff.engine.settings import Settings
from signoff.service import RunService

from signoff.api.errors import Unauthorized
from signoff.api.ratelimit import WriteBudget
from signoff.api.mcp.server import SignoffMcp, refusal

PATH = "/mcp"
MAX_SESSIONS = 1000  # the SDK's sessions in one process (its bookkeeping of legacy clients)


async def request_caller(ctx: Context) -> tuple[User, RunService]:
    """The user the HTTP request's API key names (the middleware put them in its scope) and the
    app's service."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None) or {}
    user = scope.get("state", {}).get("user")
    service = getattr(scope.get("app"), "state", None) and getattr(scope["app"].state, "service", None)
    if user is None or service is None:
        raise refusal(Unauthorized("Missing or invalid x-api-key"))
    return user, service


def request_budget(ctx: Context) -> WriteBudget:
    """The app's write buckets (SIGNOFF_WRITE_RATE, shared with the API's write routes)."""
    return ctx.request_context.request.scope["app"].state.write_buckets


class McpEndpoint:
    """The ASGI endpoint of ``/mcp`` and the SDK's session manager it needs running
    (:meth:`running`, in the app's lifespan)."""

    def __init__(self, settings: Settings) -> None:
        self.mcp = SignoffMcp(request_caller, settings, request_budget)
        # no DNS-rebinding host check: every request carries an API key, and signoff is reached
        # under whatever host its operator gives it
        self.manager = StreamableHTTPSessionManager(
            app=self.mcp.server._lowlevel_server,  # noqa: SLF001 - what MCPServer.streamable_http_app does
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.max_body_bytes, max_sessions=MAX_SESSIONS)
        self.asgi = StreamableHTTPASGIApp(self.manager)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager running in a task of its own: its anyio task group is entered and
        left in that one task, whichever tasks enter and leave the app's lifespan."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.get_running_loop().create_task(run(), name="signoff-mcp-sessions")
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # it failed to start: say why
        try:
            yield
        finally:
            stop.set()
            await task


def mount(app: Starlette, settings: Settings) -> McpEndpoint:
    endpoint = McpEndpoint(settings)
    app.router.add_route(PATH, endpoint.asgi, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    return endpoint
