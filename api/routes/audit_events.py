"""A run's event log with its hash chain (docs/audit.md, "The event log's hash chain"): what a
client needs to check the log offline (``signoff audit verify-events --run JOB``), a page at a
time. Whoever may see the run may read it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from signoff.api.deps import CurrentUser, StoreDep, visible_job
from signoff.api.models import error_responses
from signoff.engine.models import UTCDateTime

router = APIRouter(prefix="/api/v1/runs", tags=["audit"])

EVENTS_PAGE_MAX = 1000


class ChainedEvent(BaseModel):
    seq: int
    event: str
    data: dict[str, Any]
    created_at: UTCDateTime
    sha256: str | None = Field(description="sha256 of the canonical JSON of {job_id, seq, event, data, at, "
                                           "prev_sha256}; null for an event written before the chain")
    prev_sha256: str | None = Field(description="the previous event's sha256 (null for the first)")


class EventsPage(BaseModel):
    job_id: str
    last_seq: int = Field(description="the seq of the run's last appended event when this page was read: a "
                                      "log that ends before it was cut")
    events: list[ChainedEvent]
    next_after: int | None = Field(description="pass as `after` for the next page; null: no more (yet)")


@router.get("/{job_id}/events", response_model=EventsPage,
            responses=error_responses({404: "`JOB_NOT_FOUND`", 422: "`INVALID_REQUEST`: a bad `after` or `limit`"}))
async def run_events(
    job_id: str, store: StoreDep, user: CurrentUser,
    after: Annotated[int, Query(ge=0, le=2**62, description="the events after this seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=EVENTS_PAGE_MAX, description="at most this many events")] = 500,
) -> EventsPage:
    """The run's events in seq order with their chain fields, a page at a time."""
    await visible_job(store, user, job_id)
    last_seq = await store.last_event_seq(job_id)  # first: the page never runs past it unseen
    events = await store.read_events(job_id, after_seq=after, limit=limit)
    page = [ChainedEvent(seq=e.seq, event=e.event, data=e.data, created_at=e.created_at, sha256=e.sha256,
                         prev_sha256=e.prev_sha256) for e in events]
    full = len(page) == limit
    return EventsPage(job_id=job_id, last_seq=last_seq, events=page, next_after=page[-1].seq if full else None)
