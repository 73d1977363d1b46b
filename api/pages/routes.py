"""The person's pages (DESIGN §10): sign in, inbox, decision card, run, flows, history. Thin:
who may see what is :mod:`signoff.service.access`'s (someone else's run is a 404 page, as in the
API), every decision goes through ``RunService.resume`` and every run through
``RunService.submit``; this module reads forms, calls them and renders the answer."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.engine.decisions import TOOL_APPROVAL_VALUES, tool_value_required
from signoff.engine.errors import FlowInvalid, JobNotFound, SignoffError
from signoff.engine.models import Decision, Job, JobStatus, User, utcnow
from signoff.engine.store.base import Store
from signoff.service import RunService
from signoff.service.access import runnable_flow, valid_id, visible_job

from signoff.api.errors import STATUS_BY_CODE, FlowTooLarge, InvalidRequest, printable
from signoff.api.flowspec import parse_body, validate_spec
from signoff.api.limits import check_body
from signoff.api.models import ResumeRequest, WorkflowCreate
from signoff.api.pages import forms, live, markdown, views
from signoff.api.sse import while_allowed
from signoff.api.ratelimit import check_write
from signoff.api.pages.session import (CsrfRefused, PageSession, Sessions, check_csrf, check_same_origin)

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 25
SETTLE_SECONDS = 5.0  # how long a card waits for a decision in flight to be recorded


# ---- rendering ------------------------------------------------------------------------------------

env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True),
                  trim_blocks=True, lstrip_blocks=True)
env.filters.update(markdown=markdown.render, excerpt=markdown.excerpt, ago=views.ago, stamp=views.stamp,
                   iso=views.iso, duration=views.duration_text, pretty=views.compact_json, q=lambda s: quote(str(s), safe=""),
                   time_left=views.time_left, clock=views.clock, domid=lambda s: "i" + hashlib.sha1(str(s).encode()).hexdigest()[:12])
env.globals.update(STATUS_TEXT=views.STATUS_TEXT)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    page: PageContext | None = getattr(request.state, "page", None)
    context.setdefault("user", page.user if page else None)
    context.setdefault("csrf", page.session.csrf if page else "")
    context.setdefault("inbox_count", getattr(request.state, "inbox_count", None))
    context["request"] = request
    context["path"] = request.url.path
    html = env.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status_code)


def fragment(template: str, **context: Any) -> str:
    return env.get_template(template).render(**context)


# ---- errors as pages ------------------------------------------------------------------------------


class SignInRequired(Exception):
    pass


NOT_FOUND_TEXT = "There is no such page, or it is not yours to see."


class PageRoute(APIRoute):
    """A page route: its errors are pages (404 for anything you may not see), never JSON."""

    def get_route_handler(self) -> Callable:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInRequired:
                if request.method != "GET" or request.url.path.endswith("/live"):
                    return Response(status_code=204 if request.url.path.endswith("/live") else 401)
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse("/sign-in?" + urlencode({"next": target}), status_code=303)
            except CsrfRefused as e:
                return render(request, "error.html", 403, title="Refused", message=str(e))
            except SignoffError as e:
                status = STATUS_BY_CODE.get(e.code, 500)
                if status == 404:
                    return render(request, "error.html", 404, title="Not found", message=NOT_FOUND_TEXT)
                if status == 503:  # the database or Temporal is away for a moment
                    response = render(request, "error.html", 503, title="Unavailable",
                                      message="signoff cannot reach its database or Temporal right now. Try again "
                                              "in a few seconds.")
                    response.headers["Retry-After"] = "2"
                    return response
                if status >= 500:
                    raise
                response = render(request, "error.html", status, title="Refused", message=printable(e.message))
                if isinstance(e.details.get("retry_after"), int):  # RATE_LIMITED
                    response.headers["Retry-After"] = str(e.details["retry_after"])
                return response
            except RequestValidationError:
                return render(request, "error.html", 404, title="Not found", message=NOT_FOUND_TEXT)
            except StarletteHTTPException as e:
                return render(request, "error.html", e.status_code, title="Refused", message=str(e.detail))

        return handler


router = APIRouter(route_class=PageRoute, include_in_schema=False)


# ---- who is signed in -------------------------------------------------------------------------------


@dataclass
class PageContext:
    session: PageSession
    user: User
    store: Store
    service: RunService
    sessions: Sessions


def sessions_of(request: Request) -> Sessions:
    app = request.app
    if getattr(app.state, "page_sessions", None) is None:
        app.state.page_sessions = Sessions(app.state.store, app.state.settings)
    return app.state.page_sessions


def inbox_watcher(request: Request, service: RunService) -> live.InboxWatcher:
    """The process's one reader of the open inboxes (api/pages/live.py)."""
    watcher = getattr(request.app.state, "inbox_watcher", None)
    if watcher is None or watcher.service is not service:
        watcher = request.app.state.inbox_watcher = live.InboxWatcher(service)
    return watcher


