"""Who sent an Update or a Signal, as Temporal recorded it, handed to the workflow's own code.

A decision's event records the identity of the Temporal client that sent it (DESIGN §9): the
API's own client, ``temporal --identity ...``, an SDK client's ``identity``. Temporal puts it in
each workflow activation (an Update's ``meta.identity``, a Signal's ``identity``), live and on
replay alike, but the Python SDK does not give it to the handler. Two small parts carry it there:

- :class:`CallerRunner` wraps the worker's workflow runner and writes that identity into the
  Update's or Signal's headers under :data:`CALLER_HEADER` before the workflow sees the
  activation, replacing any header of that name the client sent (a client cannot name itself);
- :class:`CallerInterceptor` reads the header as the handler starts and sets :data:`CALLER`,
  which the handler (``FlowRun``) reads with :func:`caller` for the decision's activity.

Before this the activity read the identity from the workflow's history, which only works once
the workflow task that accepted the Update has completed: a decision applied in that very task
(a local activity, docs/temporal.md "Round trips per run") needs it from the activation. The
value is never part of a command, so it cannot make a replay diverge.

The same wrapper answers the SDK's question of which serialization context each payload of an
activation is encoded and decoded with: the sandboxed instance answers it by running code in the
sandbox (an ``exec`` of a small string compiled again each time, per payload sequence: ~2 ms of
the worker's CPU per decision, issue 33), and a data converter that uses no context (signoff's: no
codec, no external storage, no context-aware converter; :func:`context_free`) is the same
converter whatever the answer. For such a converter the answer is "none", at once.
"""

from __future__ import annotations

import contextvars
from typing import Any

import temporalio.converter
import temporalio.worker
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import StorageDriverStoreContext

from signoff.activities.headers import header_text, text_payload

CALLER_HEADER = "signoff-caller-identity"

# The identity of the client whose Update or Signal the current handler runs for: "" when the
# client sent none, None outside a handler (the run's own code, a timer's decision).
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("signoff_caller", default=None)


def caller() -> str | None:
    """The identity of the client whose Update or Signal is being handled (None: none is)."""
    return CALLER.get()


def context_free(converter: temporalio.converter.DataConverter) -> bool:
    """Whether ``converter`` encodes and decodes alike whatever the serialization context: no
    external storage, and every part of it the same object with a workflow's or an activity's
    context (DataConverter.with_context returns itself when no part takes one)."""
    probes = (temporalio.converter.WorkflowSerializationContext(namespace="", workflow_id=""),
              temporalio.converter.ActivitySerializationContext(
                  namespace="", workflow_id="", workflow_type="", activity_type="", activity_task_queue="",
                  is_local=True, activity_id=""))
    return converter.external_storage is None and all(converter.with_context(p) is converter for p in probes)


class CallerRunner(temporalio.worker.WorkflowRunner):
    """A workflow runner (``inner``, e.g. the sandboxed one) whose instances see each Update's and
    Signal's sender in the header :data:`CALLER_HEADER`. ``context_free``: the worker's data
    converter uses no serialization context (:func:`context_free`), so none is computed."""

    def __init__(self, inner: temporalio.worker.WorkflowRunner, *, context_free: bool = False) -> None:
        self.inner = inner
        self.context_free = context_free

    def prepare_workflow(self, defn: Any) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: temporalio.worker.WorkflowInstanceDetails) -> temporalio.worker.WorkflowInstance:
        return _CallerInstance(self.inner.create_instance(det), context_free=self.context_free)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self.inner.set_worker_level_failure_exception_types(types)


class _CallerInstance(temporalio.worker.WorkflowInstance):
    def __init__(self, inner: temporalio.worker.WorkflowInstance, *, context_free: bool = False) -> None:
        self.inner = inner
        self.context_free = context_free

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        for job in act.jobs:
            if job.HasField("do_update"):
                _stamp(job.do_update.headers, job.do_update.meta.identity)
            elif job.HasField("signal_workflow"):
                _stamp(job.signal_workflow.headers, job.signal_workflow.identity)
        return self.inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> Any:
        if self.context_free:  # the converter is the same with any context: none (the sandbox not entered)
            return None
        return self.inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        if self.context_free:  # no external storage: the context would be bound to nothing
            return StorageDriverStoreContext(target=None)
        return self.inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self.inner.get_info()

    def get_thread_id(self) -> int | None:
        return self.inner.get_thread_id()


def _stamp(headers: Any, identity: str) -> None:
    headers[CALLER_HEADER].CopyFrom(text_payload(identity))


def _read(headers: Any) -> str | None:
    return header_text(headers, CALLER_HEADER)


class CallerInterceptor(temporalio.worker.Interceptor):
    """Sets :data:`CALLER` for the duration of each Update and Signal handler."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _CallerInbound


class _CallerInbound(temporalio.worker.WorkflowInboundInterceptor):
    async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
        CALLER.set(_read(input.headers))  # the handler's own task: nothing else sees it
        return await self.next.handle_update_handler(input)

    async def handle_signal(self, input: temporalio.worker.HandleSignalInput) -> None:
        CALLER.set(_read(input.headers))
        await self.next.handle_signal(input)
