"""A run's page (``/runs/{job}``): its flow drawn with each vertex's state, its requests and
what became of them, its chat history, span timeline and event log; its live stream; and the
stop button (a run going) and the delete button (a run ended: its owner's only)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from signoff.engine.models import JobStatus
from signoff.service.access import run_messages, visible_job

from signoff.api.pages import formatting, graph, live, timeline, views
from signoff.api.pages.card import card_url
from signoff.api.pages.page import Page, PageContext, live_response, page_router, read_form, with_count
from signoff.api.pages.render import render

router = page_router()


@router.get("/runs/{job_id}")
async def run_page(request: Request, job_id: str, page: PageContext = Page) -> Response:
    job = await visible_job(page.store, page.user, job_id)
    store = page.store
    names = views.Names(store)
    flow = await names.flow(job.flow_id, job.flow_version) or await names.flow(job.flow_id)
    events = await store.read_events(job_id, limit=100_000)
    spans = await store.get_trace(job.run_id)
    if not spans and job.run_id != job.job_id:
        spans = await store.get_trace(job.job_id)
    drawn = graph.layout(flow.spec if flow else {}, graph.node_states(job, spans))
    rows, total = timeline.span_rows(spans)
    requests = [v for rid in views.request_ids_of(events)
                if (v := await views.request_view(store, names, job, rid, events)) is not None]
    if job.pending is not None and job.status == JobStatus.suspended and \
            job.pending.request_id not in {v.request.request_id for v in requests}:
        current = await views.request_view(store, names, job, job.pending.request_id, events)
        if current is not None:
            requests.append(current)
    user_names = {uid: await names.user(uid) for s in spans
                  if s.type == "gate" and (uid := str(s.attributes.get("signoff.decided_by") or ""))}
    settings = request.app.state.settings
    ui = settings.effective_temporal_ui_url
    temporal_url = f"{ui}/namespaces/{quote(settings.temporal_namespace, safe='')}/workflows/" \
                   f"{quote(job.job_id, safe='')}" if ui and job.request.get("runner", "temporal") == "temporal" else None
    await with_count(request, page)
    return render(request, "run.html", job=job, flow=flow, flow_name=flow.name if flow else job.flow_id,
                  owner_name=await names.user(job.user_id), graph=drawn, spans=rows, trace_total=total,
                  events=await timeline.event_views(names, events), requests=requests,
                  messages=await run_messages(store, page.user, job), temporal_url=temporal_url,
                  duration=formatting.run_duration(job), output=formatting.output_text(job),
                  last_seq=events[-1].seq if events else 0, card_url=card_url, mine=job.user_id == page.user.id,
                  input_value=str(job.request.get("input_value") or ""), user_names=user_names)


@router.get("/runs/{job_id}/live")
async def run_live(request: Request, job_id: str, page: PageContext = Page, seq: int = 0,
                   status: str | None = None) -> Response:
    await visible_job(page.store, page.user, job_id)
    page.service.feed.check(page.user.id)
    stream = live.run_stream(page.store, page.service.feed, job_id, after_seq=max(0, seq), status=status,
                             user_id=page.user.id)
    return live_response(request, page, stream, job_id)


@router.post("/runs/{job_id}/stop")
async def stop_run(request: Request, job_id: str, page: PageContext = Page) -> Response:
    await read_form(request, page)
    await page.service.stop(page.user, job_id)
    return RedirectResponse(f"/runs/{quote(job_id, safe='')}", status_code=303)


@router.post("/runs/{job_id}/delete")
async def delete_run(request: Request, job_id: str, page: PageContext = Page) -> Response:
    """The owner's ended run deleted with all of it (RunService.delete_run: an approver is refused,
    a run not ended is 409), then the history, where it no longer is."""
    await read_form(request, page)
    await page.service.delete_run(page.user, job_id)
    return RedirectResponse("/history?deleted=1", status_code=303)
