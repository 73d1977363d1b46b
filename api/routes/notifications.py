"""A run's notification log (DESIGN §14): every attempt to tell a person about one of its
requests by email (or Slack), readable by the run's owner only (an approver sees the run, not
whom else it asked)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from signoff.engine.errors import Forbidden

from signoff.api.deps import CurrentUser, StoreDep, visible_job
from signoff.api.models import error_responses

router = APIRouter(prefix="/api/v2/workflows", tags=["workflows"])


class NotificationPublic(BaseModel):
    id: str
    seq: int  # the event it told of
    event: str
    channel: str
    user_id: str
    attempt: int
    delivered: bool
    error: str | None = None
    at: datetime


@router.get("/{job_id}/notifications", response_model=list[NotificationPublic],
            responses=error_responses({403: "`FORBIDDEN`: an approver or voter of the run, not its owner",
                                       404: "`JOB_NOT_FOUND`", 422: None}))
async def list_notifications(job_id: str, store: StoreDep, user: CurrentUser,
                             limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[NotificationPublic]:
    """The run's notification attempts, newest first: to whom, on which channel, delivered or the
    error (a failed attempt is retried with backoff; the run never waits on it)."""
    job = await visible_job(store, user, job_id)
    if job.user_id != user.id:
        raise Forbidden("Only the run's owner reads whom it notified", job_id=job_id)
    return [NotificationPublic(**n.model_dump(include=set(NotificationPublic.model_fields)))
            for n in await store.list_notifications(job_id, limit=limit)]
