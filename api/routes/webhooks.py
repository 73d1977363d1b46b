"""Webhooks: endpoints of the caller that receive the ``human_input_*`` events of the runs they
submitted and of the requests they may decide, signed with the webhook's secret
(``X-Signoff-Signature: sha256=<hmac>``), retried with backoff, every attempt logged (DESIGN §9)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlsplit

import httpcore

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.errors import InvalidRequest
from signoff.api.limits import NUL, NoNul, check_body
from signoff.api.models import error_responses
from signoff.engine.context import egress_policy
from signoff.engine.egress import EgressError
from signoff.engine.errors import SignoffError
from signoff.engine.models import Webhook
from signoff.engine.secrets import Vault
from signoff.engine.webhooks import EVENTS

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])

EventName = Literal["*", "human_input_required", "human_input_vote", "human_input_reminder", "human_input_escalated",
                    "human_input_decision", "human_input_expired"]


class WebhookNotFound(SignoffError):
    """Webhook not found."""

    code = "WEBHOOK_NOT_FOUND"


class WebhookLimit(SignoffError):
    """You have as many webhooks as this deployment allows (SIGNOFF_MAX_WEBHOOKS_PER_USER)."""

    code = "WEBHOOK_LIMIT"


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(min_length=8, max_length=2000, pattern=r"^https?://", description="http(s) endpoint"),
                   NoNul]
    events: list[EventName] = Field(default_factory=lambda: ["*"], min_length=1, max_length=len(EVENTS) + 1)
    secret: Annotated[str, Field(min_length=16, max_length=1000,
                                 description="signs each delivery (HMAC-SHA256); never returned"), NoNul]


class WebhookPublic(BaseModel):
    id: str
    url: str
    events: list[str]
    created_at: datetime


class DeliveryPublic(BaseModel):
    id: str
    event: str
    job_id: str
    seq: int
    attempt: int
    status_code: int | None
    error: str | None
    delivered: bool
    at: datetime


def _public(hook: Webhook) -> WebhookPublic:
    return WebhookPublic(id=hook.id, url=hook.url, events=list(hook.events), created_at=hook.created_at)


@router.post("", response_model=WebhookPublic, status_code=status.HTTP_201_CREATED,
             responses=error_responses({409: "`WEBHOOK_LIMIT`: you have SIGNOFF_MAX_WEBHOOKS_PER_USER webhooks "
                                             "already (delete one first)",
                                        422: "`INVALID_REQUEST`: the URL, an event name, a secret shorter than 16, "
                                             "or an address SIGNOFF_EGRESS_ALLOW does not let through"}, body=True))
async def create_webhook(body: WebhookCreate, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> WebhookPublic:
    """Register an endpoint for the human_input_* events of your runs and of the requests you
    may decide; its secret signs each delivery and is never returned."""
    check_body(body, settings)
    try:  # the deliveries go through the egress policy: say now when they could not
        parts = urlsplit(body.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        await egress_policy(settings.egress_allow).checked_addresses(parts.hostname or "", port, timeout=5)
    except (EgressError, OSError, ValueError, httpcore.NetworkError) as e:  # NetworkError: no such host
        raise InvalidRequest(f"The webhook URL cannot be used: {e}") from None
    sealed = Vault(store, settings).box.seal(body.secret)
    events = sorted(set(body.events)) if "*" not in body.events else ["*"]
    hook = await store.create_webhook(user.id, body.url, events, sealed, limit=settings.max_webhooks_per_user)
    if hook is None:
        raise WebhookLimit(f"You have {settings.max_webhooks_per_user} webhooks, as many as this deployment allows "
                           "(SIGNOFF_MAX_WEBHOOKS_PER_USER): delete one first", limit=settings.max_webhooks_per_user)
    return _public(hook)


@router.get("", response_model=list[WebhookPublic], responses=error_responses({}))
async def list_webhooks(store: StoreDep, user: CurrentUser) -> list[WebhookPublic]:
    """Your webhooks (never their secrets)."""
    return [_public(h) for h in await store.list_webhooks(user.id)]


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryPublic],
            responses=error_responses({404: "`WEBHOOK_NOT_FOUND`", 422: None}))
async def list_deliveries(webhook_id: Annotated[str, Path(max_length=200)], store: StoreDep, user: CurrentUser,
                          limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[DeliveryPublic]:
    """The delivery log of a webhook of yours, newest first: every attempt, its answer or error."""
    hook = None if NUL in webhook_id else await store.get_webhook(webhook_id)  # (PostgreSQL refuses NUL)
    if hook is None or hook.owner_id != user.id:
        raise WebhookNotFound(f"You have no webhook {webhook_id[:100]!r}")
    return [DeliveryPublic(**d.model_dump(include=set(DeliveryPublic.model_fields)))
            for d in await store.list_deliveries(webhook_id, limit=limit)]


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({404: "`WEBHOOK_NOT_FOUND`", 422: None}))
async def delete_webhook(webhook_id: Annotated[str, Path(max_length=200)], store: StoreDep,
                         user: CurrentUser) -> Response:
    """Delete a webhook of yours (and its delivery log)."""
    if NUL in webhook_id or not await store.delete_webhook(user.id, webhook_id):
        raise WebhookNotFound(f"You have no webhook {webhook_id[:100]!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
