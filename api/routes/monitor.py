"""Monitor: chat history of a session and traces of runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from signoff.engine.errors import JobNotFound
from signoff.engine.models import SpanRecord

from signoff.api.limits import ID_MAX_CHARS, NoNul
from signoff.api.deps import CurrentUser, StoreDep, valid_id, visible_job
from signoff.api.models import MessagePublic, SpanNode, TracePublic, TraceSummary, error_responses
from signoff.service.access import recent_runs

router = APIRouter(prefix="/api/v1/monitor", tags=["monitor"])


@router.get("/messages", response_model=list[MessagePublic], responses=error_responses({422: None}))
async def messages(
    store: StoreDep,
    user: CurrentUser,
    session_id: Annotated[str, Query(min_length=1, max_length=ID_MAX_CHARS), NoNul],
    flow_id: Annotated[str | None, Query(min_length=1, max_length=ID_MAX_CHARS), NoNul] = None,
) -> list[MessagePublic]:
    """A session's chat history; gate cards carry `submitted_action`, `superseded` (a new run
    replaced theirs) or `stopped` (their run was stopped)."""
    owners: dict[str, bool] = {}
    out = []
    for m in await store.list_messages(session_id, flow_id=flow_id):
        if m.job_id is None:
            continue
        if m.job_id not in owners:
            job = await store.get_job(m.job_id)
            owners[m.job_id] = job is not None and job.user_id == user.id
        if owners[m.job_id]:
            out.append(MessagePublic(**m.model_dump(include=set(MessagePublic.model_fields))))
    return out


def span_tree(spans: list[SpanRecord]) -> list[SpanNode]:
    nodes = {
        s.span_id: SpanNode(**s.model_dump(include=set(SpanNode.model_fields) - {"children"}))
        for s in sorted(spans, key=lambda s: (s.start_time, s.span_id))
    }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.parent_id) if node.parent_id else None
        if parent is not None and parent is not node:
            parent.children.append(node)
        else:
            roots.append(node)
    return roots


@router.get("/traces", response_model=list[TraceSummary], responses=error_responses({422: None}))
async def list_traces(
    store: StoreDep,
    user: CurrentUser,
    flow_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[TraceSummary]:
    """Recent traces of the caller's runs (optionally of one flow), newest first, with status and duration."""
    if flow_id is not None and not valid_id(flow_id):
        return []
    out = []
    # filtered to the caller's runs in the query, before the limit
    for row, job in await recent_runs(store, user, flow_id=flow_id, limit=limit):
        summary = TraceSummary(**{k: row.get(k) for k in TraceSummary.model_fields if k in row})
        if summary.start_time is not None and summary.end_time is not None:
            summary.duration_ms = round((summary.end_time - summary.start_time).total_seconds() * 1000, 3)
        summary.run_status = job.status.value
        out.append(summary)
    return out


@router.get("/traces/{run_id}", response_model=TracePublic,
            responses=error_responses({404: "`JOB_NOT_FOUND`: no such run of yours, or no trace recorded yet"}))
async def get_trace(run_id: str, store: StoreDep, user: CurrentUser) -> TracePublic:
    """The run's span tree (the trace id is the run id, which is the job id)."""
    job = await visible_job(store, user, run_id)
    spans = await store.get_trace(job.run_id)
    if not spans and job.run_id != job.job_id:
        spans = await store.get_trace(job.job_id)
    if not spans:
        raise JobNotFound(f"No trace recorded for run {run_id} yet", job_id=job.job_id)
    return TracePublic(trace_id=spans[0].trace_id, run_id=job.run_id, flow_id=job.flow_id, span_count=len(spans), spans=span_tree(spans))
