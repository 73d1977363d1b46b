"""MCP over stdio (``signoff mcp``, DESIGN §15): the server of ``/mcp`` for the one user
SIGNOFF_API_KEY names, talking to the service directly (the database and Temporal the API
uses), not to the API over HTTP.

Why directly: the tools are the same code as ``/mcp``'s (:class:`SignoffMcp` over
:class:`RunService`), so both transports check and decide alike, and an elicitation needs no
second hop (a bridge to ``/mcp`` would have to carry the server's requests to the client
back across HTTP). What it costs: it runs where the deployment's SIGNOFF_DATABASE_URL (or
SIGNOFF_HOME) and Temporal are reachable, as the worker and ``signoff users`` do; a client on
another machine uses ``/mcp``. The key is read again at every call: revoked, the next call is
refused."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp.server.mcpserver import Context

from signoff.engine.models import User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service import RunService

from signoff.api.errors import Unauthorized
from signoff.api.mcp.server import SignoffMcp, refusal
from signoff.api.ratelimit import write_buckets


def key_caller(key: str, store: Store, service: RunService):
    """The user ``key`` names, asked at every call."""
    async def caller(_ctx: Context) -> tuple[User, RunService]:
        user = await store.user_for_api_key(key) if key and len(key) <= 200 else None
        if user is None:
            raise refusal(Unauthorized("SIGNOFF_API_KEY is not a valid API key; create one with "
                                       "`signoff users create NAME`"))
        return user, service

    return caller


@contextlib.asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[tuple[Store, RunService]]:
    """The store and the service, as the API opens them."""
    from signoff.api.flows_dir import public_owner_id
    from signoff.engine.store import open_store
    from signoff.service import connect_client
    from signoff.service.startup import when_reachable

    store = open_store(settings.resolved_database_url)
    try:
        await when_reachable("the database", store.setup, settings.startup_wait_seconds)
        client = await when_reachable("Temporal", lambda: connect_client(settings), settings.startup_wait_seconds)
        service = RunService(settings, store, client, public_owner=await public_owner_id(store))
        try:
            yield store, service
        finally:
            await service.feed.close()
    finally:
        await store.close()


async def serve(settings: Settings, key: str) -> None:
    async with opened(settings) as (store, service):
        budget = write_buckets(settings)  # SIGNOFF_WRITE_RATE, in this process as in each API process
        await SignoffMcp(key_caller(key, store, service), settings, lambda _ctx: budget).server.run_stdio_async()