def service_of(request: Request) -> RunService:
    service = getattr(request.app.state, "service", None)
    if service is None:
        from signoff.api.errors import Unavailable

        raise Unavailable("The workflow service is not available (Temporal is not connected)")
    return service


async def signed_in(request: Request) -> PageContext:
    sessions = sessions_of(request)
    found = await sessions.load(request)
    if found is None:
        raise SignInRequired()
    session, user = found
    page = PageContext(session=session, user=user, store=request.app.state.store, service=service_of(request),
                       sessions=sessions)
    request.state.page = page
    return page


Page = Depends(signed_in)


def _rechecked(request: Request, page: PageContext) -> dict[str, Any]:
    """How a page's live stream is re-checked (api/sse.py: while_allowed)."""
    return {"every": request.app.state.settings.stream_recheck_seconds, "feed": page.service.feed,
            "user_id": page.user.id}


def still_signed_in(request: Request, page: PageContext, job_id: str | None = None) -> Callable[[], Any]:
    """For a live stream's while_allowed: the page session that opened it still stands (not
    signed out, expired or ended with the person's keys) and its person may still see ``job_id``."""
    async def allowed() -> bool:
        loaded = await page.sessions.load(request)
        if loaded is None or loaded[1].id != page.user.id:
            return False
        if job_id is not None:
            try:
                await visible_job(page.store, loaded[1], job_id)
            except JobNotFound:
                return False
        return True

    return allowed


async def with_count(request: Request, page: PageContext) -> None:
    request.state.inbox_count = len(await page.service.pending_for(page.user))


async def read_form(request: Request, page: PageContext | None = None, *, files: int = 0) -> FormData:
    """The posted form, after the same-origin and CSRF checks and within the body limit."""
    check_same_origin(request, request.app.state.settings.public_url)
    limit = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise StarletteHTTPException(413, f"The form is larger than {limit} bytes")
    if page is not None:  # a signed-in person's form is a write like the API's (SIGNOFF_WRITE_RATE)
        check_write(request.app.state.write_buckets, page.user.id)
    form = await request.form(max_files=files, max_fields=1000, max_part_size=limit)
    if page is not None:
        check_csrf(page.session, _text(form.get("csrf")))
    return form


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _safe_next(target: str | None) -> str:
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target or len(target) > 2000:
        return "/"
    return target


# ---- sign in / out -------------------------------------------------------------------------------------


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str | None = None) -> Response:
    sessions = sessions_of(request)
    if await sessions.load(request) is not None:
        return RedirectResponse(_safe_next(next), status_code=303)
    token, cookie = sessions.signin_token(request)
    response = render(request, "signin.html", token=token, next=_safe_next(next))
    if cookie:
        sessions.set_signin_cookie(request, response, cookie)
    return response


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    sessions = sessions_of(request)
    form = await read_form(request)
    sessions.check_signin_token(request, _text(form.get("token")))
    key = (_text(form.get("api_key")) or "").strip()
    target = _safe_next(_text(form.get("next")))
    user = await request.app.state.store.user_for_api_key(key) if key and len(key) <= 200 else None
    if user is None:
        token, _ = sessions.signin_token(request)
        await asyncio.sleep(0.2)  # a guess costs a little
        return render(request, "signin.html", 401, token=token, next=target,
                      error="That API key is not valid. Create one with `signoff users create NAME`.")
    value, _session = await sessions.create(user)
    response = RedirectResponse(target, status_code=303)
    sessions.set_cookie(request, response, value)
    response.delete_cookie("signoff_signin", path="/sign-in")
    return response


