"""The A2A request handler (DESIGN §15): the ``a2a-sdk``'s JSON-RPC dispatcher calls it; each
method is a thin call of :class:`~signoff.service.RunService` for the caller the request's API
key names, on the flow the URL names (``/a2a/{flow_id}``). The job store is the task store: a
task is a job, read afresh at every call, so any API replica answers.

- ``SendMessage``: a message without a ``taskId`` starts a run (its text the input, its
  ``contextId`` the session: a new message in a context supersedes that context's waiting run of
  the flow, as a new submit does); with the ``taskId`` of a run waiting at a gate it is the
  decision (:meth:`RunService.resume`, ``via`` ``a2a``). Either way the answer is the task once
  the run paused or ended (or after SIGNOFF_SYNC_TIMEOUT_SECONDS; at once with
  ``returnImmediately``).
- ``SendStreamingMessage`` / ``SubscribeToTask``: the task, then a status update at each change
  of state, until the run waits or ends; the stream counts as one of the caller's live streams
  (SIGNOFF_MAX_STREAMS_PER_USER) and ends when their key no longer sees the run (asked before
  each update and every SIGNOFF_STREAM_RECHECK_SECONDS while it is quiet).
- ``GetTask`` reads the run, ``CancelTask`` stops it.

Refusals are A2A's JSON-RPC errors: a run or flow the caller may not see (or of another flow)
is ``TaskNotFoundError`` (-32001), as over HTTP nothing is learned; a decision refused by the
checks (an action the gate does not allow, values failing its schema, a request no longer
waiting) is ``InvalidParamsError`` (-32602) with signoff's ``code`` in ``data``, the run left
as it was. Push notifications and task lists are not served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, SendMessageRequest,
    SubscribeToTaskRequest, Task, TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError, InternalError, InvalidParamsError, PushNotificationNotSupportedError,
    TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError,
)

from signoff.engine.errors import FlowNotFound, Forbidden, JobNotFound, SignoffError
from signoff.engine.models import Job, JobStatus, User
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.service import RunService

from signoff.api.errors import STATUS_BY_CODE
from signoff.api.errors import _jsonable as jsonable
from signoff.api.limits import ID_MAX_CHARS, string_problems
from signoff.api.ratelimit import WriteBudget, check_write
from signoff.api.sse import follow_job, key_still_sees
from signoff.api.a2a.translate import decision_of, input_text, status_of, task_of

log = logging.getLogger("signoff.api.a2a")

VIA = "a2a"
POLL_SECONDS = 0.2


class Caller:
    """Who calls, on which flow, with what: what the context builder put in the call's state."""

    def __init__(self, context: ServerCallContext) -> None:
        state = context.state
        self.user: User = state["signoff_user"]
        self.service: RunService = state["signoff_service"]
        self.store: Store = self.service.store
        self.settings: Settings = self.service.settings
        self.flow_id: str = state["signoff_flow_id"]
        self.key: str = state["signoff_key"]
        self.writes: WriteBudget = state["signoff_writes"]

    def write(self) -> None:
        """Take one write from the caller's SIGNOFF_WRITE_RATE (a submit, a decision, a stop)."""
        try:
            check_write(self.writes, self.user.id)
        except SignoffError as err:
            raise _refused(err) from None


def _refused(err: SignoffError) -> Exception:
    """A signoff error as the A2A error the client gets."""
    if isinstance(err, (JobNotFound, FlowNotFound)):
        return TaskNotFoundError(message=err.message)
    if STATUS_BY_CODE.get(err.code, 500) >= 500 and err.code != "UNAVAILABLE":
        log.error("A2A call: signoff error %s: %s", err.code, err.message, exc_info=err)
        return InternalError(message="Internal error; see the server log")
    data = {k: v for k, v in jsonable(err.details).items() if v is not None}
    return InvalidParamsError(message=err.message, data={"code": err.code, **data})


