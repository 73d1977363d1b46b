"""Flows: upload (JSON or YAML), list, read, delete, share."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from signoff.engine.errors import FlowNotFound, Forbidden

from signoff.api.deps import CurrentUser, PublicOwner, SettingsDep, StoreDep, runnable_flow, valid_id
from signoff.api.errors import SignoffError
from signoff.api.flowspec import parse_body, validate_spec
from signoff.api.limits import ID_MAX_CHARS, NUL, check_strings
from signoff.api.models import FlowPublic, FlowSummary, SharePublic, ShareCreate, flow_public, flow_summary

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


class UserNotFound(SignoffError):
    """User not found."""

    code = "USER_NOT_FOUND"


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FlowPublic, openapi_extra=_FLOW_BODY)
async def create_flow(request: Request, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> FlowPublic:
    """Upload a flow spec as JSON or YAML; a validation failure lists every problem."""
    spec = validate_spec(parse_body(await request.body(), request.headers.get("content-type")), settings)
    flow = await store.save_flow(user.id, spec["name"], spec)
    return flow_public(flow)


@router.get("", response_model=list[FlowSummary])
async def list_flows(store: StoreDep, user: CurrentUser, public_owner: PublicOwner) -> list[FlowSummary]:
    """The flows the caller may run."""
    flows = {f.id: f for f in await store.list_flows(user.id)}
    if public_owner and public_owner != user.id:
        for f in await store.list_flows(public_owner):
            if f.owner_id == public_owner:
                flows.setdefault(f.id, f)
    return [flow_summary(f) for f in sorted(flows.values(), key=lambda f: (f.created_at, f.id))]


@router.get("/{flow_id}", response_model=FlowPublic)
async def get_flow(flow_id: str, store: StoreDep, user: CurrentUser, public_owner: PublicOwner) -> FlowPublic:
    """One flow with its spec."""
    return flow_public(await runnable_flow(store, user, flow_id, public_owner))


@router.delete("/{flow_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
async def delete_flow(flow_id: str, store: StoreDep, user: CurrentUser, public_owner: PublicOwner) -> Response:
    """Delete a flow you own."""
    flow = await runnable_flow(store, user, flow_id, public_owner)
    if flow.owner_id != user.id:
        raise Forbidden("Only the owner may delete this flow")
    await store.delete_flow(flow.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _owned(store, user, flow_id: str, public_owner):
    flow = await runnable_flow(store, user, flow_id, public_owner)
    if flow.owner_id != user.id:
        raise Forbidden("Only the owner may share this flow")
    return flow


async def _target_user(store, ref: str):
    if NUL in ref or len(ref) > ID_MAX_CHARS:  # no user has such a name (PostgreSQL text cannot hold NUL)
        raise UserNotFound(f"No user named {ref[:100]!r}")
    target = await store.get_user_by_name(ref)
    if target is None and valid_id(ref):
        target = await store.get_user(ref)
    if target is None:
        raise UserNotFound(f"No user named {ref!r}")
    return target


@router.post("/{flow_id}/shares", status_code=status.HTTP_201_CREATED, response_model=SharePublic)
async def grant_share(
    flow_id: str, body: ShareCreate, store: StoreDep, settings: SettingsDep, user: CurrentUser,
    public_owner: PublicOwner,
) -> SharePublic:
    """Grant another user `execute` on a flow you own."""
    check_strings(body.model_dump(mode="json"), settings.max_string_chars)
    flow = await _owned(store, user, flow_id, public_owner)
    target = await _target_user(store, body.user)
    await store.grant_share(flow.id, target.id, body.actions)
    return SharePublic(flow_id=flow.id, user_id=target.id, actions=list(body.actions))


@router.delete("/{flow_id}/shares/{user_ref}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
async def revoke_share(
    flow_id: str, user_ref: str, store: StoreDep, user: CurrentUser, public_owner: PublicOwner
) -> Response:
    """Revoke a user's share (by user name or id). Their suspended runs can no longer be resumed."""
    flow = await _owned(store, user, flow_id, public_owner)
    target = await _target_user(store, user_ref)
    if not await store.revoke_share(flow.id, target.id):
        raise FlowNotFound(f"{user_ref!r} has no share on flow {flow.id}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
