"""Workflow runs (DESIGN §6, Langflow v2 compatible): submit, status, stop, resume, pending, delete."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from signoff.engine.errors import JobNotFound, NoPendingRequest, SignoffError
from signoff.engine.store.base import Store
from signoff.service import batch
from signoff.service.backend import Resumed
from signoff.service.batch import BatchItem

from signoff.api.deps import CurrentUser, FlowsDep, ServiceDep, SettingsDep, StoreDep, valid_id, visible_job
from signoff.api.errors import error_answer, printable
from signoff.api.limits import check_body
from signoff.api.ratelimit import paced_writes
from signoff.api.models import (
    RESUME_BATCH_MAX_ITEMS,
    ErrorBody,
    JobPublic,
    PendingItem,
    ResumeBatchRequest,
    ResumeBatchResponse,
    ResumeBatchResult,
    ResumeRequest,
    ResumeResponse,
    StopRequest,
    StopResponse,
    WorkflowCreate,
    WorkflowResponse,
    HumanRequest,
    error_responses,
    human_request,
    sse_content,
    job_public,
    pending_item,
    workflow_response,
)
from signoff.api.sse import ACTIVE, SSE_RESPONSES, job_events, key_still_sees, sse_response
from signoff.engine.models import Job, JobStatus, User

router = APIRouter(prefix="/api/v2/workflows", tags=["workflows"])

_SUBMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "background: the job; sync: the response (the job when still running after `timeout`); "
                       "stream: Server-Sent Events",
        "content": sse_content(),
    },
    **error_responses({404: "`FLOW_NOT_FOUND`: no such flow you may run",
                       409: "`STORAGE_LIMIT`: you keep SIGNOFF_USER_MAX_STORED_BYTES in signoff",
                       422: "`INVALID_REQUEST` (with `problems`); `IDEMPOTENCY_MISMATCH`: the idempotency key was "
                            "used with a different request",
                       429: "`TOO_MANY_STREAMS` (mode `stream`): the user holds SIGNOFF_MAX_STREAMS_PER_USER live "
                            "streams; `RUNS_IN_FLIGHT_LIMIT`: the user has SIGNOFF_USER_MAX_RUNS_IN_FLIGHT runs queued "
                            "or running (`Retry-After` says when to try again)",
                       503: "`UNAVAILABLE`: Temporal is not reachable"}, body=True),
}


def _key(request: Request) -> str:
    return request.headers.get("x-api-key", "").strip()


def request_hash(body: WorkflowCreate) -> str:
    """A hash of the request as it means (every field but the key and the sync wait ``timeout``,
    which a retry may lengthen; defaults filled in, keys sorted): the same key with another body
    is IDEMPOTENCY_MISMATCH."""
    canonical = json.dumps(body.model_dump(mode="json", exclude={"idempotency_key", "timeout"}), sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _status_body(job: Job) -> JobPublic | WorkflowResponse:
    return workflow_response(job) if job.status == JobStatus.completed else job_public(job)


@router.post("", response_model=JobPublic | WorkflowResponse, responses=_SUBMIT_RESPONSES)
async def submit(
    body: WorkflowCreate, request: Request, store: StoreDep, service: ServiceDep, settings: SettingsDep,
    user: CurrentUser, flows: FlowsDep,
):
    """Run a flow. `background` returns the job, `sync` waits for the end or the first pause,
    `stream` returns the run's events as SSE until the end or a pause."""
    check_body(body, settings, text=("input_value", "tweaks"))
    flow = await flows.get(user, body.flow_id)
    timeout = body.timeout or settings.sync_timeout_seconds
    if body.mode == "stream":
        service.feed.check(user.id)  # 429 TOO_MANY_STREAMS before the run is submitted
    asked = dict(input_value=body.input_value, session_id=body.session_id, tweaks=body.tweaks,
                 idempotency_key=body.idempotency_key,
                 request_hash=request_hash(body) if body.idempotency_key else None)
    if body.mode == "sync":
        job = await service.submit_sync(user, flow, timeout=timeout, **asked)
        # still running after `timeout`: the job (with its links to follow it), as in background
        return job_public(job) if job.status in ACTIVE else workflow_response(job)
    job, _created = await service.submit(user, flow, mode=body.mode, **asked)
    if body.mode == "background":
        return job_public(job)
    stream = job_events(store, service.feed, job.job_id, user_id=user.id)
    allowed = key_still_sees(store, _key(request), user, job.job_id)
    return sse_response(stream, allowed, settings=settings, feed=service.feed, user_id=user.id)


