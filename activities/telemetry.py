"""Temporal's side of tracing: the worker interceptor that writes every activity's spans to the
store before it returns, and Temporal's own OpenTelemetry interceptor for clients. The SDK
itself is :mod:`signoff.engine.tracing.sdk`."""

from __future__ import annotations

from typing import Any

import temporalio.worker

from signoff.engine.store.base import Store
from signoff.engine.tracing.sdk import collect_spans


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
        async with collect_spans(self.store):
            return await self.next.execute_activity(input)


def client_interceptors() -> list[Any]:
    """Temporal's OpenTelemetry interceptor, for ``Client.connect(interceptors=...)``: client,
    workflow and activity spans, propagated through Temporal headers."""
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def with_tracing(client: Any) -> Any:
    """The same connection with Temporal's tracing interceptor (unchanged when it has one)."""
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import TracingInterceptor

    config = client.config()
    if any(isinstance(i, TracingInterceptor) for i in config.get("interceptors", [])):
        return client
    config["interceptors"] = [*config.get("interceptors", []), *client_interceptors()]
    return Client(**config)


__all__ = ["SpanFlushInterceptor", "client_interceptors", "with_tracing"]
