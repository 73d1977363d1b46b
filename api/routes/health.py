"""Health, as a load balancer and an orchestrator ask it (no key needed):

- ``GET /health/live``: liveness, 200 while the process serves requests (restart it otherwise);
- ``GET /health/ready`` and ``GET /health``: readiness, 200 once the store and Temporal answer,
  else 503 ``UNAVAILABLE`` with ``checks`` saying which dependency is down (send no traffic; do
  not restart the process for it: it recovers by itself when the dependency is back)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from signoff.api.deps import StoreDep
from signoff.api.errors import Unavailable
from signoff.api.models import Health, Liveness, error_responses

router = APIRouter(tags=["health"])

_READY = dict(response_model=Health, responses=error_responses(
    {503: "`UNAVAILABLE`: the database or Temporal is not reachable (`checks` says which)"}, api=False))


async def _checks(request: Request, store: Any) -> dict[str, str]:
    checks = {"store": "ok", "temporal": "not configured"}
    try:
        await asyncio.wait_for(store.ping(), 2)
    except Exception as e:  # noqa: BLE001 - any failure is "down", named
        checks["store"] = f"down: {type(e).__name__}"
    client = getattr(request.app.state, "temporal_client", None)
    if client is not None:
        try:
            await asyncio.wait_for(client.service_client.check_health(), 2)
            checks["temporal"] = "ok"
        except Exception as e:  # noqa: BLE001
            checks["temporal"] = f"down: {type(e).__name__}"
    return checks


async def _ready(request: Request, store: Any) -> Health:
    checks = await _checks(request, store)
    down = [name for name, state in checks.items() if state.startswith("down")]
    if down:
        raise Unavailable(f"Not ready: {' and '.join(down)} not reachable", checks=checks)
    return Health(**checks)


@router.get("/health", **_READY)  # type: ignore[arg-type]
async def health(request: Request, store: StoreDep) -> Health:
    """Readiness (the same as `/health/ready`): 200 when the store and Temporal answer; 503
    UNAVAILABLE naming which is down otherwise."""
    return await _ready(request, store)


@router.get("/health/ready", **_READY)  # type: ignore[arg-type]
async def ready(request: Request, store: StoreDep) -> Health:
    """Readiness: 200 when the store and Temporal answer; 503 UNAVAILABLE with `checks` otherwise."""
    return await _ready(request, store)


@router.get("/health/live", response_model=Liveness, responses=error_responses({}, api=False))
async def live() -> Liveness:
    """Liveness: 200 while this process serves requests, whatever its dependencies do."""
    return Liveness()
