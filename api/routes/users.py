"""Who the caller is, and what they keep in signoff against their budget (docs/security.md,
"Budgets per user")."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from signoff.engine.contacts import MAX_EMAIL_CHARS, MAX_SLACK_CHARS, checked
from signoff.engine.errors import ContactTaken, UserNotFound
from signoff.engine.store.base import StoreConflict

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
    email: str | None = Field(None, description="where requests reach you by email (DESIGN §14)")
    slack: str | None = Field(None, description="your Slack user id: requests reach you in Slack")


class ContactsPatch(BaseModel):
    """The contacts to change; a field left out is kept, null or "" clears it."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(None, max_length=MAX_EMAIL_CHARS + 64,
                              description="one plain address, local@domain (no name, no line break)")
    slack: str | None = Field(None, max_length=MAX_SLACK_CHARS + 64, description="a Slack user id, e.g. U024BE7LH")


@router.get("/me", response_model=MePublic, responses=error_responses({}))
async def me(store: StoreDep, settings: SettingsDep, user: CurrentUser) -> MePublic:
    """You, and the bytes you keep in signoff against your budget (one indexed read)."""
    return MePublic(id=user.id, name=user.name, stored_bytes=await store.stored_bytes(user.id),
                    max_stored_bytes=settings.user_max_stored_bytes, email=user.email, slack=user.slack)


@router.patch("/me", response_model=MePublic, responses=error_responses({422: "`INVALID_CONTACT`: an address "
                                                                             "or Slack id signoff cannot use",
                                                                            409: "`CONTACT_TAKEN`: that Slack id is "
                                                                                 "another user's"},
                                                                       body=True))
async def set_my_contacts(body: ContactsPatch, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> MePublic:
    """Where requests reach you: your email address and Slack user id (DESIGN §14). Only the
    fields sent change."""
    try:
        changed = await store.set_contacts(user.id, checked(body.model_dump(exclude_unset=True)))
    except StoreConflict:
        raise ContactTaken(field="slack") from None
    if changed is None:  # deleted meanwhile
        raise UserNotFound(f"User {user.id} no longer exists")
    return MePublic(id=changed.id, name=changed.name, stored_bytes=await store.stored_bytes(user.id),
                    max_stored_bytes=settings.user_max_stored_bytes, email=changed.email, slack=changed.slack)
