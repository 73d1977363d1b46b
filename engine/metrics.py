"""signoff's metrics, in Prometheus' format (prometheus_client), one registry per process.

Served by the API at ``GET /metrics`` and by ``signoff worker`` on ``SIGNOFF_METRICS_PORT``
(the Temporal SDK's own worker metrics on ``SIGNOFF_TEMPORAL_METRICS_PORT``: docs/scale.md).

- ``signoff_runs{status}``, ``signoff_waiting_requests``: read from the store when scraped (so
  every replica reports the same totals: take them from one);
- ``signoff_time_to_decision_seconds``: from the pause to the decision, observed where the
  decision is applied (the worker; ``signoff dev`` is one process);
- ``signoff_decisions_total{outcome, via}``: ``decided`` in time, ``rerouted`` (a late answer),
  ``deadline`` (``on_timeout`` acted); ``via`` ``api``, ``mcp``, ``a2a``, ``temporal`` or ``deadline``;
- ``signoff_activity_failures_total{activity, code}``: failed activity attempts (Temporal
  retries them or the run fails);
- ``signoff_store_transactions_total{kind}`` and ``signoff_store_statements_total``: the SQL
  store's commits, read connections and statements (engine/store/counters.py).
- ``signoff_store_seconds{op}`` and ``signoff_store_errors_total{op, code}``: every store call
  of the process (a histogram per Store method; the label set is the method names, bounded);
- ``signoff_live_streams``: live streams this API process holds open.

Labels never carry a flow's text (action ids, names): a hostile flow cannot grow them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from signoff.engine.errors import SignoffError
from signoff.engine.store.counters import COUNTS
from signoff.engine.store.proxy import StoreProxy

__all__ = ["REGISTRY", "MeteredStore", "decided", "exposition", "failed_activity", "set_run_counts"]

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS = Gauge("signoff_runs", "Runs (jobs) by status, as the store holds them", ["status"], registry=REGISTRY)
WAITING = Gauge("signoff_waiting_requests", "Runs suspended at a gate, waiting for a person", registry=REGISTRY)
LIVE_STREAMS = Gauge("signoff_live_streams", "Live streams (SSE) this API process holds open", registry=REGISTRY)
TIME_TO_DECISION = Histogram(
    "signoff_time_to_decision_seconds", "From a pause to the decision that answered it",
    buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400), registry=REGISTRY)
DECISIONS = Counter("signoff_decisions", "Decisions applied", ["outcome", "via"], registry=REGISTRY)
ACTIVITY_FAILURES = Counter("signoff_activity_failures", "Activity attempts that failed", ["activity", "code"],
                            registry=REGISTRY)
STORE_SECONDS = Histogram(
    "signoff_store_seconds", "Store call latency", ["op"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=REGISTRY)
STORE_ERRORS = Counter("signoff_store_errors", "Store calls that failed", ["op", "code"], registry=REGISTRY)

class _StoreCounts:
    """``signoff_store_transactions_total{kind}`` (commit: write transactions; read: read
    connections) and ``signoff_store_statements_total``, from engine/store/counters.py."""

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        tx = CounterMetricFamily("signoff_store_transactions", "Store transactions by kind (commit: a write "
                                 "transaction; read: a read connection)", labels=["kind"])
        tx.add_metric(["commit"], COUNTS["commit"])
        tx.add_metric(["read"], COUNTS["read"])
        yield tx
        yield CounterMetricFamily("signoff_store_statements", "Statements the store sent to its database",
                                  value=COUNTS["statements"])


REGISTRY.register(_StoreCounts())  # type: ignore[arg-type]

STATUSES = ("queued", "in_progress", "suspended", "completed", "failed", "cancelled", "timed_out")


def set_run_counts(counts: dict[str, int]) -> None:
    for status in STATUSES:
        RUNS.labels(status).set(counts.get(status, 0))
    WAITING.set(counts.get("suspended", 0))


def decided(*, seconds_waited: float | None, rerouted: bool, timed_out: bool, via: str | None) -> None:
    outcome = "deadline" if timed_out else "rerouted" if rerouted else "decided"
    DECISIONS.labels(outcome, "deadline" if timed_out else (via if via in ("api", "temporal", "mcp", "a2a") else "other")).inc()
    if seconds_waited is not None and seconds_waited >= 0:
        TIME_TO_DECISION.observe(seconds_waited)


def failed_activity(activity: str, error: BaseException) -> None:
    code = (error.code if isinstance(error, SignoffError) else
            getattr(error, "type", None) or type(error).__name__)  # an ApplicationError's type is the code
    ACTIVITY_FAILURES.labels(activity, code[:64]).inc()


def exposition() -> bytes:
    return generate_latest(REGISTRY)


class MeteredStore(StoreProxy):
    """``store`` with each coroutine method timed (``signoff_store_seconds{op}``) and its failures
    counted; anything else passes through."""

    def _wrap(self, name: str) -> Callable[..., Any]:
        seconds, store = STORE_SECONDS.labels(name), self._store

        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await getattr(store, name)(*args, **kwargs)
            except SignoffError as err:
                STORE_ERRORS.labels(name, err.code).inc()
                raise
            finally:
                seconds.observe(time.perf_counter() - start)

        return call
