"""The FastAPI app factory: ``create_app(settings, store=None, service=None)``.

The lifespan opens what was not handed in: the store (``open_store`` + ``setup()``), the
Temporal client and the application layer (:class:`~signoff.service.RunService`); it loads
SIGNOFF_FLOWS_DIR. Routes stay thin: they call the service.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service import RunService, connect_client
from signoff.service.startup import when_reachable

from signoff.api.auth import AuthMiddleware
from signoff.api.ratelimit import WRITE_METHODS, limit_writes, write_buckets
from signoff.api.errors import install_error_handlers
from signoff.api.flows_dir import public_owner_id, sync_flows_dir
from signoff.api import docs, pages
from signoff.api.mcp import http as mcp_http
from signoff.api.a2a import routes as a2a_routes
from signoff.api.routes import (agui, audit, audit_events, flows, groups, health, metrics, monitor, mutes, notifications,
                                 secrets, slack, standing, users, webhooks, workflows)

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

                from signoff.engine.metrics import MeteredStore

                opened = open_store(settings.resolved_database_url)
                stack.push_async_callback(opened.close)
                await when_reachable("the database", opened.setup, settings.startup_wait_seconds)
                the_store = MeteredStore(opened)  # type: ignore[assignment]  # signoff_store_seconds
            app.state.store = the_store
            app.state.public_owner_id = await public_owner_id(the_store)
            await sync_flows_dir(the_store, settings, app.state.public_owner_id)

            the_service = service
            if the_service is None:
                client = await when_reachable("Temporal", lambda: connect_client(settings),
                                              settings.startup_wait_seconds)
                the_service = RunService(settings, the_store, client)
            the_service.public_owner = app.state.public_owner_id
            app.state.service = the_service
            # a person's own contacts, their confirmations sent in the background (service/contacts.py)
            from signoff.service.contacts import ContactService

            app.state.contacts = ContactService(settings, the_store)
            stack.push_async_callback(app.state.contacts.drain)
            stack.push_async_callback(the_service.feed.close)  # the process's tail of the store's events
            app.state.temporal_client = the_service.client
            # now and periodically: inline runs of a dead API process end as failed (docs/inline.md),
            # runs left queued without their workflow get it
            await stack.enter_async_context(the_service.sweeping())
            await stack.enter_async_context(mcp_endpoint.running())  # the MCP SDK's sessions (/mcp)
            stack.push_async_callback(slack.drain, app)  # Slack presses decided in the background
            yield

    app = FastAPI(
        title="signoff",
        version="0.1.0",
        summary="Durable human-in-the-loop runtime for agentic flows, on Temporal",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # served by signoff itself, no CDN (api/docs.py)
        dependencies=[Depends(limit_writes)],  # SIGNOFF_WRITE_RATE on every write route (api/ratelimit.py)
    )
    app.state.settings = settings
    app.state.write_buckets = write_buckets(settings)
    app.state.slack_decisions = set()  # api/routes/slack.py: presses being decided
    if store is not None:  # usable before the lifespan runs (e.g. a test client without startup)
        app.state.store = store
    install_error_handlers(app)
    app.add_middleware(AuthMiddleware)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(flows.router)
    app.include_router(workflows.router)
    app.include_router(monitor.router)
    app.include_router(secrets.router)
    app.include_router(groups.router)
    app.include_router(webhooks.router)
    app.include_router(mutes.router)
    app.include_router(standing.router)
    app.include_router(notifications.router)
    app.include_router(slack.router)
    app.include_router(users.router)
    app.include_router(agui.router)
    app.include_router(audit_events.router)
    app.include_router(audit.router)
    mcp_endpoint = mcp_http.mount(app, settings)  # MCP at /mcp (api/mcp, DESIGN §15)
    a2a_routes.mount(app)  # A2A agents at /a2a/{flow_id} (api/a2a, DESIGN §15)
    pages.install(app)  # the person's pages at / (api/pages, docs/pages.md)
    docs.install(app)  # /docs and /redoc, their assets from this origin under a strict CSP
    # outermost: the scheme and client a trusted proxy (SIGNOFF_TRUSTED_PROXIES) reports are the
    # request's for everything inside (the pages' origin check and Secure cookies, the logs); the
    # commands turn uvicorn's own copy of it off, so one setting decides
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxy_list)
    _own_error_schema(app)
    return app


RATE_LIMITED_TEXT = ("`RATE_LIMITED`: more than SIGNOFF_WRITE_RATE writes a second (burst SIGNOFF_WRITE_BURST) "
                     "by this user; `Retry-After` says when to send again")


def _declare_rate_limit(schema: dict[str, Any]) -> None:
    """Every write operation of the API may answer 429 RATE_LIMITED (api/ratelimit.py)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    retry = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
    for path, item in schema.get("paths", {}).items():
        if not path.startswith("/api/"):
            continue
        for method, operation in item.items():
            if method.upper() not in WRITE_METHODS or not isinstance(operation, dict):
                continue
            responses = operation.setdefault("responses", {})
            if "429" in responses:
                responses["429"]["description"] += "; " + RATE_LIMITED_TEXT
                responses["429"].setdefault("headers", retry)
            else:
                responses["429"] = {"description": RATE_LIMITED_TEXT, "content": error, "headers": retry}


def _own_error_schema(app: FastAPI) -> None:
    """OpenAPI declares signoff's error body (``api.models.ErrorBody``), which every route lists
    for each status it answers (``error_responses``). FastAPI adds its own 422 shape
    (``HTTPValidationError``) to a route with parameters that declares no 422: a route whose
    parameters cannot fail validation (a path id: a malformed one is a 404), so that 422 goes,
    and with it FastAPI's schemas."""
    default = "#/components/schemas/HTTPValidationError"

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = FastAPI.openapi(app)
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
                content = responses.get("422", {}).get("content", {})
                if any(media.get("schema", {}).get("$ref") == default for media in content.values()):
                    del responses["422"]
        _declare_rate_limit(schema)
        schemas = schema.get("components", {}).get("schemas", {})
        if default not in json.dumps(schema.get("paths", {})):
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
