"""The FlowRun activities: thin adapters between the workflow and the engine. All I/O of a run
lives here (component builds, the job table, events, checkpoints, chat cards, blobs); the
rules live in the engine (the steps, :mod:`~signoff.engine.decisions`,
:mod:`~signoff.engine.lifecycle`), and a SignoffError leaves as a Temporal failure in one place
(:mod:`signoff.activities.failures`): retryable or not by the error's ``retryable``
(docs/temporal.md).
"""

from __future__ import annotations

from typing import Any

from signoff.activities.decision import DecisionActivities
from signoff.activities.gates import GateActivities


class FlowActivities(DecisionActivities, GateActivities):
    """Every activity of FlowRun, one worker registration: the layers (activities/layers.py), the
    decision attempt (activities/decision.py), a waiting request's votes and timers
    (activities/gates.py), the webhooks (activities/webhooks.py) and notifications
    (activities/notify.py), on the shared part
    (activities/base.py)."""

    def all(self) -> list[Any]:
        return [self.run_layer, self.resume_run, self.rollback_resume, self.finish,
                self.record_event, self.record_vote, self.gate_timer, self.deliver_event, self.deliver_webhook,
                self.notify_person]
