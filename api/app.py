"""The FastAPI app factory: ``create_app(settings, store=None, service=None)``.

The lifespan opens what was not handed in: the store (``open_store`` + ``setup()``), the
Temporal client and the application layer (:class:`~signoff.service.RunService`); it loads
SIGNOFF_FLOWS_DIR. Routes stay thin: they call the service.
"""

from __future__ import annotations

import contextlib
import logging
from typing import AsyncIterator

from fastapi import FastAPI

from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service import RunService, connect_client

from signoff.api.auth import AuthMiddleware
from signoff.api.errors import install_error_handlers
from signoff.api.flows_dir import public_owner_id, sync_flows_dir
from signoff.api.routes import flows, health, monitor, workflows

log = logging.getLogger("signoff.api")


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               service: RunService | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            the_store = store
            if the_store is None:
                from signoff.engine.store import open_store

                the_store = open_store(settings.resolved_database_url)
                stack.push_async_callback(the_store.close)
                await the_store.setup()
            app.state.store = the_store
            app.state.public_owner_id = await public_owner_id(the_store)
            await sync_flows_dir(the_store, settings, app.state.public_owner_id)

            the_service = service
            if the_service is None:
                client = await connect_client(settings)
                the_service = RunService(settings, the_store, client)
            the_service.public_owner = app.state.public_owner_id
            app.state.service = the_service
            app.state.temporal_client = the_service.client
            # now and periodically: inline runs of a dead API process end as failed (docs/inline.md),
            # runs left queued without their workflow get it
            await stack.enter_async_context(the_service.sweeping())
            yield

    app = FastAPI(
        title="signoff",
        version="0.1.0",
        summary="Durable human-in-the-loop runtime for agentic flows, on Temporal",
        lifespan=lifespan,
    )
    app.state.settings = settings
    if store is not None:  # usable before the lifespan runs (e.g. a test client without startup)
        app.state.store = store
    install_error_handlers(app)
    app.add_middleware(AuthMiddleware)
    app.include_router(health.router)
    app.include_router(flows.router)
    app.include_router(workflows.router)
    app.include_router(monitor.router)
    return app
