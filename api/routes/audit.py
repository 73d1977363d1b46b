"""The oversight record (DESIGN §16, docs/audit.md): a run's receipts, the public keys that
verify them, and the operator's export of every run's receipts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from signoff.engine.audit.keys import ReceiptKeys
from signoff.service.audit import check_flow_id, check_operator, cursor_of, parse_cursor, run_receipts, sent, window

from signoff.api.deps import CurrentUser, SettingsDep, StoreDep
from signoff.api.models import error_responses

router = APIRouter(tags=["audit"])

PAGE_MAX = 1000


class PublicKey(BaseModel):
    key_id: str
    public_key: str = Field(description="the raw 32-byte Ed25519 public key, base64")
    algorithm: str = "Ed25519"
    created_at: str


class PublicKeys(BaseModel):
    key_id: str = Field(description="the key that signs new receipts")
    public_key: str
    algorithm: str = "Ed25519"
    keys: list[PublicKey] = Field(description="every key, oldest first: receipts signed before a rotation verify")


class RunReceipts(BaseModel):
    job_id: str
    receipts: list[dict[str, Any]] = Field(description="in chain order; each as signed, with its `seq`")
    next_after: int | None = Field(None, description="more: pass it as `after`")


class ReceiptsPage(BaseModel):
    receipts: list[dict[str, Any]] = Field(description="by (at, job_id, seq); each as signed, with its `seq`")
    next: str | None = Field(None, description="more: pass it as `cursor`")


def receipt_keys(request: Request) -> ReceiptKeys:
    """The process's signing keys of its store (made once)."""
    state = request.app.state
    keys = getattr(state, "receipt_keys", None)
    if keys is None or keys.store is not state.store:
        keys = state.receipt_keys = ReceiptKeys(state.store, state.settings)
    return keys


@router.get("/api/v1/audit/public-key", response_model=PublicKeys, responses=error_responses({}))
async def public_key(request: Request, user: CurrentUser) -> PublicKeys:
    """The public keys that verify receipts (`signoff audit verify --keys` takes this answer)."""
    keys = await receipt_keys(request).public_keys()
    now = keys[-1]
    return PublicKeys(key_id=now["key_id"], public_key=now["public_key"], keys=[PublicKey(**k) for k in keys])


@router.get("/api/v1/runs/{job_id}/receipts", response_model=RunReceipts,
            responses=error_responses({404: "`JOB_NOT_FOUND`: no run you may see", 422: None}))
async def receipts_of_run(job_id: str, store: StoreDep, user: CurrentUser,
                          after: Annotated[int, Query(ge=0, le=2**31, description="after this seq")] = 0,
                          limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 500) -> RunReceipts:
    """A run's receipts, whoever may see the run (its owner, its approvers, who took part)."""
    found = await run_receipts(store, user, job_id, after=after, limit=limit)
    return RunReceipts(job_id=job_id, receipts=found,
                       next_after=found[-1]["seq"] if len(found) == limit else None)


@router.get("/api/v1/audit/receipts", response_model=ReceiptsPage,
            responses=error_responses({403: "`FORBIDDEN`: not an operator (SIGNOFF_OPERATORS)",
                                       422: "`INVALID_REQUEST`: a bad date or cursor"}))
async def export_receipts(
    store: StoreDep, settings: SettingsDep, user: CurrentUser,
    since: Annotated[datetime, Query(description="from this time (ISO 8601; a date is its midnight UTC)")],
    until: Annotated[datetime | None, Query(description="before this time")] = None,
    flow: Annotated[str | None, Query(max_length=200, description="only this flow's runs")] = None,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 500,
) -> ReceiptsPage:
    """Every run's receipts in a time window, a page at a time: the operator's alone."""
    check_operator(settings, user)
    check_flow_id(flow)
    after = parse_cursor(cursor) if cursor else None
    since, until = window(since, until)
    found = await store.list_receipts(since=since, until=until, flow_id=flow, after=after, limit=limit)
    return ReceiptsPage(receipts=[sent(r) for r in found],
                        next=cursor_of(found[-1]) if len(found) == limit else None)
