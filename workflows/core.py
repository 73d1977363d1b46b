"""What every part of FlowRun shares: the run's state in the workflow (the pending request, the
state reference, the one decision slot, the votes, the webhook deliveries under way), the
bookkeeping activities' calls and the search attributes. The parts: the decision attempt
(workflows/attempt.py), the wait at a gate (workflows/gate_wait.py), the loop and the handlers
(workflows/flow_run.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from temporalio import workflow
from temporalio.exceptions import CancelledError

with workflow.unsafe.imports_passed_through():
    from signoff.activities.flow import FlowActivities
    from signoff.activities.types import (
        HOOKS_PER_DELIVERY,
        Delivery,
        EventDelivery,
        FinishInput,
        FinishOutput,
        RunLayerOutput,
        StateRef,
    )
    from signoff.engine.models import JobStatus, PendingRequest, Vote
    from signoff.workflows.policies import (
        STORE_RETRY,
        STORE_TIMEOUT,
        NOTIFY_TIMEOUT,
        WEBHOOK_RETRY,
    )
    from signoff.workflows.types import (
        SA_REQUEST,
        SA_STATUS,
        FlowRunInput,
        ResumeResult,
    )


def current_update_id() -> str | None:
    """The id of the Update being handled (None in a Signal handler or the run's own code),
    recorded with the decision (DESIGN §9)."""
    info = workflow.current_update_info()
    return info.id if info is not None else None


def is_stop(err: BaseException) -> bool:
    """An activity's failure that is its cancellation (a stop of the run: a regular activity's
    is an ActivityError caused by it, a local one's the cancellation itself)."""
    return isinstance(err, CancelledError) or isinstance(getattr(err, "cause", None), CancelledError)


def claim_token(attempt: int) -> str:
    """The claim token of the run's ``attempt``-th decision attempt (counted from 0; an attempt
    counts once its activity's result, or failure, is in the history): the same on replay and in
    every retry of the activity, different for every attempt. It names the attempt, not the
    Update: when the workflow task that ran a decision as a local activity is lost (a
    speculative task the server dropped, a worker that died), Temporal delivers its Updates
    again, maybe in another order, and whichever is taken first then runs the same attempt,
    finding the lost one's claim and record in the store instead of losing against them."""
    return f"wf-{workflow.info().run_id}-d{attempt}"


@dataclass
class DecisionSlot:
    """The run's one decision slot: the decision being applied, applied (``out``: where the run is
    after it, until the run loop takes it) or failed (rolled back; the run waits again). The
    validator refuses a decision while the slot holds one that is not failed; a new decision
    replaces a failed one, so "a decision came and went" is "the slot holds another object"."""

    out: RunLayerOutput | None = None
    failed: bool = False


class RunCore:
    def __init__(self) -> None:
        self._inp: FlowRunInput | None = None
        self._pending: PendingRequest | None = None
        self._state: StateRef | None = None
        self._step = 0
        self._decision: DecisionSlot | None = None
        self._votes: list[Vote] = []  # the votes on the pending request (a quorum), in order
        self._lock = asyncio.Lock()  # one decision (or vote, or deadline) handled at a time
        self._outbox: list[Any] = []  # webhook deliveries under way
        self._status = JobStatus.queued.value
        self._rejections: dict[str | None, int] = {}  # rejected resume Signals per pending request id
        self._attempts = 0  # decision attempts whose activity result is in the history (claim_token)
        # The answers of Updates whose decision was applied by an attempt another Update's handler
        # finished (its own workflow task was lost): given to that Update when it comes again.
        self._answered: dict[str, ResumeResult] = {}
        self._catch_ups: dict[str | None, int] = {}  # catch-up Updates let in per pending request id
        # A layer's activity is under way that may persist a pause: the store may show the job
        # ``suspended`` before this workflow has the layer's result, so a decision arriving now
        # is held until it has (then checked), not refused.
        self._layer_running = False

    @property
    def _applying(self) -> bool:
        return self._decision is not None and self._decision.out is None and not self._decision.failed

    @property
    def _applied(self) -> bool:
        return self._decision is not None and self._decision.out is not None

    @property
    def _undecided(self) -> bool:
        """No decision taken on the pending request, or the last one failed (rolled back)."""
        return self._decision is None or self._decision.failed

    @property
    def _pending_id(self) -> str | None:
        return self._pending.request_id if self._pending is not None else None

    def _take_decision(self) -> RunLayerOutput:
        assert self._decision is not None and self._decision.out is not None
        out, self._decision = self._decision.out, None
        return out

    def _deliver(self, deliveries: list[Delivery]) -> None:
        """Start the webhook deliveries and notifications of an event: retried with backoff by Temporal, never
        waited for by the run (a failing endpoint never blocks it); the workflow waits for them
        only once the run is over."""
        hooks: dict[tuple[str, int], list[str]] = {}  # an event's webhooks, in the order given
        for d in deliveries:
            if d.channel is not None:  # a notification to a person (activities/notify.py)
                self._outbox.append(workflow.start_activity_method(
                    FlowActivities.notify_person, d, start_to_close_timeout=NOTIFY_TIMEOUT, retry_policy=WEBHOOK_RETRY))
            else:
                hooks.setdefault((d.job_id, d.seq), []).append(d.webhook_id)
        for (job_id, seq), ids in hooks.items():  # one activity per event (and per twenty webhooks)
            for i in range(0, len(ids), HOOKS_PER_DELIVERY):
                self._outbox.append(workflow.start_activity_method(
                    FlowActivities.deliver_event, EventDelivery(job_id=job_id, seq=seq,
                                                                webhook_ids=ids[i:i + HOOKS_PER_DELIVERY]),
                    start_to_close_timeout=timedelta(seconds=30), retry_policy=WEBHOOK_RETRY))

    # ---- helpers -------------------------------------------------------------------------

    async def _finish(self, fin: FinishInput) -> FinishOutput:
        return await self._store_activity(FlowActivities.finish, fin)

    @staticmethod
    async def _store_activity(activity: Callable[..., Any], arg: Any) -> Any:
        """A bookkeeping activity: it only touches the store, so it is retried longer."""
        return await workflow.execute_activity_method(activity, arg, start_to_close_timeout=STORE_TIMEOUT,
                                                      retry_policy=STORE_RETRY)

    def _set_status(self, status: str, *, request_id: str | None = None) -> None:
        self._status = status
        workflow.upsert_search_attributes([
            SA_STATUS.value_set(status),
            SA_REQUEST.value_set(request_id) if request_id else SA_REQUEST.value_unset(),
        ])

    @staticmethod
    def _details(pending: PendingRequest) -> str:
        options = ", ".join(o.label for o in pending.options) or ", ".join(pending.allowed_decisions)
        lines = [
            f"**Waiting for a decision** on `{pending.request_id}` ({pending.kind})",
            f"Prompt: {pending.prompt}" if pending.prompt else "",
            f"Options: {options}",
            "Answer: Update `resume` with "
            f'{{"request_id": "{pending.request_id}", "decision": {{"action_id": "..."}}}}',
        ]
        return "\n".join(x for x in lines if x)
