"""Whose work a run's activities do, handed to them by the workflow (issue 28, "a fair share").

A run is started with its user as its Temporal fairness key (``service/temporal.py:
fair_share``), and the worker takes each activity's work in that user's turns (the SQLite
writer's, engine/fairgate.py). But an activity task does not carry the key: the dev server
handed none to any activity, and a local activity never has one. Keyed by their run instead,
every run of a user who starts runs as fast as they can was a new key that had held nothing, and
went before a person's run.

:class:`WhoseInterceptor` writes the run's fairness key into the header :data:`USER_HEADER` of
each activity and local activity the workflow starts; the worker's activity interceptor
(``activities/telemetry.py: user_of``) reads it there first. A regular activity is also scheduled
with the run's priority (its fairness key) unless it names one: the server does not pass the
workflow's on, and without it the activity tasks of every user waited in one first-come queue
when the worker's pollers fell behind. Neither a header nor a priority is part of what a replay
compares (the activity's type and id are): the recorded histories replay alike (test_replay).
"""

from __future__ import annotations

import temporalio.worker
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import Priority

from signoff.activities.headers import USER_HEADER, text_payload


def _stamped(headers: dict[str, Payload]) -> dict[str, Payload]:
    priority = workflow.info().priority
    key = priority.fairness_key if priority is not None else None
    if not key:
        return headers
    return {**headers, USER_HEADER: text_payload(key)}


class WhoseInterceptor(temporalio.worker.Interceptor):
    """Every activity a workflow starts carries the run's user (:data:`USER_HEADER`)."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _WhoseInbound


class _WhoseInbound(temporalio.worker.WorkflowInboundInterceptor):
    def init(self, outbound: temporalio.worker.WorkflowOutboundInterceptor) -> None:
        super().init(_WhoseOutbound(outbound))


class _WhoseOutbound(temporalio.worker.WorkflowOutboundInterceptor):
    def start_activity(self, input: temporalio.worker.StartActivityInput) -> workflow.ActivityHandle:
        input.headers = _stamped(input.headers)
        run = workflow.info().priority
        if input.priority == Priority.default and run is not None and run.fairness_key:
            input.priority = run  # its task waits in Temporal's queue under the run's key too
        return super().start_activity(input)

    def start_local_activity(self, input: temporalio.worker.StartLocalActivityInput) -> workflow.ActivityHandle:
        input.headers = _stamped(input.headers)
        return super().start_local_activity(input)


__all__ = ["WhoseInterceptor"]
