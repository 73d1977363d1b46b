"""A decision card (``/runs/{job}/requests/{request}``): the request as it waits, or what became
of it; its forms (one per group of actions that share a values schema, or a tool approval's
approve / edit, respond, reject); the decision posted from them, which goes through
``RunService.resume`` like the API's; and the card's live stream."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from signoff.engine.decisions import TOOL_APPROVAL_VALUES, tool_value_required
from signoff.engine.errors import JobNotFound, SignoffError
from signoff.service.access import visible_job

from signoff.api.errors import STATUS_BY_CODE, InvalidRequest, printable
from signoff.api.limits import check_body
from signoff.api.models import ResumeRequest
from signoff.api.pages import forms, live, views
from signoff.api.pages.page import Page, PageContext, live_response, page_router, read_form, text, with_count
from signoff.api.pages.render import render

router = page_router()

SETTLE_SECONDS = 5.0  # how long a card waits for a decision in flight to be recorded


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
    return live_response(request, page, stream, job_id)


def _decision_from(view: views.RequestView, form: FormData) -> tuple[str, dict[str, Any] | None]:
    action = text(form.get("action_id")) or ""
    req = view.request
    if req.kind == "tool_approval":
        if action == "edit":
            return action, {"args": forms.edited_args((req.tool or {}).get("args"), form)}
        message = text(form.get(f"message.{action}"))
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
    action = text(form.get("action_id")) or ""
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
