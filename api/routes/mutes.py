"""Mutes: a person stops a requester's requests from reaching them (docs/security.md, "Fan-out
and approvers"). Anyone may name anyone as an approver (DESIGN §9); a muted requester's requests
then reach neither the muter's inbox and pending list nor the muter's webhooks, and wait for their
other approvers or their deadline as before. The muter may still open such a run and decide it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel

from signoff.api.deps import CurrentUser, StoreDep
from signoff.api.errors import InvalidRequest
from signoff.api.models import error_responses
from signoff.service.access import named_user

router = APIRouter(prefix="/api/v1/users/me/mutes", tags=["mutes"])

Person = Annotated[str, Path(min_length=1, max_length=200, description="a user name or id")]


class MutePublic(BaseModel):
    id: str
    name: str


@router.get("", response_model=list[MutePublic], responses=error_responses({}))
async def list_mutes(store: StoreDep, user: CurrentUser) -> list[MutePublic]:
    """The requesters you muted, oldest mute first."""
    out = []
    for muted_id in await store.list_mutes(user.id):
        person = await store.get_user(muted_id)
        out.append(MutePublic(id=muted_id, name=person.name if person else muted_id))
    return out


@router.put("/{person}", response_model=MutePublic,
            responses=error_responses({404: "`USER_NOT_FOUND`", 422: "`INVALID_REQUEST`: yourself"}))
async def mute(person: Person, store: StoreDep, user: CurrentUser) -> MutePublic:
    """Mute a requester: their requests no longer reach your inbox, pending list or webhooks
    (idempotent)."""
    target = await named_user(store, person)
    if target.id == user.id:
        raise InvalidRequest("You cannot mute yourself")
    await store.mute(user.id, target.id)
    return MutePublic(id=target.id, name=target.name)


@router.delete("/{person}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({404: "`USER_NOT_FOUND`", 422: None}))
async def unmute(person: Person, store: StoreDep, user: CurrentUser) -> Response:
    """Unmute a requester: their requests that still wait show again (idempotent)."""
    target = await named_user(store, person)
    await store.unmute(user.id, target.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
