"""Who the caller is, and what they keep in signoff against their budget (docs/security.md,
"Budgets per user")."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from signoff.engine.contacts import MAX_EMAIL_CHARS, MAX_SLACK_CHARS, checked
from signoff.engine.models import User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.models import error_responses

router = APIRouter(prefix="/api/v1/users", tags=["users"])


class Confirmation(BaseModel):
    """A pending contact's newest confirmation (docs/channels.md, "Verified contacts")."""

    sent_at: datetime
    expires_at: datetime
    used: bool
    attempts: int = Field(description="sends tried so far (at most 5, 1 to 8 s apart)")
    delivered: bool = Field(description="the SMTP server or Slack took it")
    error: str | None = Field(None, description="the last attempt's error")


class MePublic(BaseModel):
    id: str
    name: str
    stored_bytes: int = Field(description="the bytes you keep in signoff's database (flows' versions, your runs' "
                                          "requests, results, events, messages, checkpoints, spans and blobs)")
    max_stored_bytes: int = Field(description="SIGNOFF_USER_MAX_STORED_BYTES: at or past it saving a flow or "
                                              "submitting a run is 409 STORAGE_LIMIT (0: no limit)")
    email: str | None = Field(None, description="where requests reach you by email (DESIGN §14)")
    slack: str | None = Field(None, description="your Slack user id: requests reach you in Slack")
    email_state: Literal["verified", "pending"] | None = Field(
        None, description="pending: nothing is sent to the address until you follow its confirmation mail's link")
    slack_state: Literal["verified", "pending"] | None = Field(
        None, description="pending: nothing is sent to the Slack id, and its presses are not yours, until you press "
                          "\"This is me\" in the Slack message signoff sent it")
    email_confirmation: Confirmation | None = Field(
        None, description="while the address is pending: its newest confirmation and how its sending went")
    slack_confirmation: Confirmation | None = Field(
        None, description="while the Slack id is pending: its newest confirmation and how its sending went")
    verification: dict[str, str] | None = Field(
        None, description="after a change: per contact made pending, what became of its confirmation: sent, limited "
                          "(SIGNOFF_VERIFY_MAX_PER_HOUR reached: ask again later), unconfigured (the channel is not)")


class ContactsPatch(BaseModel):
    """The contacts to change; a field left out is kept, null or "" clears it."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(None, max_length=MAX_EMAIL_CHARS + 64,
                              description="one plain address, local@domain (no name, no line break)")
    slack: str | None = Field(None, max_length=MAX_SLACK_CHARS + 64, description="a Slack user id, e.g. U024BE7LH")


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    contact: Literal["email", "slack"] = Field(description="the pending contact to send a new confirmation to")


class VerifySent(BaseModel):
    contact: str
    verification: Literal["sent", "unconfigured"]


async def _confirmation(store: Store, user: User, channel: str) -> Confirmation | None:
    if user.contact_state(channel) != "pending":
        return None
    row = await store.last_contact_token(user.id, channel)
    if row is None or row.address != getattr(user, channel):
        return None
    return Confirmation(sent_at=row.created_at, expires_at=row.expires_at, used=row.used_at is not None,
                        attempts=row.attempts, delivered=row.delivered, error=row.error)


async def _me(store: Store, user: User, settings: Settings, verification: dict[str, str] | None = None) -> MePublic:
    return MePublic(id=user.id, name=user.name, stored_bytes=await store.stored_bytes(user.id),
                    max_stored_bytes=settings.user_max_stored_bytes, email=user.email, slack=user.slack,
                    email_state=user.contact_state("email"), slack_state=user.contact_state("slack"),  # type: ignore[arg-type]
                    email_confirmation=await _confirmation(store, user, "email"),
                    slack_confirmation=await _confirmation(store, user, "slack"), verification=verification)


@router.get("/me", response_model=MePublic, responses=error_responses({}))
async def me(store: StoreDep, settings: SettingsDep, user: CurrentUser) -> MePublic:
    """You, your contacts and their state, and the bytes you keep in signoff against your budget."""
    return await _me(store, user, settings)


@router.patch("/me", response_model=MePublic, responses=error_responses({422: "`INVALID_CONTACT`: an address "
                                                                             "or Slack id signoff cannot use",
                                                                            409: "`CONTACT_TAKEN`: that Slack id is "
                                                                                 "another user's"},
                                                                       body=True))
async def set_my_contacts(body: ContactsPatch, request: Request, store: StoreDep, settings: SettingsDep,
                          user: CurrentUser) -> MePublic:
    """Where requests reach you: your email address and Slack user id (DESIGN §14). Only the
    fields sent change. A new contact is pending until you confirm it (a mail with a link, a
    Slack message with a button): nothing is sent to it before."""
    changed, sent = await request.app.state.contacts.set_own(user, checked(body.model_dump(exclude_unset=True)))
    return await _me(store, changed, settings, sent or None)


@router.post("/me/verify", response_model=VerifySent, status_code=202,
             responses=error_responses({422: "`INVALID_CONTACT`: that contact is not pending",
                                        429: "`RATE_LIMITED`: SIGNOFF_VERIFY_MAX_PER_HOUR confirmations were sent "
                                             "this hour (to you, or to that address)"}, body=True))
async def send_verification(body: VerifyRequest, request: Request, user: CurrentUser) -> VerifySent:
    """Send a new confirmation of your pending contact (the earlier one's link still works until
    it expires)."""
    outcome = await request.app.state.contacts.resend(user, body.contact)
    return VerifySent(contact=body.contact, verification=outcome)
