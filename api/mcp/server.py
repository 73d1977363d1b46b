"""signoff's MCP server (DESIGN §15, docs/protocols.md): the tools and the run resource, each a
thin call of :class:`~signoff.service.RunService` for the caller a :data:`Caller` names.

The same server answers over Streamable HTTP (``/mcp``, the caller the API key of the request
names) and over stdio (``signoff mcp``, the caller SIGNOFF_API_KEY names, asked again at every
call so a revoked key stops it).

``run_flow`` submits, waits (at most SIGNOFF_SYNC_TIMEOUT_SECONDS) for the run to pause or end,
and, at a gate, asks the client's person when the client declared elicitation: on the current
protocol (2026-07-28) as an ``InputRequiredResult`` whose sealed ``request_state`` names the
job and request (the client's retry carries the answer; nothing is submitted again), on the
older handshake as an ``elicitation/create`` request. ``accept`` decides, ``decline`` takes the
gate's reject action (none: the run waits), ``cancel`` leaves the run waiting; every decision
goes through :meth:`RunService.resume` (its checks, its exactly-once claim): an answer to a
request decided meanwhile elsewhere is refused and said so in the result. The result is where
the run is: the HTTP API's response of the job (status, output, the waiting request).

Refusals are JSON-RPC errors: ``-32602`` (invalid params) with signoff's ``code`` in ``data``
for anything the caller may fix or may not do (someone else's flow or job is not found, as over
HTTP), ``-32603`` for signoff's own trouble.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import AESGCMRequestStateCodec, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from signoff.engine.errors import NotResumable, SignoffError
from signoff.engine.secrets import deployment_key
from signoff.engine.models import Decision, Job, JobStatus, PendingRequest, User
from signoff.engine.settings import Settings
from signoff.service import RunService

from signoff.api.agui import response_schema
from signoff.api.errors import STATUS_BY_CODE, InvalidRequest
from signoff.api.errors import _jsonable as jsonable
from signoff.api.limits import ID_MAX_CHARS, REQUEST_ID_MAX_CHARS, string_problems
from signoff.api.models import human_request, workflow_response
from signoff.api.ratelimit import WriteBudget, check_write
from signoff.api.mcp import elicit

log = logging.getLogger("signoff.api.mcp")

# The caller of one MCP request: the user and the service to act for them (raises when the key
# no longer names anyone)
Caller = Callable[[Context], Awaitable[tuple[User, RunService]]]
# The write budget (SIGNOFF_WRITE_RATE) of the process that serves a request
Budget = Callable[[Context], WriteBudget]

STATE_TTL_SECONDS = 24 * 3600.0  # how long a person may take over a form before its answer is refused
ELICITATION_KEY = "decision"  # the key of the one input request of an InputRequiredResult
VIA = "mcp"


def refusal(err: SignoffError) -> MCPError:
    """A signoff error as the JSON-RPC error the client gets."""
    if STATUS_BY_CODE.get(err.code, 500) >= 500 and err.code != "UNAVAILABLE":
        log.error("MCP call: signoff error %s: %s", err.code, err.message, exc_info=err)
        return MCPError(types.INTERNAL_ERROR, "Internal error; see the server log", {"code": "INTERNAL_ERROR"})
    data = {k: v for k, v in jsonable(err.details).items() if v is not None}
    return MCPError(types.INVALID_PARAMS, err.message, {"code": err.code, **data})


def _check(value: Any, name: str, settings: Settings, *, max_chars: int | None) -> None:
    """The limits of the HTTP API on one argument (NUL, surrogates, length, depth)."""
    problems = string_problems(value, max_chars, (name,), max_depth=settings.max_json_depth)
    if problems:
        raise InvalidRequest("; ".join(f"{p['loc']}: {p['message']}" for p in problems), problems=problems)


def _result(data: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(data, default=str))],
                                structured_content=data)


def run_state(job: Job, **more: Any) -> dict[str, Any]:
    """Where the run is: the HTTP API's response of the job, and what to do next."""
    body = workflow_response(job).model_dump(mode="json", exclude_none=True)
    if job.status == JobStatus.suspended and job.pending is not None:
        body["next"] = "decide"
    elif not job.status.terminal:
        body["next"] = f"read signoff://runs/{job.job_id}"
    return {**body, **more}


