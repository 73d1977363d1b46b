"""The worker's side of tracing: every activity's spans are written to the store before it
returns (the SDK itself is :mod:`signoff.engine.tracing.sdk`; Temporal's own client spans come
from :func:`signoff.service.temporal.client_interceptors`)."""

from __future__ import annotations

from typing import Any

import temporalio.worker

from signoff.engine import metrics
from signoff.engine.fairgate import acting_for
from signoff.engine.store.base import Store
from signoff.engine.tracing.sdk import collect_spans
from signoff.activities.headers import USER_HEADER, header_text


class SpanFlushInterceptor(temporalio.worker.Interceptor):
    """Worker interceptor: every activity's spans are in the store (and pushed to OTLP) before
    the activity returns. A failed span write fails the activity (Temporal retries it; the span
    ids are deterministic, so nothing is duplicated)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _FlushActivityInbound(next, self.store)


class _FlushActivityInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, next: temporalio.worker.ActivityInboundInterceptor, store: Store) -> None:
        super().__init__(next)
        self.store = store

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        try:
            # the run's work takes its own turns in the process (the SQLite writer's:
            # engine/fairgate.py), not the turn of everyone's work done for nobody
            with acting_for(_fairness_key(input)):
                async with collect_spans(self.store):
                    return await self.next.execute_activity(input)
        except Exception as err:  # counted (signoff_activity_failures_total), then Temporal's to retry
            metrics.failed_activity(_name(input), err)
            raise


def _fairness_key(input: temporalio.worker.ExecuteActivityInput) -> str | None:
    """Whose work the activity does: the run's user, as its workflow named it in the activity's
    headers (workflows/whose.py), else the run's Temporal fairness key when the server handed it
    on, else its run (the workflow id is the job id). Every activity of the budget soak came
    without a key (local activities never have one): keyed as nobody's they all shared one turn,
    keyed by run each run of a user was a newcomer in the gates' turns (engine/fairgate.py)."""
    from temporalio import activity

    if not activity.in_activity():
        return None
    info = activity.info()
    key = user_of(input.headers) or (info.priority.fairness_key if info.priority is not None else None)
    return key or (f"run:{info.workflow_id}" if info.workflow_id else None)


def user_of(headers: Any) -> str | None:
    """The run's user as its workflow named it in an activity's headers (:data:`USER_HEADER`,
    workflows/whose.py); None: none, or not a string."""
    return header_text(headers, USER_HEADER) or None


def _name(input: temporalio.worker.ExecuteActivityInput) -> str:
    from temporalio import activity

    return activity.info().activity_type if activity.in_activity() else getattr(input.fn, "__name__", "activity")


__all__ = ["SpanFlushInterceptor"]
