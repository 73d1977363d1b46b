"""Groups: the caller's named sets of users, for a Human Input's ``approvers: ["group:NAME"]``
(DESIGN §9). A group belongs to its owner: ``group:finance`` in a flow is its owner's group
"finance", so nobody can take over another user's approvers by naming a group."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.limits import check_body
from signoff.api.models import error_responses
from signoff.engine.errors import GroupNotFound
from signoff.engine.models import Group
from signoff.engine.store.base import Store, StoreConflict
from signoff.service.access import named_user

router = APIRouter(prefix="/api/v1/groups", tags=["groups"])

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
GroupName = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN)]


class GroupCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                               description="letters, digits, '_', '.', '-'; flows name it group:NAME")]
    members: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list, max_length=1000)


class Members(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=1000,
                                                                             description="user names or ids")


class MemberPublic(BaseModel):
    id: str
    name: str


class GroupPublic(BaseModel):
    name: str
    reference: str  # what a flow's approvers write
    members: list[MemberPublic]
    created_at: datetime


class GroupConflict(StoreConflict):
    """You already have a group of that name."""

    code = "GROUP_EXISTS"


async def _public(store: Store, group: Group) -> GroupPublic:
    members = []
    for user_id in group.members:
        user = await store.get_user(user_id)
        members.append(MemberPublic(id=user_id, name=user.name if user else user_id))
    return GroupPublic(name=group.name, reference=f"group:{group.name}", members=members, created_at=group.created_at)


async def _ids(store: Store, refs: list[str]) -> list[str]:
    return [(await named_user(store, ref)).id for ref in refs]


@router.post("", response_model=GroupPublic, status_code=status.HTTP_201_CREATED,
             responses=error_responses({404: "`USER_NOT_FOUND`: a member", 409: "`GROUP_EXISTS`", 422: None},
                                       body=True))
async def create_group(body: GroupCreate, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> GroupPublic:
    """Create a group of yours (optionally with its first members)."""
    check_body(body, settings)
    members = await _ids(store, body.members)
    if await store.get_group(user.id, body.name) is not None:
        raise GroupConflict(f"You already have a group named {body.name!r}")
    try:
        await store.create_group(user.id, body.name)
    except StoreConflict:
        raise GroupConflict(f"You already have a group named {body.name!r}") from None
    group = await store.add_group_members(user.id, body.name, members) if members else await store.get_group(
        user.id, body.name)
    assert group is not None
    return await _public(store, group)


@router.get("", response_model=list[GroupPublic], responses=error_responses({}))
async def list_groups(store: StoreDep, user: CurrentUser) -> list[GroupPublic]:
    """Your groups and their members."""
    return [await _public(store, g) for g in await store.list_groups(user.id)]


@router.get("/{name}", response_model=GroupPublic, responses=error_responses({404: "`GROUP_NOT_FOUND`", 422: None}))
async def get_group(name: GroupName, store: StoreDep, user: CurrentUser) -> GroupPublic:
    """One of your groups."""
    group = await store.get_group(user.id, name)
    if group is None:
        raise GroupNotFound(f"You have no group named {name!r}")
    return await _public(store, group)


@router.post("/{name}/members", response_model=GroupPublic,
             responses=error_responses({404: "`GROUP_NOT_FOUND`, `USER_NOT_FOUND`", 422: None}, body=True))
async def add_members(name: GroupName, body: Members, store: StoreDep, settings: SettingsDep,
                      user: CurrentUser) -> GroupPublic:
    """Add users to a group of yours (they see its requests in their inbox at once)."""
    check_body(body, settings)
    group = await store.add_group_members(user.id, name, await _ids(store, body.users))
    if group is None:
        raise GroupNotFound(f"You have no group named {name!r}")
    return await _public(store, group)


@router.delete("/{name}/members/{member}", response_model=GroupPublic,
               responses=error_responses({404: "`GROUP_NOT_FOUND`, `USER_NOT_FOUND`", 422: None}))
async def remove_member(name: GroupName, member: Annotated[str, Path(min_length=1, max_length=200)],
                        store: StoreDep, user: CurrentUser) -> GroupPublic:
    """Remove a user from a group of yours (they may no longer decide its requests)."""
    group = await store.remove_group_members(user.id, name, await _ids(store, [member]))
    if group is None:
        raise GroupNotFound(f"You have no group named {name!r}")
    return await _public(store, group)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({404: "`GROUP_NOT_FOUND`", 422: None}))
async def delete_group(name: GroupName, store: StoreDep, user: CurrentUser) -> Response:
    """Delete a group of yours (requests naming it are then decided by nobody through it)."""
    if not await store.delete_group(user.id, name):
        raise GroupNotFound(f"You have no group named {name!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
