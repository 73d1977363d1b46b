"""Named dependencies. Routes take ``StoreDep``, ``ServiceDep``, ``SettingsDep`` and
``CurrentUser``; tests swap the underlying resources through ``create_app(store=, service=)``
or ``app.dependency_overrides``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from signoff.api.errors import Unauthorized, Unavailable
from signoff.engine.models import User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service import RunService
from signoff.service.access import RunnableFlows, valid_id, visible_job

__all__ = ["CurrentUser", "FlowsDep", "ServiceDep", "SettingsDep", "StoreDep", "valid_id",
           "visible_job"]

# Shown in OpenAPI; the key itself is checked by AuthMiddleware before the body is read, so
# that a request without a valid key gets 401 whatever its body.
api_key_header = APIKeyHeader(name="x-api-key", auto_error=False, description="API key from `signoff users create`")

# The dependencies are coroutine functions, though they await nothing: FastAPI runs a plain
# function dependency on its thread pool, a thread hop (and back) per dependency of every
# request (~0.4 ms of the API's CPU per decision, and its wait, issue 33). Code outside a route
# takes the plain functions beside them (service_of, flows_of).


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_store(request: Request) -> Store:
    return request.app.state.store


def service_of(request: Request) -> RunService:
    service = getattr(request.app.state, "service", None)
    if service is None:
        raise Unavailable("The workflow service is not available (Temporal is not connected)")
    return service


async def get_service(request: Request) -> RunService:
    return service_of(request)


async def get_current_user(request: Request, _key: Annotated[str | None, Depends(api_key_header)]) -> User:
    user = request.scope.get("state", {}).get("user")
    if user is None:
        raise Unauthorized()
    return user


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
ServiceDep = Annotated[RunService, Depends(get_service)]
CurrentUser = Annotated[User, Depends(get_current_user)]


def flows_of(request: Request) -> RunnableFlows:
    """The flows a caller may run (SIGNOFF_FLOWS_DIR's owner found once, at start-up)."""
    return RunnableFlows(request.app.state.store, getattr(request.app.state, "public_owner_id", None))


async def get_flows(request: Request) -> RunnableFlows:
    return flows_of(request)


FlowsDep = Annotated[RunnableFlows, Depends(get_flows)]
