"""Flows: upload (JSON or YAML, a signoff spec or a Langflow export), list, read, export, delete, share."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse

from signoff.engine.errors import FlowNotFound, Forbidden
from signoff.engine.langflow import to_langflow
from signoff.engine.models import FlowRecord, User
from signoff.engine.sharing import shared_view
from signoff.engine.usage import check_stored_bytes, stored_size

from signoff.api.deps import CurrentUser, FlowsDep, ServiceDep, SettingsDep, StoreDep
from signoff.service.access import RunnableFlows, named_user
from signoff.api.flowspec import read_flow
from signoff.api.limits import check_body
from signoff.api.models import (FlowPublic, FlowSummary, SharePublic, ShareCreate, error_responses, flow_public,
                                flow_summary)

router = APIRouter(prefix="/api/v1/flows", tags=["flows"])

_FLOW_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FlowPublic, openapi_extra=_FLOW_BODY,
             responses=error_responses({422: "`INVALID_REQUEST` (not one JSON or YAML object), `FLOW_INVALID` (every "
                                             "problem listed), `FLOW_TOO_LARGE`",
                                             409: "`STORAGE_LIMIT`: you keep SIGNOFF_USER_MAX_STORED_BYTES (with this "
                                             "flow you would): delete flows or ended runs first"}, body=True))
async def create_flow(request: Request, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> FlowPublic:
    """Upload a flow spec as JSON or YAML, or a Langflow export (recognised by its shape: converted,
    or every component and setting signoff cannot run listed); a validation failure lists every problem."""
    spec = await read_flow(await request.body(), request.headers.get("content-type"), settings)
    await check_stored_bytes(store, user.id, settings.user_max_stored_bytes, adding=stored_size(spec))
    flow = await store.save_flow(user.id, spec["name"], spec)
    return flow_public(flow)


@router.get("", response_model=list[FlowSummary], responses=error_responses({}))
async def list_flows(flows: FlowsDep, user: CurrentUser) -> list[FlowSummary]:
    """The flows the caller may run."""
    return [flow_summary(f) for f in sorted(await flows.all(user), key=lambda f: (f.created_at, f.id))]


@router.get("/{flow_id}", response_model=FlowPublic, responses=error_responses({404: "`FLOW_NOT_FOUND`"}))
async def get_flow(flow_id: str, flows: FlowsDep, user: CurrentUser) -> FlowPublic:
    """One flow with its spec; anyone but its owner reads it with its credentials masked."""
    flow = await flows.get(user, flow_id)
    return flow_public(flow if flow.owner_id == user.id else flow.model_copy(update={"spec": shared_view(flow.spec)}))


@router.get("/{flow_id}/export", response_model=dict[str, Any],
            responses=error_responses({404: "`FLOW_NOT_FOUND`", 422: "`INVALID_REQUEST` (an unknown format)"}))
async def export_flow(flow_id: str, flows: FlowsDep, user: CurrentUser,
                      format: Annotated[Literal["langflow", "signoff"], Query()] = "langflow") -> JSONResponse:
    """The flow as a file to download: `langflow` (default) a Langflow export that Langflow loads and
    signoff imports back to the same spec; `signoff` the spec itself. Credentials are masked for
    anyone but the owner, as in `GET /api/v1/flows/{id}`."""
    flow = await flows.get(user, flow_id)
    spec = flow.spec if flow.owner_id == user.id else shared_view(flow.spec)
    doc = to_langflow(spec, flow_id=flow.id) if format == "langflow" else spec
    filename = re.sub(r"[^A-Za-z0-9._-]+", "-", flow.name).strip("-")[:80] or flow.id
    return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{filename}.json"'})


@router.delete("/{flow_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({403: "`FORBIDDEN`: only the owner may delete it", 404: "`FLOW_NOT_FOUND`"}))
async def delete_flow(flow_id: str, flows: FlowsDep, service: ServiceDep, user: CurrentUser) -> Response:
    """Delete a flow you own; its runs that wait or run (anyone's) are cancelled first."""
    await service.delete_flow(user, await flows.get(user, flow_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _owned(flows: RunnableFlows, user: User, flow_id: str) -> FlowRecord:
    flow = await flows.get(user, flow_id)
    if flow.owner_id != user.id:
        raise Forbidden("Only the owner may share this flow")
    return flow


@router.post("/{flow_id}/shares", status_code=status.HTTP_201_CREATED, response_model=SharePublic,
             responses=error_responses({403: "`FORBIDDEN`: only the owner may share it",
                                        404: "`FLOW_NOT_FOUND`, `USER_NOT_FOUND`", 422: None}, body=True))
async def grant_share(
    flow_id: str, body: ShareCreate, store: StoreDep, flows: FlowsDep, settings: SettingsDep, user: CurrentUser,
) -> SharePublic:
    """Grant another user `execute` on a flow you own."""
    check_body(body, settings)
    flow = await _owned(flows, user, flow_id)
    target = await named_user(store, body.user)
    await store.grant_share(flow.id, target.id, body.actions)
    return SharePublic(flow_id=flow.id, user_id=target.id, actions=list(body.actions))


@router.delete("/{flow_id}/shares/{user_ref}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({403: "`FORBIDDEN`: only the owner may revoke a share",
                                          404: "`FLOW_NOT_FOUND` (also: the user has no share), `USER_NOT_FOUND`"}))
async def revoke_share(
    flow_id: str, user_ref: str, request: Request, store: StoreDep, flows: FlowsDep, user: CurrentUser
) -> Response:
    """Revoke a user's share (by user name or id). Their suspended runs can no longer be resumed,
    and their open streams of the flow's runs end now."""
    flow = await _owned(flows, user, flow_id)
    target = await named_user(store, user_ref)
    if not await store.revoke_share(flow.id, target.id):
        raise FlowNotFound(f"{user_ref!r} has no share on flow {flow.id}")
    service = getattr(request.app.state, "service", None)
    if service is not None:  # their live streams ask at once whether they may still see what they show
        service.feed.recheck(target.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
