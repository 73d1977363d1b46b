"""What an A2A task says of a signoff run, and what a message says to it (DESIGN §15). Pure: no
store, no service. Every value is an ``a2a-sdk`` protobuf message.

- A run is a task: its id is the job id, its ``contextId`` the run's session.
- A run waiting at a gate is ``input-required``; its status message has the prompt as text and
  a DataPart ``{request_id, kind, actions: [{id, label}], fields, tool?}``.
- A message on that task decides: a DataPart ``{action_id, values?}``, or a text that is exactly
  an action's id or label (case and surrounding blanks aside).
- A completed run is ``completed`` with its output as text (and an ``output`` artifact), a failed
  or timed-out one ``failed`` with the error, a stopped or superseded one ``canceled``.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a.types.a2a_pb2 import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf import json_format, struct_pb2

from signoff.engine.models import Decision, Job, JobStatus, PendingRequest

from signoff.api.errors import InvalidRequest
from signoff.api.models import workflow_response

STATES = {
    JobStatus.queued: TaskState.TASK_STATE_SUBMITTED,
    JobStatus.in_progress: TaskState.TASK_STATE_WORKING,
    JobStatus.suspended: TaskState.TASK_STATE_INPUT_REQUIRED,
    JobStatus.completed: TaskState.TASK_STATE_COMPLETED,
    JobStatus.failed: TaskState.TASK_STATE_FAILED,
    JobStatus.timed_out: TaskState.TASK_STATE_FAILED,
    JobStatus.cancelled: TaskState.TASK_STATE_CANCELED,
}


def data_part(value: Any) -> Part:
    return Part(data=json_format.ParseDict(value, struct_pb2.Value()), media_type="application/json")


def value_of(part: Part) -> Any:
    """A part's DataPart value as JSON (None for another kind of part), its whole numbers as
    integers again (protobuf's Value holds every number as a double)."""
    return _whole(json_format.MessageToDict(part.data)) if part.WhichOneof("content") == "data" else None


def _whole(value: Any) -> Any:
    """``value`` with each integral float as an int, walked with a stack (any depth protobuf read)."""
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, float) and item.is_integer() and abs(item) < 2 ** 53:
            container[key] = int(item)
        elif isinstance(item, dict):
            stack.extend((item, k) for k in item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
    return root[0]


def _agent(job: Job, parts: list[Part]) -> Message:
    return Message(message_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff:a2a/{job.job_id}/{job.status.value}/"
                                              f"{job.pending.request_id if job.pending else ''}")),
                   context_id=job.effective_session, task_id=job.job_id, role=Role.ROLE_AGENT, parts=parts)


def asked(p: PendingRequest) -> dict[str, Any]:
    """The DataPart of a waiting request."""
    named = {o.action_id: o.label for o in p.options}
    out: dict[str, Any] = {"request_id": p.request_id, "kind": p.kind,
                           "actions": [{"id": a, "label": named.get(a, a)} for a in p.allowed_decisions],
                           "fields": p.fields or {}}
    if p.tool:
        out["tool"] = p.tool
    if p.timeout_seconds:
        out["timeout_seconds"] = p.timeout_seconds
    return out


def status_of(job: Job) -> TaskStatus:
    """The task's status: its state and, when the run waits or ended, what it says."""
    status = TaskStatus(state=STATES.get(job.status, TaskState.TASK_STATE_WORKING))
    status.timestamp.FromDatetime(job.updated_at)
    if job.status == JobStatus.suspended and job.pending is not None:
        status.message.CopyFrom(_agent(job, [Part(text=job.pending.prompt or "A decision is needed"),
                                             data_part(asked(job.pending))]))
    elif job.status == JobStatus.completed:
        text = output_text(job)
        if text:
            status.message.CopyFrom(_agent(job, [Part(text=text)]))
    elif job.status in (JobStatus.failed, JobStatus.timed_out):
        error = job.error or {}
        reason = "The run timed out waiting for a decision" if job.status == JobStatus.timed_out else \
            str(error.get("error") or "The run failed")
        status.message.CopyFrom(_agent(job, [Part(text=reason)]))
    elif job.status == JobStatus.cancelled:
        status.message.CopyFrom(_agent(job, [Part(text="The run was stopped")]))
    return status


def output_text(job: Job) -> str | None:
    out = workflow_response(job).output
    return out.text if out is not None else None


def task_of(job: Job) -> Task:
    """The run as an A2A task (see the module's docstring)."""
    task = Task(id=job.job_id, context_id=job.effective_session, status=status_of(job))
    task.metadata.update({"flow_id": job.flow_id, "status": job.status.value})
    if job.status == JobStatus.completed:
        response = workflow_response(job).model_dump(mode="json", exclude_none=True)
        parts = [Part(text=text)] if (text := output_text(job)) else []
        parts.append(data_part(response))
        task.artifacts.append(Artifact(artifact_id=f"{job.job_id}-output", name="output", parts=parts))
    return task


def input_text(message: Message) -> str:
    """A message's text parts as a run's input."""
    return "\n".join(part.text for part in message.parts if part.WhichOneof("content") == "text")


def decision_of(message: Message, p: PendingRequest) -> Decision:
    """The decision a message carries for ``p`` (see the module's docstring); InvalidRequest when
    it carries none."""
    for part in message.parts:
        value = value_of(part)
        if isinstance(value, dict) and "action_id" in value:
            try:
                return Decision.model_validate({k: v for k, v in value.items() if k in ("action_id", "values")})
            except ValueError as err:
                raise InvalidRequest(f"The DataPart is not a decision {{action_id, values?}}: {err}") from None
    text = input_text(message).strip().lower()
    if text:
        named = {o.action_id: o.label for o in p.options}
        for action in p.allowed_decisions:
            if text in (action.lower(), named.get(action, action).strip().lower()):
                return Decision(action_id=action)
    actions = ", ".join(p.allowed_decisions)
    raise InvalidRequest(f"The message does not decide request {p.request_id!r}: send a DataPart "
                         f"{{\"action_id\", \"values\"}} or the text of one action ({actions})")