@router.get("", response_model=JobPublic | WorkflowResponse,
            responses=error_responses({404: "`JOB_NOT_FOUND` (also any malformed id)", 422: "`INVALID_REQUEST`: no `job_id`"}))
async def status_by_query(
    store: StoreDep, user: CurrentUser,
    job_id: Annotated[str, Query(description="a malformed or unknown id is a 404, as in the path form")],
):
    """The response when completed, else the job with its status, errors and human_request."""
    return _status_body(await visible_job(store, user, job_id))


@router.post("/stop", response_model=StopResponse,
             responses=error_responses({403: "`FORBIDDEN`: an approver of the run, not its owner",
                                        404: "`JOB_NOT_FOUND` (also any malformed id)", 422: None,
                                        503: "`UNAVAILABLE`: Temporal is not reachable"}, body=True))
async def stop(body: StopRequest, service: ServiceDep, settings: SettingsDep, user: CurrentUser) -> StopResponse:
    """Stop a job. `status` is what the job really is afterwards."""
    check_body(body, settings)
    job = await service.stop(user, body.job_id)
    if job.status == JobStatus.cancelled:
        message = "Job cancelled"
    else:
        message = f"Job already {job.status.value}; nothing to stop" if job.status.terminal else f"Job is {job.status.value}"
    return StopResponse(job_id=job.job_id, status=job.status, message=message)


@router.get("/pending", response_model=list[PendingItem], responses=error_responses({422: None}))
async def list_pending(
    service: ServiceDep, user: CurrentUser, flow_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None
) -> list[PendingItem]:
    """What waits for the caller to decide: their own runs' requests and the ones assigned to
    them (approvers, groups), newest first."""
    if flow_id is not None and not valid_id(flow_id):
        return []
    return [pending_item(j) for j in await service.pending_for(user, flow_id)]


@router.get("/{job_id}", response_model=JobPublic | WorkflowResponse,
            responses=error_responses({404: "`JOB_NOT_FOUND` (also any malformed id)"}))
async def get_status(job_id: str, store: StoreDep, user: CurrentUser):
    """The response when completed, else the job with its status, errors and human_request."""
    return _status_body(await visible_job(store, user, job_id))


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=error_responses({403: "`FORBIDDEN`: an approver or voter of the run, not its owner",
                                          404: "`JOB_NOT_FOUND` (also any malformed id, and a run deleted already)",
                                          409: "`RUN_NOT_ENDED`: the run is queued, running or waiting (stop it "
                                               "first), or was just stopped and its workflow is still being let go "
                                               "of (try again in a few seconds)"}))
async def delete_run(job_id: str, service: ServiceDep, user: CurrentUser) -> Response:
    """Delete an ended run of yours with everything of it (events, messages, checkpoints, trace,
    blobs): what it kept is given back to your count of stored bytes (SIGNOFF_USER_MAX_STORED_BYTES)."""
    await service.delete_run(user, job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{job_id}/pending", response_model=HumanRequest,
            responses=error_responses({404: "`JOB_NOT_FOUND`, `NO_PENDING_REQUEST`"}))
async def get_pending(job_id: str, store: StoreDep, user: CurrentUser) -> HumanRequest:
    """The decision this job waits for."""
    job = await visible_job(store, user, job_id)
    req = human_request(job.pending) if job.status == JobStatus.suspended else None
    if req is None:
        raise NoPendingRequest(f"Job {job_id} is {job.status.value}, not waiting for a decision", job_id=job_id)
    return req


@router.post("/{job_id}/resume", response_model=ResumeResponse,
             responses=error_responses({403: "`FORBIDDEN`: you may no longer execute the flow; `NOT_AN_APPROVER` "
                                             "(the job stays suspended)",
                                        404: "`JOB_NOT_FOUND`",
                                        409: "`NOT_RESUMABLE`: stale request id, lost claim, job not suspended; "
                                             "`ALREADY_VOTED`",
                                        422: "`INVALID_REQUEST`, `INVALID_DECISION`, `INVALID_VALUES` (one problem "
                                             "per field; the job stays suspended)",
                                        503: "`UNAVAILABLE`: no worker took the decision in time"}, body=True))
async def resume(job_id: str, body: ResumeRequest, service: ServiceDep, store: StoreDep, settings: SettingsDep,
                 user: CurrentUser) -> ResumeResponse:
    """Answer the pending request (or cast one vote of a quorum): 404, 403 (no execute
    permission, not an approver), 422 (action, values), 409 (stale, already voted), in that
    order."""
    check_body(body, settings, text=("decision",))
    resumed = await service.resume(user, job_id, body.request_id, body.decision)
    return await _resumed(store, user, job_id, resumed)


