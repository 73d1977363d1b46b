"""Who the caller is, and what they keep in signoff against their budget (docs/security.md,
"Budgets per user")."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.models import error_responses

router = APIRouter(prefix="/api/v1/users", tags=["users"])


class MePublic(BaseModel):
    id: str
    name: str
    stored_bytes: int = Field(description="the bytes you keep in signoff's database (flows' versions, your runs' "
                                          "requests, results, events, messages, checkpoints, spans and blobs)")
    max_stored_bytes: int = Field(description="SIGNOFF_USER_MAX_STORED_BYTES: at or past it saving a flow or "
                                              "submitting a run is 409 STORAGE_LIMIT (0: no limit)")


@router.get("/me", response_model=MePublic, responses=error_responses({}))
async def me(store: StoreDep, settings: SettingsDep, user: CurrentUser) -> MePublic:
    """You, and the bytes you keep in signoff against your budget (one indexed read)."""
    return MePublic(id=user.id, name=user.name, stored_bytes=await store.stored_bytes(user.id),
                    max_stored_bytes=settings.user_max_stored_bytes)