@router.post("/sign-out")
async def sign_out(request: Request, page: PageContext = Page) -> Response:
    await read_form(request, page)
    await page.sessions.end(request)
    page.service.feed.recheck(page.user.id)  # this session's open streams end now
    response = RedirectResponse("/sign-in", status_code=303)
    page.sessions.clear_cookie(request, response)
    return response


# ---- the inbox -------------------------------------------------------------------------------------------


def _clean(value: str | None, limit: int = 200) -> str | None:
    value = (value or "").strip()
    return value[:limit] if value and "\x00" not in value else None


@router.get("/")
async def inbox(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                kind: str | None = None, p: int = 1) -> Response:
    flow, session = _clean(flow), _clean(session)
    kind = kind if kind in ("node_input", "tool_approval") else None
    names = views.Names(page.store)
    everything = await views.inbox_items(names, await page.service.pending_for(page.user), page.user.id)
    request.state.inbox_count = len(everything)
    items = views.filter_inbox(everything, flow=flow, session=session, kind=kind)
    pages = max(1, math.ceil(len(items) / PAGE_SIZE))
    p = min(max(1, p), pages)
    shown = items[(p - 1) * PAGE_SIZE: p * PAGE_SIZE]
    flows = sorted({(i.job.flow_id, i.flow_name) for i in everything}, key=lambda f: f[1].lower())
    filters = {k: v for k, v in (("flow", flow), ("session", session), ("kind", kind)) if v}
    since = views.iso(utcnow() - timedelta(seconds=5))  # a pause the page's read just missed still comes
    live_url = "/inbox/live?" + urlencode({**filters, "rows": "1" if p == 1 else "0", "since": since})
    return render(request, "inbox.html", items=shown, total=len(items), page_no=p, pages=pages, flows=flows,
                  filters=filters, live_url=live_url, query=lambda **kw: "?" + urlencode({**filters, **kw}))


@router.get("/inbox/live")
async def inbox_live(request: Request, page: PageContext = Page, flow: str | None = None, session: str | None = None,
                     kind: str | None = None, rows: str = "1", since: str | None = None) -> Response:
    flow, session = _clean(flow), _clean(session)
    kind = kind if kind in ("node_input", "tool_approval") else None
    csrf = page.session.csrf
    try:
        after = views.aware(datetime.fromisoformat(since)) if since else None
    except ValueError:
        after = None

    async def row(item: views.InboxItem) -> str:
        return fragment("_inbox_row.html", item=item, csrf=csrf)

    page.service.feed.check(page.user.id)
    stream = live.inbox_stream(inbox_watcher(request, page.service), page.user, flow=flow, session=session,
                               kind=kind, add_rows=rows == "1", render_row=row, since=after)
    return StreamingResponse(while_allowed(stream, still_signed_in(request, page), **_rechecked(request, page)), media_type="text/event-stream", headers={"Cache-Control": "no-store",
                                                                              "X-Accel-Buffering": "no"})


# ---- a decision card -------------------------------------------------------------------------------------


def card_url(job_id: str, request_id: str) -> str:
    return f"/runs/{quote(job_id, safe='')}/requests/{quote(request_id, safe=':')}"


