"""Secrets: named credentials of the caller, encrypted at rest, referenced from a flow's params as
``{"$secret": "NAME"}``. A value goes in and never comes out: the API lists names and dates."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.limits import NUL, NoNul, check_body
from signoff.api.models import error_responses
from signoff.engine.secrets import NAME_MAX_CHARS, VALUE_MAX_BYTES, SecretNotFound, Vault

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"


class SecretPut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: Annotated[str, Field(min_length=1, max_length=VALUE_MAX_BYTES, description="kept encrypted; never returned"),
                     NoNul]


class SecretPublic(BaseModel):
    name: str
    created_at: datetime
    updated_at: datetime


@router.put("/{name}", response_model=SecretPublic,
            responses=error_responses({422: "`INVALID_REQUEST`: a name of letters, digits, '_', '.', '-'; a value "
                                            "of 1 to 65536 characters without NUL"}, body=True))
async def put_secret(name: Annotated[str, Path(min_length=1, max_length=NAME_MAX_CHARS, pattern=NAME_PATTERN,
                                               description="letters, digits, '_', '.', '-'")],
                     body: SecretPut, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> SecretPublic:
    """Create or replace a secret of yours; the value is encrypted and never returned."""
    check_body(body, settings, text=("value",))
    info = await Vault(store, settings).put(user.id, name, body.value)
    return SecretPublic(name=info.name, created_at=info.created_at, updated_at=info.updated_at)


@router.get("", response_model=list[SecretPublic], responses=error_responses({}))
async def list_secrets(store: StoreDep, user: CurrentUser) -> list[SecretPublic]:
    """Your secrets: names and dates, never values."""
    return [SecretPublic(name=s.name, created_at=s.created_at, updated_at=s.updated_at)
            for s in await store.list_secrets(user.id)]


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({404: "`SECRET_NOT_FOUND`", 422: None}))
async def delete_secret(name: Annotated[str, Path(max_length=NAME_MAX_CHARS)], store: StoreDep,
                        user: CurrentUser) -> Response:
    """Delete a secret of yours (a flow that references it then fails when it needs it)."""
    if NUL in name or not await store.delete_secret(user.id, name):  # (no name holds NUL; PostgreSQL refuses it)
        raise SecretNotFound(f"You have no secret named {name[:100]!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
