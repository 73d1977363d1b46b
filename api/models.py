"""Request and response models of the HTTP contract (DESIGN §6).

These are separate from the stored records in engine/models.py: a response is built from a
record by an explicit function here, so internal state (checkpoints, claim tokens, the raw
request, workflow state) never leaks out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from signoff.engine.models import Decision, FlowRecord, Job, JobStatus, PendingRequest

from signoff.api.limits import ID_MAX_CHARS, REQUEST_ID_MAX_CHARS
from signoff.service.batch import MAX_ITEMS as RESUME_BATCH_MAX_ITEMS

ID = Field(min_length=1, max_length=ID_MAX_CHARS)
SHORT = ID_MAX_CHARS


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- errors ------------------------------------------------------------------------------


class ErrorProblem(BaseModel):
    """One problem of a request or a flow: ``{loc, message, type}`` for a request (where in the
    body, what, a machine-readable kind), ``{message, where?, node?, edge?}`` for a flow."""

    model_config = ConfigDict(extra="allow")

    message: str
    loc: str | None = Field(None, description="where in the request: `body.tweaks.ask.text`, `query.flow_id`")
    type: str | None = Field(None, description="e.g. string_too_long, string_nul, string_surrogate, json_too_deep, "
                                              "number_not_finite, missing, extra_forbidden")
    where: str | None = Field(None, description="where in the flow: `nodes.2.params.text`")
    node: str | None = Field(None, description="the node the problem is about")
    edge: str | None = Field(None, description="the edge the problem is about (`a.out->b.in`)")


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    error: str = Field(description="the error's class, e.g. JobNotFound")
    code: str = Field(description="machine-readable: UNAUTHORIZED, FORBIDDEN, JOB_NOT_FOUND, FLOW_NOT_FOUND, "
                                  "NOT_RESUMABLE, BODY_TOO_LARGE, INVALID_REQUEST, FLOW_INVALID, ...")
    message: str = Field(description="what went wrong and what to fix")
    job_id: str | None = Field(None, description="the job the error is about, when there is one")
    problems: list[ErrorProblem] | None = Field(None, description="INVALID_REQUEST and FLOW_INVALID: every problem")
    checks: dict[str, str] | None = Field(None, description="UNAVAILABLE from /health: each dependency, `ok` or "
                                                           "`down: ...`")
    retry_after: int | None = Field(None, description="RATE_LIMITED, RUNS_IN_FLIGHT_LIMIT: seconds to wait before sending again (also "
                                                      "the Retry-After header)")


class ErrorBody(BaseModel):
    """Every error answer of the API (DESIGN §6): ``{"detail": {"error", "code", "message", "job_id"?,
    "problems"?}}``."""

    detail: ErrorDetail


SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Event of the job's log: `id: {seq}` and `data: {\"event\", \"data\", \"seq\"}` "
                   "(JSON); comments (`: keep-alive`) are not events.",
    "properties": {
        "id": {"type": "string", "description": "the event's `seq`, gap-free per job from 1 (send it back as "
                                               "Last-Event-ID)"},
        "event": {"type": "string", "description": "not set: the event's name is in `data`"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["event", "data", "seq"],
                "properties": {"event": {"type": "string", "description": "human_input_required, "
                                         "human_input_decision, run_cancelled, run_failed, end, ..."},
                               "data": {"type": "object"}, "seq": {"type": "integer", "minimum": 1}},
            },
        },
    },
    "required": ["data"],
}


def sse_content() -> dict[str, Any]:
    """OpenAPI ``content`` of an answer that is the job's events as Server-Sent Events (an OpenAPI
    3.1 ``schema`` of an event stream describes each event)."""
    return {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}}


_ERROR_DESCRIPTIONS = {
    401: "`UNAUTHORIZED`: no valid `x-api-key` (checked before the body is read)",
    403: "`FORBIDDEN`",
    404: "`NOT_FOUND`",
    409: "`NOT_RESUMABLE`",
    413: "`BODY_TOO_LARGE`: the body is over SIGNOFF_MAX_BODY_BYTES",
    422: "`INVALID_REQUEST` (with `problems`)",
    503: "`UNAVAILABLE`: Temporal or the database is not reachable",
}


def error_responses(statuses: dict[int, str | None], *, api: bool = True, body: bool = False
                    ) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route for OpenAPI (``responses=``), each with :class:`ErrorBody`:
    ``statuses`` maps a status to the codes it carries there (None: the default text); ``api``
    adds 401 (every ``/api`` route), ``body`` adds 413 (every route that takes a body). Declaring
    422 also keeps FastAPI from adding its own validation error shape."""
    wanted: dict[int, str | None] = {}
    if api:
        wanted[401] = None
    if body:
        wanted[413] = None
    wanted.update(statuses)
    return {status: {"model": ErrorBody, "description": text or _ERROR_DESCRIPTIONS.get(status, "error")}
            for status, text in sorted(wanted.items())}


# ---- flows -------------------------------------------------------------------------------


class FlowSummary(BaseModel):
    id: str
    name: str
    version: int
    created_at: datetime
    updated_at: datetime
    owner_id: str


