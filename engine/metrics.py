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
- ``signoff_store_writer_hold_seconds`` and ``signoff_store_writer_work_seconds_total`` (SQLite):
  how long each write transaction held the writer, and the part inside SQLite's calls.
- ``signoff_store_seconds{op}`` and ``signoff_store_errors_total{op, code}``: every store call
  of the process (a histogram per Store method; the label set is the method names, bounded);
- ``signoff_live_streams``: live streams this API process holds open.

Oversight, per flow (docs/audit.md, "Oversight metrics"):

- ``signoff_flow_time_to_decision_seconds{flow}``: from the request's pause to its decision;
- ``signoff_flow_decisions_total{flow, outcome}``: ``approved``, ``edited``, ``rejected``,
  ``timed_out`` or ``responded`` (:func:`decision_outcome`): the share of edited, rejected and
  timed-out decisions is a ratio of these;
- ``signoff_pending_age_seconds{flow}`` (a gauge histogram) and
  ``signoff_pending_oldest_age_seconds{flow}``: how long the requests waiting now have waited,
  read from the store when scraped (:func:`set_pending_ages`);
- ``signoff_standing_approvals_used_total{flow}``: calls a standing approval approved without
  asking (:func:`standing_approval_used`).

Labels never carry a flow's text (action ids, names): a hostile flow cannot grow them. The
``flow`` label is a flow's id, and a process gives at most SIGNOFF_METRICS_MAX_FLOWS of them their
own label (the first seen; at a scrape, the flows with the most waiting): every other flow is
counted under ``flow="_other"`` (:class:`FlowLabels`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric

from signoff.engine.errors import SignoffError
from signoff.engine.store.counters import COUNTS, HOLD
from signoff.engine.store.proxy import StoreProxy

__all__ = ["OTHER_FLOWS", "OUTCOMES", "REGISTRY", "FlowLabels", "MeteredStore", "decided", "decision_outcome",
           "exposition", "failed_activity", "set_pending_ages", "set_run_counts", "standing_approval_used"]

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
# a tool call approved by a standing approval instead of a person (DESIGN §17, engine/standing.py)
STORE_SECONDS = Histogram(
    "signoff_store_seconds", "Store call latency", ["op"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=REGISTRY)
STORE_ERRORS = Counter("signoff_store_errors", "Store calls that failed", ["op", "code"], registry=REGISTRY)

# oversight, per flow (a flow's id, capped: FlowLabels)
DECISION_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400)
FLOW_TIME_TO_DECISION = Histogram(
    "signoff_flow_time_to_decision_seconds", "From a request's pause to its decision, per flow", ["flow"],
    buckets=DECISION_BUCKETS, registry=REGISTRY)
FLOW_DECISIONS = Counter("signoff_flow_decisions", "Decisions applied, per flow and outcome (approved, edited, "
                         "rejected, timed_out, responded)", ["flow", "outcome"], registry=REGISTRY)
STANDING_USED = Counter("signoff_standing_approvals_used", "Calls a standing approval approved without asking, "
                        "per flow", ["flow"], registry=REGISTRY)

OTHER_FLOWS = "_other"
OUTCOMES = ("approved", "edited", "rejected", "timed_out", "responded")
MAX_FLOW_ID = 64  # a flow id longer than this is cut in its label


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
        if HOLD.n:  # SQLite only: its one writer's hold per write transaction (engine/store/counters.py)
            from prometheus_client.core import HistogramMetricFamily

            cumulative, buckets = 0, []
            for bound, n in zip(HOLD.BUCKETS, HOLD.counts):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            yield HistogramMetricFamily("signoff_store_writer_hold_seconds", "How long a write transaction held "
                                        "the SQLite writer (BEGIN IMMEDIATE to the end of COMMIT)",
                                        buckets=buckets, sum_value=HOLD.sum)
            yield CounterMetricFamily("signoff_store_writer_work_seconds", "Of the writer's hold, the time spent "
                                      "in SQLite's own calls", value=HOLD.work)


REGISTRY.register(_StoreCounts())  # type: ignore[arg-type]

STATUSES = ("queued", "in_progress", "suspended", "completed", "failed", "cancelled", "timed_out")


def set_run_counts(counts: dict[str, int]) -> None:
    for status in STATUSES:
        RUNS.labels(status).set(counts.get(status, 0))
    WAITING.set(counts.get("suspended", 0))


class FlowLabels:
    """The flow ids a process gives a label of their own: the first ``cap`` seen (ever, in this
    process; a counter's label once given is kept), every other flow ``_other``. Thread-safe
    (the worker's metrics endpoint runs in a thread)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def label(self, flow_id: str | None, cap: int) -> str:
        if not flow_id:
            return OTHER_FLOWS
        flow_id = str(flow_id)[:MAX_FLOW_ID]
        if flow_id in self._seen:
            return flow_id
        with self._lock:
            if len(self._seen) < cap:
                self._seen.add(flow_id)
                return flow_id
        return OTHER_FLOWS


FLOWS = FlowLabels()

_APPROVE = frozenset({"approve", "approved", "accept", "accepted", "allow", "yes", "ok", "confirm", "proceed"})
_REJECT = frozenset({"reject", "rejected", "deny", "denied", "decline", "declined", "no", "cancel", "abort", "block"})
_EDIT = frozenset({"edit", "edited", "revise", "modify", "change", "amend"})
_TOOL = {"approve": "approved", "edit": "edited", "reject": "rejected", "respond": "responded"}


def decision_outcome(kind: str | None, action_id: str, *, timed_out: bool = False, rerouted: bool = False) -> str:
    """A decision's outcome among :data:`OUTCOMES`: ``timed_out`` when the deadline decided (or
    rerouted a late answer); a tool approval's action as it is (approve, edit, reject, respond);
    a gate's action by its usual names (approve/accept/yes..., reject/deny/no..., edit/revise...),
    any other answer (a form's, a choice among options) ``responded``."""
    if timed_out or rerouted:
        return "timed_out"
    action = (action_id or "").strip().lower()
    if kind == "tool_approval":
        return _TOOL.get(action, "responded")
    if action in _APPROVE:
        return "approved"
    if action in _REJECT:
        return "rejected"
    if action in _EDIT:
        return "edited"
    return "responded"


def decided(*, seconds_waited: float | None, rerouted: bool, timed_out: bool, via: str | None,
            flow_id: str | None = None, kind: str | None = None, action_id: str = "", max_flows: int = 50) -> None:
    outcome = "deadline" if timed_out else "rerouted" if rerouted else "decided"
    DECISIONS.labels(outcome, "deadline" if timed_out else (via if via in ("api", "temporal", "mcp", "a2a") else "other")).inc()
    flow = FLOWS.label(flow_id, max_flows)
    FLOW_DECISIONS.labels(flow, decision_outcome(kind, action_id, timed_out=timed_out, rerouted=rerouted)).inc()
    if seconds_waited is not None and seconds_waited >= 0:
        TIME_TO_DECISION.observe(seconds_waited)
        FLOW_TIME_TO_DECISION.labels(flow).observe(seconds_waited)


def standing_approval_used(flow_id: str | None, *, max_flows: int = 50) -> None:
    """A call approved by a standing approval, without asking (DESIGN §17)."""
    STANDING_USED.labels(FLOWS.label(flow_id, max_flows)).inc()


class _PendingAges:
    """``signoff_pending_age_seconds{flow}`` and ``signoff_pending_oldest_age_seconds{flow}``:
    the snapshot the last scrape read from the store (Store.pending_ages), given as they were."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        yield from self.families


PENDING_AGES = _PendingAges()
REGISTRY.register(PENDING_AGES)  # type: ignore[arg-type]


def set_pending_ages(ages: Sequence[Any], now: datetime, *, max_flows: int = 50,
                     bounds: Sequence[float] = DECISION_BUCKETS) -> None:
    """Turn Store.pending_ages (counted at ``bounds``) into the pending-age metrics: the
    ``max_flows`` flows with the most waiting their own label, the rest summed as ``_other``."""
    rows: dict[str, list[Any]] = {}  # label -> [count, within per bound, oldest, sum of ages]
    for i, entry in enumerate(ages):
        label = str(entry.flow_id)[:MAX_FLOW_ID] if i < max_flows else OTHER_FLOWS
        row = rows.setdefault(label, [0, [0] * len(bounds), None, 0.0])
        row[0] += entry.count
        row[3] += entry.seconds
        row[1] = [a + b for a, b in zip(row[1], entry.within)]
        if entry.oldest is not None and (row[2] is None or entry.oldest < row[2]):
            row[2] = entry.oldest
    histogram = GaugeHistogramMetricFamily("signoff_pending_age_seconds", "How long the requests waiting now have "
                                           "waited, per flow (read at the scrape)", labels=["flow"])
    oldest = GaugeMetricFamily("signoff_pending_oldest_age_seconds", "How long the longest waiting request of each "
                               "flow has waited (read at the scrape)", labels=["flow"])
    for label, (count, within, first, seconds) in rows.items():
        buckets = [(_le(b), float(n)) for b, n in zip(bounds, within)] + [("+Inf", float(count))]
        histogram.add_metric([label], buckets, seconds)
        oldest.add_metric([label], max(0.0, (now - first).total_seconds()) if first is not None else 0.0)
    PENDING_AGES.families = [histogram, oldest]


def _le(bound: float) -> str:
    return str(float(bound))


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