class SignoffA2A(RequestHandler):
    """The handler of every flow's agent (see the module's docstring)."""

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        c = Caller(context)
        job = await self._task(c, params.id)
        return task_of(job)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        c = Caller(context)
        job = await self._task(c, params.id)
        if job.status.terminal:
            raise TaskNotCancelableError(message=f"The run is {job.status.value} already")
        c.write()
        try:
            job = await c.service.stop(c.user, job.job_id)
        except Forbidden as err:
            raise TaskNotCancelableError(message=err.message) from None
        except SignoffError as err:
            raise _refused(err) from None
        return task_of(job)

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        c = Caller(context)
        job = await self._send(c, params)
        if params.configuration.return_immediately or job.user_id != c.user.id:
            return task_of(job)
        await c.service.wait_for_pause_or_end(job.job_id, c.settings.sync_timeout_seconds, user_id=c.user.id)
        return task_of(await self._task(c, job.job_id))

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event, None]:
        c = Caller(context)
        try:
            c.service.feed.check(c.user.id)  # TOO_MANY_STREAMS before anything runs
        except SignoffError as err:
            raise _refused(err) from None
        job = await self._send(c, params)
        async for event in self._follow(c, job):
            yield event

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event, None]:
        c = Caller(context)
        job = await self._task(c, params.id)
        try:
            c.service.feed.check(c.user.id)
        except SignoffError as err:
            raise _refused(err) from None
        async for event in self._follow(c, job):
            yield event

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        raise UnsupportedOperationError(message="Listing tasks is not served; GetTask reads one")

    async def on_create_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params: Any, context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params: Any, context: ServerCallContext) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params: Any, context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError()

    # ---- the run -------------------------------------------------------------------------

    async def _task(self, c: Caller, task_id: str) -> Job:
        """The run ``task_id`` names, if the caller may see it and it is of this flow."""
        if not task_id or len(task_id) > ID_MAX_CHARS:
            raise TaskNotFoundError()
        try:
            job = await c.service.get_job(c.user, task_id)
        except SignoffError as err:
            raise _refused(err) from None
        if job.flow_id != c.flow_id:
            raise TaskNotFoundError()
        return job

    async def _send(self, c: Caller, params: SendMessageRequest) -> Job:
        """A new run, or a decision on the waiting run the message names; the job as it is then."""
        c.write()
        message = params.message
        problems = string_problems(input_text(message), c.settings.max_string_chars, ("message",),
                                   max_depth=c.settings.max_json_depth)
        for name, value in (("contextId", message.context_id), ("taskId", message.task_id)):
            if len(value) > ID_MAX_CHARS:
                problems.append({"loc": name, "message": f"is longer than {ID_MAX_CHARS} characters",
                                 "type": "string_too_long"})
            problems += string_problems(value, None, (name,))
        if problems:
            raise InvalidParamsError(message="; ".join(f"{p['loc']}: {p['message']}" for p in problems),
                                     data={"code": "INVALID_REQUEST", "problems": problems})
        if message.task_id:
            job = await self._task(c, message.task_id)
            if job.status != JobStatus.suspended or job.pending is None:
                raise InvalidParamsError(message=f"Task {job.job_id} is {job.status.value}, not waiting for input",
                                         data={"code": "NOT_RESUMABLE", "job_id": job.job_id})
            try:
                decision = decision_of(message, job.pending)
                problems = string_problems(decision.values, c.settings.max_string_chars, ("values",),
                                           max_depth=c.settings.max_json_depth)
                if problems:
                    raise InvalidParamsError(message="; ".join(f"{p['loc']}: {p['message']}" for p in problems),
                                             data={"code": "INVALID_REQUEST", "problems": problems})
                await c.service.resume(c.user, job.job_id, job.pending.request_id, decision, via=VIA)
                return await c.service.get_job(c.user, job.job_id)
            except SignoffError as err:
                raise _refused(err) from None
        try:
            flow = await c.service.flows.get(c.user, c.flow_id)
            job, _ = await c.service.submit(c.user, flow, input_value=input_text(message),
                                            session_id=message.context_id or None, tweaks=None,
                                            idempotency_key=None, mode="background")
        except SignoffError as err:
            raise _refused(err) from None
        return job

    async def _follow(self, c: Caller, job: Job) -> AsyncGenerator[Event, None]:
        """The task, then a status update at each change of its state until the run waits or
        ends (its owner's: an approver's decision on someone else's run gets the task alone)."""
        try:
            async for event in self._changes(c, job):
                yield event
        except SignoffError as err:
            raise _refused(err) from None

    async def _changes(self, c: Caller, job: Job) -> AsyncGenerator[Event, None]:
        yield task_of(job)
        if job.user_id != c.user.id or job.status.terminal:
            return
        allowed = key_still_sees(c.store, c.key, c.user, job.job_id)
        told = (job.status, job.pending.request_id if job.pending else None)
        if job.status == JobStatus.suspended:
            return  # it waits for input: the task said so
        clock = asyncio.get_running_loop().time
        checked = clock()
        async for batch in follow_job(c.store, c.service.feed, job.job_id, user_id=c.user.id,
                                      after_seq=await _last_seq(c.store, job.job_id), tick=POLL_SECONDS):
            if not batch and clock() - checked < c.settings.stream_recheck_seconds:
                continue
            checked = clock()  # before an update, and every SIGNOFF_STREAM_RECHECK_SECONDS while quiet
            if not await allowed():
                return
            if not batch:
                continue
            now = await c.store.get_job(job.job_id)
            if now is not None and (now.status, now.pending.request_id if now.pending else None) != told:
                told = (now.status, now.pending.request_id if now.pending else None)
                yield self._update(now)
        now = await c.store.get_job(job.job_id)
        if now is not None and (now.status, now.pending.request_id if now.pending else None) != told \
                and await allowed():
            yield self._update(now)

    @staticmethod
    def _update(job: Job) -> Event:
        if job.status.terminal:
            return task_of(job)  # the final task, with its output artifact
        return TaskStatusUpdateEvent(task_id=job.job_id, context_id=job.effective_session, status=status_of(job))


async def _last_seq(store: Store, job_id: str) -> int:
    seq = 0
    while events := await store.read_events(job_id, after_seq=seq):
        seq = events[-1].seq
    return seq
