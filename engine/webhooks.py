"""Webhooks (DESIGN §9): a user's endpoints that receive the ``human_input_*`` events of the runs
they submitted and of the requests they may decide, as JSON signed with the webhook's secret:
``X-Signoff-Signature: sha256=<hex HMAC-SHA256 of the body>``.

A delivery is one POST of one event to one webhook, made by an activity that Temporal retries
with backoff; every attempt is logged (``Store.log_deliveries``: the attempts that end together
in one write). It dials through the run's egress policy like anything else a flow makes the
server call. A failing endpoint never blocks or fails
a run: the workflow does not wait for a delivery before it goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import quote

from signoff.engine.egress import EgressPolicy, egress_client
from signoff.engine.errors import SignoffError
from signoff.engine.models import Event, Job

EVENTS = ("human_input_required", "human_input_vote", "human_input_reminder", "human_input_escalated",
          "human_input_decision", "human_input_expired")
SIGNATURE = "X-Signoff-Signature"
TIMEOUT_SECONDS = 10.0
MAX_ANSWER_BYTES = 64 * 1024


class DeliveryFailed(SignoffError):
    """The endpoint did not take the event (it is tried again later)."""

    code = "WEBHOOK_DELIVERY_FAILED"
    retryable = True


def signature(secret: str, body: bytes) -> str:
    """The ``X-Signoff-Signature`` header's value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def card_url(base_url: str, job_id: str, request_id: Any) -> str:
    """The decision card of the request an event is about, on the person's pages (DESIGN §10:
    ``/runs/{job_id}/requests/{request_id}``); the run's page when the event names no request."""
    run = f"{base_url.rstrip('/')}/runs/{quote(job_id, safe='')}"
    return f"{run}/requests/{quote(request_id, safe=':')}" if isinstance(request_id, str) and request_id else run


def payload(event: Event, job: Job, card_url: str | None) -> bytes:
    """The JSON a webhook receives (compact, keys in a stable order, so receivers can verify the
    signature over the exact bytes)."""
    body: dict[str, Any] = {
        "event": event.event,
        "seq": event.seq,
        "at": event.created_at.isoformat(),
        "job_id": job.job_id,
        "flow_id": job.flow_id,
        "session_id": job.session_id,
        "data": event.data,
        "card_url": card_url,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str).encode()


async def post(url: str, body: bytes, secret: str, *, event: str, delivery_id: str,
               policy: EgressPolicy) -> int:
    """POST one delivery; the endpoint's status code. Raises DeliveryFailed for an answer outside
    2xx or an endpoint that cannot be reached (an egress refusal included: the policy may change)."""
    headers = {"Content-Type": "application/json", SIGNATURE: signature(secret, body), "X-Signoff-Event": event,
               "X-Signoff-Delivery": delivery_id, "User-Agent": "signoff-webhooks"}
    try:
        # TIMEOUT_SECONDS bounds each step of the exchange (httpx) and the whole of it: an endpoint
        # that answers a byte at a time cannot hold a delivery past it
        async with asyncio.timeout(TIMEOUT_SECONDS):
            async with egress_client(policy, timeout=TIMEOUT_SECONDS, max_response_bytes=MAX_ANSWER_BYTES) as client:
                resp = await client.post(url, content=body, headers=headers)
    except Exception as e:  # noqa: BLE001 - any failure to deliver is retried, then logged (a timeout too)
        raise DeliveryFailed(f"{url}: {e.__class__.__name__}: {e}") from None
    if not 200 <= resp.status_code < 300:
        raise DeliveryFailed(f"{url} answered {resp.status_code}", status_code=resp.status_code)
    return resp.status_code