async def _resumed(store: Store, user: User, job_id: str, resumed: Resumed) -> ResumeResponse:
    """The answer to a decision that was applied (or a vote recorded), with the run as it is now:
    completed by the decision's own step, as that step answered it (nothing read); else read."""
    if resumed.completed is not None:
        run: JobPublic | WorkflowResponse | None = _status_body(resumed.completed)
    else:
        try:  # the decider took part (recorded with the decision): they see it
            run = _status_body(await visible_job(store, user, job_id))
        except JobNotFound:  # deleted meanwhile
            run = None
    if resumed.status == "vote_recorded":
        return ResumeResponse(job_id=job_id, status="vote_recorded", votes=resumed.votes, required=resumed.required,
                              run=run)
    return ResumeResponse(job_id=job_id, run=run)


@router.post("/resume-batch", response_model=ResumeBatchResponse,
             responses=error_responses({422: f"`INVALID_REQUEST`: not a list of 1 to {RESUME_BATCH_MAX_ITEMS} items "
                                             "(problem type `too_short`, `too_long`), or an item that is not a "
                                             "decision's shape (each item's limits are that item's own 422)"},
                                       body=True))
async def resume_batch(body: ResumeBatchRequest, service: ServiceDep, store: StoreDep, settings: SettingsDep,
                       user: CurrentUser, request: Request) -> ResumeBatchResponse:
    """Answer many pending requests in one call (DESIGN §17): each item is a decision of its own,
    with its own checks and claim, answered in `results` (in the items' order) as its own
    `POST /{job_id}/resume` would be: 200 with the run, or that call's error (404, 403, 422, 409,
    ...; an item for a run you may not decide does not stop the others). Each item is one write
    of SIGNOFF_WRITE_RATE: a batch past the burst is paced at the rate for a few seconds, and
    its items beyond that are 429 `RATE_LIMITED`. SIGNOFF_RESUME_BATCH_CONCURRENCY of them are
    under way at once."""
    items: list[BatchItem | SignoffError] = []
    for item in body.items:
        try:
            check_body(item, settings, text=("decision",))
            items.append(BatchItem(item.job_id, item.request_id, item.decision))
        except SignoffError as err:
            err.details.setdefault("job_id", item.job_id)
            items.append(err)
    outcomes = await batch.resume_batch(service.resume, user, items, concurrency=settings.resume_batch_concurrency,
                                        admit=paced_writes(request.app.state.write_buckets, user.id))
    results = []
    for item, outcome in zip(body.items, outcomes):
        answer: ResumeResponse | ErrorBody
        if isinstance(outcome, Resumed):
            status, answer = 200, await _resumed(store, user, item.job_id, outcome)
        else:
            status, error = error_answer(outcome)
            answer = ErrorBody.model_validate(error)
        # the ids as sent, but never a NUL or a lone surrogate (refused above; no answer can carry one)
        results.append(ResumeBatchResult(job_id=printable(item.job_id), request_id=printable(item.request_id),
                                         status_code=status, body=answer))
    return ResumeBatchResponse(results=results, applied=sum(r.status_code == 200 for r in results))


@router.get("/{job_id}/events", response_class=StreamingResponse, responses={
    200: {**SSE_RESPONSES[200], "content": sse_content()},
    **error_responses({404: "`JOB_NOT_FOUND`", 422: "`INVALID_REQUEST`: a bad `after` or `Last-Event-ID`",
                       429: "`TOO_MANY_STREAMS`: the user holds SIGNOFF_MAX_STREAMS_PER_USER live streams"})})
async def events(
    job_id: str,
    request: Request,
    store: StoreDep,
    service: ServiceDep,
    user: CurrentUser,
    after: Annotated[int | None, Query(ge=0, description="replay after this seq (like Last-Event-ID)")] = None,
):
    """The job's events as SSE: replays after Last-Event-ID, tails while queued or in
    progress, closes at a pause or the end."""
    await visible_job(store, user, job_id)
    after_seq = after or 0
    last = request.headers.get("last-event-id")
    if last is not None and last.strip():
        try:
            after_seq = max(after_seq, int(last.strip()))
        except ValueError:
            from signoff.api.errors import InvalidRequest

            raise InvalidRequest("Last-Event-ID must be the integer seq of the last event received") from None
    service.feed.check(user.id)  # 429 TOO_MANY_STREAMS before the stream starts
    stream = job_events(store, service.feed, job_id, after_seq=after_seq, user_id=user.id)
    allowed = key_still_sees(store, _key(request), user, job_id)
    return sse_response(stream, allowed, settings=request.app.state.settings, feed=service.feed, user_id=user.id)