class SignoffMcp:
    """The MCP server over a :data:`Caller` (see the module's docstring)."""

    def __init__(self, caller: Caller, settings: Settings, budget: Budget) -> None:
        self.caller = caller
        self.settings = settings
        self.budget = budget
        # the state of an elicitation (2026-07-28) is sealed with the deployment's key, so the
        # client's retry may reach any API replica, and bound to the user who was asked
        security = RequestStateSecurity(codec=_DeploymentKeyCodec(settings), ttl=STATE_TTL_SECONDS,
                                        bind_principal=_principal, audience="signoff")
        self.server = MCPServer(name="signoff", request_state_security=security, instructions=(
            "Run signoff flows and answer their human gates. run_flow starts a run; when it stops at a gate "
            "you are asked (elicitation) or get the waiting request to answer with decide."))
        add = self.server.tool
        add(name="list_flows", description="The flows you may run.", structured_output=False)(self.list_flows)
        add(name="run_flow", description="Run a flow with a text input; at a gate you are asked to decide "
            "(elicitation), else the waiting request is returned for decide.", structured_output=False)(self.run_flow)
        add(name="list_pending", description="The requests waiting for your decision.",
            structured_output=False)(self.list_pending)
        add(name="get_request", description="The request a run waits for, with the schema of its answer.",
            structured_output=False)(self.get_request)
        add(name="decide", description="Decide a run's waiting request: one of its allowed actions, with the "
            "values its fields ask for.", structured_output=False)(self.decide)
        add(name="stop_run", description="Stop one of your runs.", structured_output=False)(self.stop_run)
        self.server.resource("signoff://runs/{job_id}", name="run", description="A run: its status, output "
                             "and waiting request", mime_type="application/json")(self.read_run)

    # ---- tools ------------------------------------------------------------------------------

    async def list_flows(self, ctx: Context) -> types.CallToolResult:
        user, service = await self.caller(ctx)
        flows = await service.flows.all(user)
        return _result({"flows": [{"id": f.id, "name": f.name, "description": f.spec.get("description")}
                                  for f in flows]})

    async def run_flow(self, flow: str, input: str = "", session: str | None = None,
                       ctx: Context | None = None) -> types.CallToolResult | types.InputRequiredResult:
        assert ctx is not None
        user, service = await self.caller(ctx)
        try:
            check_write(self.budget(ctx), user.id)  # a submit or a decision: a write (SIGNOFF_WRITE_RATE)
            if ctx.request_state is not None:  # the client's retry with the answer (2026-07-28)
                return await self._answered(ctx, user, service)
            _check(flow, "flow", self.settings, max_chars=ID_MAX_CHARS)
            _check(input, "input", self.settings, max_chars=self.settings.max_string_chars)
            if session is not None:
                _check(session, "session", self.settings, max_chars=ID_MAX_CHARS)
            record = await service.flows.get(user, flow)
            job, _ = await service.submit(user, record, input_value=input, session_id=session or None, tweaks=None,
                                          idempotency_key=None, mode="background")
            return await self._until_asked(ctx, user, service, job.job_id)
        except SignoffError as err:
            raise refusal(err) from None

    async def list_pending(self, ctx: Context) -> types.CallToolResult:
        user, service = await self.caller(ctx)
        jobs = await service.pending_for(user)
        return _result({"pending": [{"job_id": j.job_id, "flow_id": j.flow_id,
                                     "request": _request(j.pending)} for j in jobs[:200] if j.pending]})

    async def _visible_job(self, ctx: Context, job_id: str) -> Job:
        """The caller's run ``job_id`` (its id bounded as the API's), or the protocol's refusal."""
        user, service = await self.caller(ctx)
        try:
            _check(job_id, "job_id", self.settings, max_chars=ID_MAX_CHARS)
            return await service.get_job(user, job_id)
        except SignoffError as err:
            raise refusal(err) from None

    async def get_request(self, job_id: str, ctx: Context) -> types.CallToolResult:
        job = await self._visible_job(ctx, job_id)
        pending = job.pending if job.status == JobStatus.suspended else None
        return _result({"job_id": job.job_id, "status": job.status.value, "request": _request(pending)})

    async def decide(self, job_id: str, request_id: str, action_id: str, values: dict[str, Any] | None = None,
                     ctx: Context | None = None) -> types.CallToolResult:
        assert ctx is not None
        user, service = await self.caller(ctx)
        try:
            check_write(self.budget(ctx), user.id)
            _check(job_id, "job_id", self.settings, max_chars=ID_MAX_CHARS)
            _check(request_id, "request_id", self.settings, max_chars=REQUEST_ID_MAX_CHARS)
            _check(action_id, "action_id", self.settings, max_chars=ID_MAX_CHARS)
            _check(values, "values", self.settings, max_chars=self.settings.max_string_chars)
            done = await service.resume(user, job_id, request_id, Decision(action_id=action_id, values=values),
                                        via=VIA)
            job = await service.get_job(user, job_id) if done.status == "vote_recorded" else \
                await self._settled(user, service, job_id)
        except SignoffError as err:
            raise refusal(err) from None
        if job is None:  # an approver of someone else's run: the rest of it is its owner's
            return _result({"job_id": job_id, "status": "resuming"})
        return _result(run_state(job, decision=done.status, votes=done.votes, required=done.required))

    async def stop_run(self, job_id: str, ctx: Context) -> types.CallToolResult:
        user, service = await self.caller(ctx)
        try:
            check_write(self.budget(ctx), user.id)
            _check(job_id, "job_id", self.settings, max_chars=ID_MAX_CHARS)
            job = await service.stop(user, job_id)
        except SignoffError as err:
            raise refusal(err) from None
        return _result(run_state(job))

    async def read_run(self, job_id: str, ctx: Context) -> str:
        return json.dumps(run_state(await self._visible_job(ctx, job_id)), default=str)

    # ---- run_flow's gates ---------------------------------------------------------------------

    async def _settled(self, user: User, service: RunService, job_id: str) -> Job | None:
        """The job once it paused or ended (or as it is after SIGNOFF_SYNC_TIMEOUT_SECONDS), None
        when it is not the caller's to follow (an approver's decision on someone else's run). The
        wait counts as one of the caller's live streams."""
        job = await service.get_job(user, job_id)
        if job.user_id != user.id:
            return None
        await service.wait_for_pause_or_end(job_id, self.settings.sync_timeout_seconds, user_id=user.id)
        return await service.get_job(user, job_id)

    async def _until_asked(self, ctx: Context, user: User, service: RunService,
                           job_id: str) -> types.CallToolResult | types.InputRequiredResult:
        """Follow the run until it ends or waits; at each gate ask the client's person (when it
        can be asked) and apply the answer. The tool's result is where the run is."""
        while True:
            job = await self._settled(user, service, job_id)
            assert job is not None  # the caller's own run
            pending = job.pending if job.status == JobStatus.suspended else None
            if pending is None:
                return _result(run_state(job))
            if not _can_elicit(ctx):  # the waiting request, for decide
                return _result(run_state(job, request=_request(pending)))
            params = types.ElicitRequestFormParams(message=elicit.message(pending),
                                                   requested_schema=elicit.requested_schema(pending))
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                state = json.dumps({"job_id": job.job_id, "request_id": pending.request_id})
                return types.InputRequiredResult(input_requests={ELICITATION_KEY: types.ElicitRequest(params=params)},
                                                 request_state=state)
            answer = await ctx.session.elicit_form(message=params.message, requested_schema=params.requested_schema,
                                                   related_request_id=ctx.request_id)
            outcome = await self._apply(user, service, job, pending, answer)
            if outcome.get("answer") != "applied":
                job = await service.get_job(user, job_id)
                return _result(run_state(job, request=_request(job.pending) if job.pending else None, **outcome))

    async def _answered(self, ctx: Context, user: User, service: RunService
                        ) -> types.CallToolResult | types.InputRequiredResult:
        """The retry of ``run_flow`` carrying the person's answer (the state was sealed by the SDK:
        it names the job and request this server asked about)."""
        try:
            state = json.loads(ctx.request_state or "")
            job_id, request_id = str(state["job_id"]), str(state["request_id"])
        except (ValueError, KeyError, TypeError):
            raise InvalidRequest("request_state is not one this server sent") from None
        job = await service.get_job(user, job_id)
        response = (ctx.input_responses or {}).get(ELICITATION_KEY)
        if not isinstance(response, types.ElicitResult):
            raise InvalidRequest(f"The retry carries no answer to the elicitation {ELICITATION_KEY!r}")
        pending = job.pending if job.status == JobStatus.suspended and job.waits_for(request_id) else None
        if pending is None:
            outcome = {"answer": "refused", "refused": {"code": NotResumable.code, "message":
                       f"Request {request_id!r} is no longer waiting: it was decided (or the run moved on) first"}}
        else:
            outcome = await self._apply(user, service, job, pending, response)
        if outcome.get("answer") != "applied":
            job = await service.get_job(user, job_id)
            return _result(run_state(job, request=_request(job.pending) if job.pending else None, **outcome))
        return await self._until_asked(ctx, user, service, job_id)

    async def _apply(self, user: User, service: RunService, job: Job, pending: PendingRequest,
                     answer: types.ElicitResult) -> dict[str, Any]:
        """The person's answer to a gate: ``{"answer": "applied" | "voted" | "waiting" | "refused", ...}``
        (anything but "applied" ends the tool call with the run as it is)."""
        if answer.action == "cancel":
            return {"answer": "waiting"}
        if answer.action == "decline":
            action = elicit.reject_action(pending)
            if action is None:
                return {"answer": "waiting", "note": "declined; the gate has no reject action, so the run waits"}
            decision = Decision(action_id=action)
        else:
            decision = elicit.decision_of(pending, answer.content)
            _check(decision.values, "values", self.settings, max_chars=self.settings.max_string_chars)
        try:
            done = await service.resume(user, job.job_id, pending.request_id, decision, via=VIA)
        except SignoffError as err:
            if STATUS_BY_CODE.get(err.code, 500) >= 500:
                raise
            return {"answer": "refused", "refused": {"code": err.code, "message": err.message}}
        if done.status == "vote_recorded":  # one vote of a quorum: the request waits for the others
            return {"answer": "voted", "votes": done.votes, "required": done.required}
        return {"answer": "applied"}


class _DeploymentKeyCodec:
    """The SDK's AES-256-GCM codec under the deployment's key, read at the first elicitation
    rather than when the app is built (a home gets a key file only once something needs one)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._codec: AESGCMRequestStateCodec | None = None

    def _inner(self) -> AESGCMRequestStateCodec:
        if self._codec is None:
            self._codec = AESGCMRequestStateCodec([deployment_key(self.settings)])
        return self._codec

    def seal(self, payload: bytes) -> str:
        return self._inner().seal(payload)

    def unseal(self, token: str) -> bytes:
        return self._inner().unseal(token)


def _principal(ctx: Any) -> str | None:
    """Who a sealed request state is for: the user the HTTP request's key names (stdio: its one
    user, unbound)."""
    scope = getattr(ctx.request, "scope", None) or {}
    user = scope.get("state", {}).get("user")
    return user.id if user is not None else None


def _can_elicit(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and caps.elicitation is not None


def _request(pending: PendingRequest | None) -> dict[str, Any] | None:
    """A waiting request as the HTTP API shows it, with the JSON Schema of its decision."""
    public = human_request(pending)
    if public is None or pending is None:
        return None
    return {**public.model_dump(mode="json"), "decision_schema": response_schema(pending)}
