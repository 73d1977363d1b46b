"""Liveness: 200 once the API, the store and Temporal are reachable (no key needed)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from signoff.api.deps import StoreDep
from signoff.api.errors import Unavailable
from signoff.api.models import Health, error_responses

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health,
            responses=error_responses({503: "`UNAVAILABLE`: the database or Temporal is not reachable"}, api=False))
async def health(request: Request, store: StoreDep) -> Health:
    """200 when the store and Temporal answer; 503 UNAVAILABLE otherwise."""
    try:
        await asyncio.wait_for(store.ping(), 5)
    except Exception as e:
        raise Unavailable(f"The database is not reachable: {type(e).__name__}") from None
    client = getattr(request.app.state, "temporal_client", None)
    temporal = "not configured"
    if client is not None:
        try:
            await asyncio.wait_for(client.service_client.check_health(), 5)
        except Exception as e:
            raise Unavailable(f"Temporal is not reachable: {type(e).__name__}") from None
        temporal = "ok"
    return Health(store="ok", temporal=temporal)