class FlowPublic(FlowSummary):
    spec: dict[str, Any]


class ShareCreate(_Request):
    user: str = Field(min_length=1, max_length=SHORT, description="User name or user id to grant")
    actions: list[Literal["execute"]] = Field(default_factory=lambda: ["execute"], min_length=1, max_length=5)


class SharePublic(BaseModel):
    flow_id: str
    user_id: str
    actions: list[str]


def flow_summary(f: FlowRecord) -> FlowSummary:
    return FlowSummary(id=f.id, name=f.name, version=f.version, created_at=f.created_at, updated_at=f.updated_at, owner_id=f.owner_id)


def flow_public(f: FlowRecord) -> FlowPublic:
    return FlowPublic(**flow_summary(f).model_dump(), spec=f.spec)


# ---- workflows ---------------------------------------------------------------------------


class WorkflowCreate(_Request):
    flow_id: str = ID
    input_value: str = Field("", description="at most SIGNOFF_MAX_STRING_CHARS characters (default 1,000,000)")
    session_id: str | None = Field(None, min_length=1, max_length=SHORT)
    mode: Literal["background", "sync", "stream"] = "background"
    tweaks: dict[str, dict[str, Any]] | None = Field(
        None, description="{node_id: {param: value}}; strings at most SIGNOFF_MAX_STRING_CHARS characters")
    idempotency_key: str | None = Field(None, min_length=1, max_length=SHORT)
    timeout: float | None = Field(None, gt=0, le=3600, description="sync mode: seconds to wait (default 60)")


class ResumeRequest(_Request):
    request_id: str = Field(min_length=1, max_length=REQUEST_ID_MAX_CHARS)
    decision: Decision


class StopRequest(_Request):
    # no length bounds: a malformed job id is a 404 like in every other job route (DESIGN §6);
    # the body limit bounds it and the id check rejects it before any lookup
    job_id: str = Field(description="a malformed or unknown id is a 404 JOB_NOT_FOUND")


class OptionPublic(BaseModel):
    action_id: str
    label: str


class HumanRequest(BaseModel):
    request_id: str
    kind: Literal["node_input", "tool_approval"]
    prompt: str
    options: list[OptionPublic]
    allowed_decisions: list[str]
    timeout_seconds: float
    fallback_action: str | None
    paused_at: datetime
    tool: dict[str, Any] | None = None
    fields: dict[str, dict[str, Any]] | None = Field(
        default=None, description="The JSON Schema of each decision's `values`, by action id (DESIGN §9 `fields`)")


def human_request(p: PendingRequest | None) -> HumanRequest | None:
    if p is None:
        return None
    return HumanRequest(
        request_id=p.request_id,
        kind=p.kind,
        prompt=p.prompt,
        options=[OptionPublic(action_id=o.action_id, label=o.label) for o in p.options],
        allowed_decisions=list(p.allowed_decisions),
        timeout_seconds=p.timeout_seconds,
        fallback_action=p.fallback_action,
        paused_at=p.paused_at,
        tool=p.tool,
        fields=p.fields,
    )


class JobLinks(BaseModel):
    status: str
    events: str
    stop: str


class JobPublic(BaseModel):
    object: Literal["job"] = "job"
    job_id: str
    flow_id: str
    session_id: str | None
    status: JobStatus
    created_at: datetime
    updated_at: datetime
    links: JobLinks
    errors: list[dict[str, Any]] = Field(default_factory=list)
    human_request: HumanRequest | None = None


class OutputPublic(BaseModel):
    reason: str | None = None
    text: str | None = None
    source: str | None = None


class VertexOutputPublic(BaseModel):
    type: str | None = None
    status: str | None = None
    display_name: str | None = None
    content: Any = None


class WorkflowResponse(BaseModel):
    object: Literal["response"] = "response"
    status: JobStatus
    job_id: str
    flow_id: str
    session_id: str | None
    output: OutputPublic | None = None
    outputs: dict[str, VertexOutputPublic] = Field(default_factory=dict)
    errors: list[dict[str, Any]] = Field(default_factory=list)
    human_request: HumanRequest | None = None


def _errors(job: Job) -> list[dict[str, Any]]:
    if not job.error:
        return []
    err = job.error
    return [{k: v for k, v in err.items() if k in ("error", "type", "vertex_id", "message", "code", "reason")}]


def job_public(job: Job) -> JobPublic:
    base = f"/api/v2/workflows/{job.job_id}"
    return JobPublic(
        job_id=job.job_id,
        flow_id=job.flow_id,
        session_id=job.session_id,
        status=job.status,
        created_at=job.created_at,
        updated_at=job.updated_at,
        links=JobLinks(status=base, events=f"{base}/events", stop="/api/v2/workflows/stop"),
        errors=_errors(job),
        human_request=human_request(job.pending) if job.status == JobStatus.suspended else None,
    )