async def _request(page: PageContext, job_id: str, request_id: str, *, settle: bool = False,
                   lost: bool = False, decided: bool = False) -> views.RequestView:
    """The request as it is now. ``settle``: a decision being applied is waited for (a few
    seconds) so the card can say who made it; ``lost``: the caller's decision was refused with
    409, so another one is on its way even if the run still shows the request open.
    ``decided``: the caller has just decided it (or lost the race to), which the service allowed
    only after its visibility check; an approver keeps seeing the outcome of a run that is not
    theirs once its request is no longer waiting."""
    job = await page.store.get_job(job_id) if decided else None
    if job is None:
        job = await visible_job(page.store, page.user, job_id)
    names = views.Names(page.store)
    view = await views.request_view(page.store, names, job, request_id)
    deadline = time.monotonic() + SETTLE_SECONDS
    waiting = ("applying", "open") if lost else ("applying",)
    while settle and view is not None and view.outcome.state in waiting and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        job = await page.store.get_job(job_id) or job
        view = await views.request_view(page.store, names, job, request_id)
    if view is None:
        raise JobNotFound(f"No request {request_id!r} in run {job_id}", job_id=job_id)
    return view


def card_context(view: views.RequestView, *, typed: dict[str, Any] | None = None, field_errors: dict[str, str] | None = None,
                 typed_args: dict[str, str] | None = None, typed_message: dict[str, str] | None = None,
                 error: str | None = None, error_action: str | None = None, notice: str | None = None,
                 conflict: bool = False) -> dict[str, Any]:
    """The card's forms: one per group of actions that share a values schema (each form's
    controls are that schema's), or for a tool approval: approve / edit, respond, reject."""
    req = view.request
    groups: list[dict[str, Any]] = []
    if req.kind != "tool_approval":
        by_schema: dict[str, dict[str, Any]] = {}
        for option in req.options:
            schema = (req.fields or {}).get(option.action_id)
            key = repr(schema)
            if key not in by_schema:
                mine = error_action is not None and (req.fields or {}).get(error_action) == schema
                by_schema[key] = {"options": [], "fields": forms.fields_of(
                    schema, typed if mine else None, field_errors if mine else None), "error": error if mine else None}
                groups.append(by_schema[key])
            by_schema[key]["options"].append(option)
        if error and not any(g["error"] for g in groups) and groups:
            groups[0]["error"] = error
    allowed = set(req.allowed_decisions)
    tool = req.tool or {}
    return {
        "view": view, "req": req, "groups": groups, "tool": tool, "allowed": allowed,
        "args": forms.arg_fields(tool.get("args") if isinstance(tool.get("args"), dict) else {}, typed_args),
        "typed_message": typed_message or {},
        "message_required": {act: tool_value_required(act, "message") for act in TOOL_APPROVAL_VALUES},
        "error": error, "error_action": error_action, "notice": notice,
        "conflict": conflict,
        "card_url": card_url(view.job.job_id, req.request_id),
    }


@router.get("/runs/{job_id}/requests/{request_id}")
async def card(request: Request, job_id: str, request_id: str, page: PageContext = Page,
               voted: str | None = None) -> Response:
    view = await _request(page, job_id, request_id, settle=True)
    await with_count(request, page)
    notice = None
    if voted and view.is_open and len(voted) < 20:
        notice = f"Your vote is recorded ({voted} approvals)."
    return render(request, "card.html", **card_context(view, notice=notice))


@router.get("/runs/{job_id}/requests/{request_id}/live")
async def card_live(request: Request, job_id: str, request_id: str, page: PageContext = Page) -> Response:
    await visible_job(page.store, page.user, job_id)
    page.service.feed.check(page.user.id)
    stream = live.request_stream(page.store, page.service.feed, job_id, request_id, user_id=page.user.id)
    return StreamingResponse(while_allowed(stream, still_signed_in(request, page, job_id), **_rechecked(request, page)),
                             media_type="text/event-stream", headers={"Cache-Control": "no-store",
                                                                      "X-Accel-Buffering": "no"})


def _decision_from(view: views.RequestView, form: FormData) -> tuple[str, dict[str, Any] | None]:
    action = _text(form.get("action_id")) or ""
    req = view.request
    if req.kind == "tool_approval":
        if action == "edit":
            return action, {"args": forms.edited_args((req.tool or {}).get("args"), form)}
        message = _text(form.get(f"message.{action}"))
        if action in ("respond", "reject") and message is not None and message.strip():
            return action, {"message": message}
        return action, None
    schema = (req.fields or {}).get(action)
    return action, forms.values_from(schema, form)


