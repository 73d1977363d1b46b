"""Named dependencies. Routes take ``StoreDep``, ``ServiceDep``, ``SettingsDep`` and
``CurrentUser``; tests swap the underlying resources through ``create_app(store=, service=)``
or ``app.dependency_overrides``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from signoff.engine.errors import FlowNotFound, JobNotFound
from signoff.engine.models import FlowRecord, Job, User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

from signoff.api.errors import Unauthorized, Unavailable

if TYPE_CHECKING:
    from signoff.service import SignoffService

# Shown in OpenAPI; the key itself is checked by AuthMiddleware before the body is read, so
# that a request without a valid key gets 401 whatever its body.
api_key_header = APIKeyHeader(name="x-api-key", auto_error=False, description="API key from `signoff users create`")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$")


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_service(request: Request) -> "SignoffService":
    service = getattr(request.app.state, "service", None)
    if service is None:
        raise Unavailable("The workflow service is not available (Temporal is not connected)")
    return service


async def get_current_user(request: Request, _key: Annotated[str | None, Depends(api_key_header)]) -> User:
    user = request.scope.get("state", {}).get("user")
    if user is None:
        raise Unauthorized()
    return user


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
ServiceDep = Annotated[Any, Depends(get_service)]
CurrentUser = Annotated[User, Depends(get_current_user)]


def valid_id(value: str) -> bool:
    return bool(_ID_RE.match(value))


async def visible_job(store: Store, user: User, job_id: str) -> Job:
    """The job if the caller may see it; a job of someone else or a malformed id is a 404."""
    if not valid_id(job_id):
        raise JobNotFound(f"Job {job_id[:100]!r} not found", job_id=None)
    job = await store.get_job(job_id)
    if job is None or job.user_id != user.id:
        raise JobNotFound(f"Job {job_id} not found", job_id=job_id)
    return job


async def runnable_flow(store: Store, user: User, flow_id: str, public_owner: str | None = None) -> FlowRecord:
    """The flow if the caller may execute it (owner, share, or a flow from SIGNOFF_FLOWS_DIR,
    whose owner is ``public_owner``); anything else is a 404."""
    if not valid_id(flow_id):
        raise FlowNotFound(f"Flow {flow_id[:100]!r} not found")
    flow = await store.get_flow(flow_id)
    if flow is None or not await may_execute(store, user, flow, public_owner):
        raise FlowNotFound(f"Flow {flow_id} not found")
    return flow


async def may_execute(store: Store, user: User, flow: FlowRecord, public_owner: str | None = None) -> bool:
    if flow.owner_id == user.id or (public_owner is not None and flow.owner_id == public_owner):
        return True
    return await store.has_permission(flow.id, user.id, "execute")


def get_public_owner(request: Request) -> str | None:
    return getattr(request.app.state, "public_owner_id", None)


PublicOwner = Annotated[str | None, Depends(get_public_owner)]