def workflow_response(job: Job) -> WorkflowResponse:
    result = job.result or {}
    out = result.get("output")
    outputs_raw = result.get("outputs") or {}
    outputs = {}
    if isinstance(outputs_raw, dict):
        for vid, o in outputs_raw.items():
            if isinstance(o, dict):
                outputs[str(vid)] = VertexOutputPublic(
                    type=o.get("type"), status=o.get("status"), display_name=o.get("display_name"), content=o.get("content")
                )
            else:
                outputs[str(vid)] = VertexOutputPublic(content=o)
    output = None
    if isinstance(out, dict):
        output = OutputPublic(reason=out.get("reason"), text=out.get("text"), source=out.get("source"))
    elif isinstance(out, str):
        output = OutputPublic(reason="completed", text=out)
    return WorkflowResponse(
        status=job.status,
        job_id=job.job_id,
        flow_id=job.flow_id,
        session_id=job.session_id,
        output=output,
        outputs=outputs,
        errors=_errors(job),
        human_request=human_request(job.pending) if job.status == JobStatus.suspended else None,
    )


class StopResponse(BaseModel):
    job_id: str
    status: JobStatus
    message: str


class ResumeResponse(BaseModel):
    """``resuming``: the decision was applied and the run goes on; ``vote_recorded``: one vote of
    a request that needs several approvers (``votes`` of ``required`` so far). ``run``: where the
    run is now, as ``GET /api/v2/workflows/{job_id}`` answers it, read once the decision was
    applied. The decision's own step runs the flow on to its next pause or its end when no layer
    on the way dials out, so a run that ends there answers ``completed`` with its output (or
    ``suspended`` at its next gate) and the client needs no status read; otherwise the run is
    ``in_progress``: follow it as any job."""

    job_id: str
    status: Literal["resuming", "vote_recorded"] = "resuming"
    votes: int | None = None
    required: int | None = None
    run: JobPublic | WorkflowResponse | None = None

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        # votes and required only for a vote; ``run`` keeps its nulls, as the status read has them.
        # No return annotation: with one, the response's OpenAPI schema would be that type's.
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in ("votes", "required", "run")}


class ResumeBatchItem(ResumeRequest):
    # unbounded like StopRequest's: a malformed job id is that item's 404, as in the path form
    job_id: str = Field(description="a malformed or unknown id is that item's 404 JOB_NOT_FOUND")


class ResumeBatchRequest(_Request):
    items: list[ResumeBatchItem] = Field(min_length=1, max_length=RESUME_BATCH_MAX_ITEMS, description=(
        f"at most {RESUME_BATCH_MAX_ITEMS}; each a decision of its own, as `POST /api/v2/workflows/{{job_id}}/resume` "
        "takes it"))


class ResumeBatchResult(BaseModel):
    """One item's answer, as its own ``POST /resume`` would have given it: ``status_code`` 200 and
    ``body`` the :class:`ResumeResponse`, or the error's status and its body (``{"detail":
    {"error", "code", "message", ...}}``)."""

    job_id: str
    request_id: str
    status_code: int
    body: ResumeResponse | ErrorBody


class ResumeBatchResponse(BaseModel):
    """One result per item, in the items' order; ``applied``: how many answered 200."""

    results: list[ResumeBatchResult]
    applied: int


class PendingItem(BaseModel):
    job_id: str
    flow_id: str
    session_id: str | None
    created_at: datetime
    request_id: str
    kind: str
    prompt: str
    options: list[OptionPublic]
    allowed_decisions: list[str]
    timeout_seconds: float
    fallback_action: str | None
    paused_at: datetime
    fields: dict[str, dict[str, Any]] | None = None


def pending_item(job: Job) -> PendingItem:
    request = human_request(job.pending)
    assert request is not None
    return PendingItem(
        job_id=job.job_id,
        flow_id=job.flow_id,
        session_id=job.session_id,
        created_at=job.created_at,
        **request.model_dump(exclude={"tool"}),
    )


# ---- monitor -----------------------------------------------------------------------------


class MessagePublic(BaseModel):
    id: str
    session_id: str
    flow_id: str | None
    job_id: str | None
    sender: str
    sender_name: str
    text: str
    kind: str
    card: dict[str, Any] | None
    created_at: datetime


class SpanNode(BaseModel):
    span_id: str
    parent_id: str | None
    name: str
    type: str
    start_time: datetime
    end_time: datetime | None
    status: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    attributes: dict[str, Any]
    children: list["SpanNode"] = Field(default_factory=list)


class TracePublic(BaseModel):
    trace_id: str
    run_id: str
    flow_id: str | None
    span_count: int
    spans: list[SpanNode]


class TraceSummary(BaseModel):
    trace_id: str
    run_id: str | None = None
    flow_id: str | None = None
    name: str | None = None
    status: str | None = None  # ok | error | unset (still running or suspended)
    start_time: datetime | None = None
    end_time: datetime | None = None  # None while the run has not ended
    duration_ms: float | None = None  # end_time - start_time, once ended
    run_status: str | None = None  # the job's status (completed, suspended, failed, ...)


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    store: str
    temporal: str


class Liveness(BaseModel):
    status: Literal["ok"] = "ok"
