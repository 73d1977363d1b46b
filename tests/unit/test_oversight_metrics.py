"""engine/metrics.py's oversight metrics without a server: outcomes, the capped flow labels,
the pending ages folded beyond the cap, the standing-approval counter."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from signoff.engine import metrics
from signoff.engine.models import PendingAges, utcnow


def _samples() -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples}


def test_outcomes() -> None:
    o = metrics.decision_outcome
    assert [o("tool_approval", a) for a in ("approve", "edit", "reject", "respond", "other")] == [
        "approved", "edited", "rejected", "responded", "responded"]
    assert [o("node_input", a) for a in ("Approve", "deny", "revise", "ship_it")] == [
        "approved", "rejected", "edited", "responded"]
    assert o("node_input", "approve", timed_out=True) == o("tool_approval", "approve", rerouted=True) == "timed_out"
    assert set(metrics.OUTCOMES) >= {o(k, a) for k in ("node_input", "tool_approval", None)
                                     for a in ("approve", "edit", "x", "")}


def test_flow_labels_are_capped_and_the_rest_is_other() -> None:
    labels = metrics.FlowLabels()
    assert [labels.label(f, 2) for f in ("a", "b", "c", "a", None, "x" * 500)] == [
        "a", "b", "_other", "a", "_other", "_other"]
    assert metrics.FlowLabels().label("y" * 500, 5) == "y" * metrics.MAX_FLOW_ID


def test_standing_approvals_used_counts_per_flow() -> None:
    # the label this process gives the flow: its id, or "_other" once the process labelled as
    # many flows as it may (a long test session has seen many)
    key = ("signoff_standing_approvals_used_total", (("flow", metrics.FLOWS.label("flow-standing-test", 50)),))
    before = _samples().get(key, 0)
    metrics.standing_approval_used("flow-standing-test")
    metrics.standing_approval_used("flow-standing-test")
    assert _samples()[key] == before + 2


def test_pending_ages_beyond_the_cap_are_summed_as_other() -> None:
    now = utcnow()
    ages = [PendingAges("f1", 3, (1, 3), now - timedelta(seconds=100), 150.0),
            PendingAges("f2", 2, (0, 2), now - timedelta(seconds=50), 90.0),
            PendingAges("f3", 1, (1, 1), now - timedelta(seconds=500), 5.0)]
    metrics.set_pending_ages(ages, now, max_flows=1, bounds=(10, 1000))
    got = _samples()
    assert got[("signoff_pending_age_seconds_bucket", (("flow", "f1"), ("le", "10.0")))] == 1
    assert got[("signoff_pending_age_seconds_bucket", (("flow", "_other"), ("le", "10.0")))] == 1
    assert got[("signoff_pending_age_seconds_bucket", (("flow", "_other"), ("le", "+Inf")))] == 3
    assert got[("signoff_pending_age_seconds_gsum", (("flow", "_other"),))] == 95.0
    assert got[("signoff_pending_oldest_age_seconds", (("flow", "_other"),))] == 500
    assert not any(k[1] == (("flow", "f2"),) for k in got)
    metrics.set_pending_ages([], now)
    assert not any(k[0].startswith("signoff_pending_") for k in _samples())