def _problems_by_field(err: SignoffError) -> tuple[dict[str, str], str]:
    problems = err.details.get("problems") or []
    by_field: dict[str, str] = {}
    for problem in problems:
        if isinstance(problem, dict):
            loc = str(problem.get("loc", ""))
            name = loc.split(".", 2)[1] if loc.startswith("values.") else loc
            by_field.setdefault(name, str(problem.get("message", "")))
    return by_field, printable(err.message)


@router.post("/runs/{job_id}/requests/{request_id}")
async def decide(request: Request, job_id: str, request_id: str, page: PageContext = Page) -> Response:
    form = await read_form(request, page)
    view = await _request(page, job_id, request_id)
    action = _text(form.get("action_id")) or ""
    typed = forms.typed_values(form)
    typed_args = forms.typed_args(form)
    typed_message = {k.split(".", 1)[1]: str(v) for k, v in form.items() if k.startswith("message.")}
    try:
        action, values = _decision_from(view, form)  # (a field too deep to read: 422, shown again)
        try:
            body = ResumeRequest.model_validate({"request_id": request_id, "decision": {"action_id": action,
                                                                                      "values": values}})
        except ValidationError as e:
            raise InvalidRequest("; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in e.errors()[:5]))
        check_body(body, request.app.state.settings, text=("decision",))
        resumed = await page.service.resume(page.user, job_id, request_id, body.decision)
    except SignoffError as err:
        status = STATUS_BY_CODE.get(err.code, 500)
        if status in (403, 422):
            field_errors, message = _problems_by_field(err)
            await with_count(request, page)
            return render(request, "card.html", status, **card_context(
                view, typed=typed, field_errors=field_errors, typed_args=typed_args, typed_message=typed_message,
                error=message, error_action=action))
        if status == 409:
            settled = await _request(page, job_id, request_id, settle=True, lost=err.code == "NOT_RESUMABLE",
                                     decided=True)
            await with_count(request, page)
            if err.code == "ALREADY_VOTED":
                return render(request, "card.html", 409, **card_context(settled, notice="Your vote was already counted."))
            return render(request, "card.html", 409, **card_context(settled, conflict=True))
        raise
    if resumed.status == "vote_recorded":
        target = card_url(job_id, request_id) + "?" + urlencode({"voted": f"{resumed.votes}/{resumed.required}"})
        return RedirectResponse(target, status_code=303)
    if view.job.user_id != page.user.id:  # an approver: the card of a run that is not theirs, once
        settled = await _request(page, job_id, request_id, settle=True, decided=True)
        await with_count(request, page)
        return render(request, "card.html", **card_context(settled))
    return RedirectResponse(card_url(job_id, request_id), status_code=303)


# ---- a run --------------------------------------------------------------------------------------------------


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
    graph = views.layout(flow.spec if flow else {}, views.node_states(job, spans))
    rows, total = views.span_rows(spans)
    requests = [v for rid in views.request_ids_of(events)
                if (v := await views.request_view(store, names, job, rid, events)) is not None]
    if job.pending is not None and job.status == JobStatus.suspended and \
            job.pending.request_id not in {v.request.request_id for v in requests}:
        current = await views.request_view(store, names, job, job.pending.request_id, events)
        if current is not None:
            requests.append(current)
    messages = []
    if job.effective_session:
        owners: dict[str, bool] = {}
        for m in await store.list_messages(job.effective_session, flow_id=job.flow_id):
            if m.job_id is None:
                continue
            if m.job_id != job.job_id and job.user_id != page.user.id:
                continue  # an approver reads this run's messages, not the owner's earlier runs
            if m.job_id not in owners:
                other = job if m.job_id == job.job_id else await store.get_job(m.job_id)
                owners[m.job_id] = other is not None and other.user_id == job.user_id
            if owners[m.job_id]:
                messages.append(m)
    user_names = {uid: await names.user(uid) for s in spans
                  if s.type == "gate" and (uid := str(s.attributes.get("signoff.decided_by") or ""))}
    ui = request.app.state.settings.effective_temporal_ui_url
    namespace = request.app.state.settings.temporal_namespace
    temporal_url = f"{ui}/namespaces/{quote(namespace, safe='')}/workflows/{quote(job.job_id, safe='')}" if ui and \
        job.request.get("runner", "temporal") == "temporal" else None
    await with_count(request, page)
    return render(request, "run.html", job=job, flow=flow, flow_name=flow.name if flow else job.flow_id,
                  owner_name=await names.user(job.user_id), graph=graph, spans=rows, trace_total=total,
                  events=await views.event_views(names, events), requests=requests, messages=messages,
                  temporal_url=temporal_url, duration=views.run_duration(job), output=views.output_text(job),
                  last_seq=events[-1].seq if events else 0, card_url=card_url, mine=job.user_id == page.user.id,
                  input_value=str(job.request.get("input_value") or ""), user_names=user_names)


@router.get("/runs/{job_id}/live")
async def run_live(request: Request, job_id: str, page: PageContext = Page, seq: int = 0,
                   status: str | None = None) -> Response:
    await visible_job(page.store, page.user, job_id)
    page.service.feed.check(page.user.id)
    stream = live.run_stream(page.store, page.service.feed, job_id, after_seq=max(0, seq), status=status,
                             user_id=page.user.id)
    return StreamingResponse(while_allowed(stream, still_signed_in(request, page, job_id), **_rechecked(request, page)),
                             media_type="text/event-stream", headers={"Cache-Control": "no-store",
                                                                      "X-Accel-Buffering": "no"})


@router.post("/runs/{job_id}/stop")
async def stop_run(request: Request, job_id: str, page: PageContext = Page) -> Response:
    await read_form(request, page)
    await page.service.stop(page.user, job_id)
    return RedirectResponse(f"/runs/{quote(job_id, safe='')}", status_code=303)


# ---- flows -------------------------------------------------------------------------------------------------


async def _flows_page(request: Request, page: PageContext, status_code: int = 200, **extra: Any) -> Response:
    store = page.store
    public_owner = getattr(request.app.state, "public_owner_id", None)
    flows = {f.id: f for f in await store.list_flows(page.user.id)}
    if public_owner and public_owner != page.user.id:
        for f in await store.list_flows(public_owner):
            if f.owner_id == public_owner:
                flows.setdefault(f.id, f)
    names = views.Names(store)
    runs = []
    for row in await store.list_traces(user_id=page.user.id, limit=20):
        run_id = str(row.get("run_id") or row.get("trace_id") or "")
        job = await store.get_job(run_id) if valid_id(run_id) else None
        if job is not None and job.user_id == page.user.id:
            runs.append({"job": job, "flow_name": await names.flow_name(job.flow_id),
                         "duration": views.run_duration(job)})
    await with_count(request, page)
    owners = {f.owner_id: await names.user(f.owner_id) for f in flows.values()}
    return render(request, "flows.html", status_code, flows=sorted(flows.values(), key=lambda f: f.name.lower()),
                  runs=runs, owners=owners, **extra)


@router.get("/flows")
async def flows_page(request: Request, page: PageContext = Page) -> Response:
    return await _flows_page(request, page)


@router.post("/flows")
async def upload_flow(request: Request, page: PageContext = Page) -> Response:
    form = await read_form(request, page, files=1)
    settings = request.app.state.settings
    upload = form.get("file")
    text = _text(form.get("spec")) or ""
    raw, ctype = text.encode(), None
    try:
        if upload is not None and not isinstance(upload, str) and upload.filename:
            raw = await upload.read(settings.max_body_bytes + 1)
            name = upload.filename.lower()
            ctype = "application/yaml" if name.endswith((".yaml", ".yml")) else "application/json"
    finally:
        await form.close()
    if ctype is None and text.strip() and not text.lstrip().startswith(("{", "[")):
        ctype = "application/yaml"
    if not raw.strip():
        return await _flows_page(request, page, 422, upload_error="Choose a file or paste a flow (JSON or YAML).",
                                 spec_text=text)
    try:
        if len(raw) > settings.max_body_bytes:
            raise InvalidRequest(f"The flow is larger than {settings.max_body_bytes} bytes")
        spec = await asyncio.to_thread(lambda: validate_spec(parse_body(raw, ctype, max_depth=settings.max_json_depth),
                                                             settings))
    except (FlowInvalid, InvalidRequest, FlowTooLarge) as err:
        problems = []
        for p in getattr(err, "problems", None) or err.details.get("problems") or []:
            if isinstance(p, dict):
                where = p.get("node") or p.get("where") or p.get("loc") or p.get("edge") or ""
                problems.append({"where": str(where), "message": str(p.get("message", p))})
            else:
                problems.append({"where": "", "message": str(p)})
        return await _flows_page(request, page, 422, upload_error=printable(err.message), problems=problems,
                                 spec_text=text)
    flow = await page.store.save_flow(page.user.id, spec["name"], spec)
    return RedirectResponse("/flows?" + urlencode({"added": flow.id}), status_code=303)


@router.post("/flows/{flow_id}/runs")
async def start_run(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    form = await read_form(request, page)
    settings = request.app.state.settings
    public_owner = getattr(request.app.state, "public_owner_id", None)
    flow = await runnable_flow(page.store, page.user, flow_id, public_owner)
    try:
        body = WorkflowCreate.model_validate({"flow_id": flow.id, "input_value": _text(form.get("input_value")) or "",
                                              "session_id": _clean(_text(form.get("session_id"))), "mode": "background"})
    except ValidationError as e:
        return await _flows_page(request, page, 422, run_error={flow.id: "; ".join(x["msg"] for x in e.errors()[:3])})
    check_body(body, settings, text=("input_value", "tweaks"))
    job, _ = await page.service.submit(page.user, flow, input_value=body.input_value, session_id=body.session_id,
                                       tweaks=None, idempotency_key=None, mode="background")
    return RedirectResponse(f"/runs/{quote(job.job_id, safe='')}", status_code=303)


# ---- history -----------------------------------------------------------------------------------------------


@router.get("/history")
async def history(request: Request, page: PageContext = Page, flow: str | None = None, action: str | None = None,
                  p: int = 1) -> Response:
    flow, action = _clean(flow), _clean(action)
    store = page.store
    names = views.Names(store)
    decided: list[views.RequestView] = []
    flows: dict[str, str] = {}
    jobs: dict[str, Job] = {}  # the person's own runs, and others' runs they voted on or decided
    for row in await store.list_traces(user_id=page.user.id, limit=200):
        run_id = str(row.get("run_id") or row.get("trace_id") or "")
        job = await store.get_job(run_id) if valid_id(run_id) else None
        if job is not None and job.user_id == page.user.id:
            jobs[job.job_id] = job
    for job in await store.participated_jobs(page.user.id, limit=200):
        jobs.setdefault(job.job_id, job)
    for job in jobs.values():
        events = await store.read_events(job.job_id, limit=100_000)
        mine = job.user_id == page.user.id
        theirs = set() if mine else views.requests_decided_by(events, page.user.id)
        for rid in views.request_ids_of(events):
            if not mine and rid not in theirs:
                continue  # in someone else's run, only what this person decided or voted on
            view = await views.request_view(store, names, job, rid, events)
            if view is None or view.outcome.state in ("open", "applying"):
                continue
            flows[job.flow_id] = view.flow_name
            if flow and job.flow_id != flow:
                continue
            if action and (view.outcome.action_label or view.outcome.state) != action:
                continue
            decided.append(view)
    decided.sort(key=lambda v: views.aware(v.outcome.decided_at or v.request.paused_at), reverse=True)
    pages = max(1, math.ceil(len(decided) / PAGE_SIZE))
    p = min(max(1, p), pages)
    filters = {k: v for k, v in (("flow", flow), ("action", action)) if v}
    await with_count(request, page)
    return render(request, "history.html", items=decided[(p - 1) * PAGE_SIZE: p * PAGE_SIZE], total=len(decided),
                  page_no=p, pages=pages, flows=sorted(flows.items(), key=lambda f: f[1].lower()), filters=filters,
                  query=lambda **kw: "?" + urlencode({**filters, **kw}), card_url=card_url)
