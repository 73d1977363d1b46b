"""``GET /metrics``: signoff's metrics in Prometheus' text format (engine/metrics.py). No API key:
keep the API's port private or set SIGNOFF_METRICS_TOKEN (then a scraper sends
``Authorization: Bearer <token>``). Nothing in it names a user or a run; the oversight metrics
carry flow ids (at most SIGNOFF_METRICS_MAX_FLOWS of them), never a flow's name or text."""

from __future__ import annotations

import asyncio
import hmac
import time

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from signoff.api.deps import SettingsDep, StoreDep
from signoff.api.errors import Unauthorized
from signoff.engine import metrics
from signoff.engine.models import utcnow

router = APIRouter(tags=["metrics"])

# the runs by status are a count over the jobs table: read at most this often per process
COUNTS_FOR_SECONDS = 5.0
_counted = {"at": -COUNTS_FOR_SECONDS}
_counting = asyncio.Lock()  # one count at a time: a burst of scrapes reads the jobs table once


@router.get("/metrics", include_in_schema=False)
async def prometheus(request: Request, store: StoreDep, settings: SettingsDep) -> Response:
    if settings.metrics_token:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {settings.metrics_token}".encode()):
            raise Unauthorized("/metrics needs Authorization: Bearer <SIGNOFF_METRICS_TOKEN>")
    if time.monotonic() - _counted["at"] >= COUNTS_FOR_SECONDS:
        async with _counting:
            if time.monotonic() - _counted["at"] >= COUNTS_FOR_SECONDS:  # not counted while we waited
                metrics.set_run_counts(await store.count_jobs())
                now = utcnow()
                metrics.set_pending_ages(await store.pending_ages(now, metrics.DECISION_BUCKETS), now,
                                         max_flows=settings.metrics_max_flows)
                _counted["at"] = time.monotonic()
    service = getattr(request.app.state, "service", None)
    if service is not None:
        metrics.LIVE_STREAMS.set(service.feed.followers)
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
