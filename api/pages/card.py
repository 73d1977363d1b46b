"""A decision card (``/runs/{job}/requests/{request}``): the request as it waits, or what became
of it, beside what a person needs to decide it (api/pages/context.py); its forms (the decision
first when options ask for different values; a tool approval's approve / approve edited call,
respond, reject); the decision posted from them, which goes through ``RunService.resume`` like
the API's; and the card's live stream. What a person approves is what runs: a plain Approve sent
with changed arguments runs nothing (the card asks again, showing the change)."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from signoff.engine.decisions import TOOL_APPROVAL_VALUES, tool_value_required
from signoff.engine.errors import JobNotFound, SignoffError
from signoff.engine.models import PendingRequest
from signoff.service.access import asked_job, visible_job

from signoff.api.errors import STATUS_BY_CODE, InvalidRequest, printable
from signoff.api.limits import check_body
from signoff.api.models import ResumeRequest
from signoff.api.pages import context, forms, live, queue, rules, views
from signoff.api.pages.queue import card_url
from signoff.api.pages.page import Page, PageContext, live_response, page_router, read_form, text, with_count
from signoff.api.pages.render import render

router = page_router()

SETTLE_SECONDS = 5.0  # how long a card waits for a decision in flight to be recorded


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
        try:
            job = await visible_job(page.store, page.user, job_id)
        except JobNotFound:  # a person once asked sees what became of the request, nothing else
            job = await asked_job(page.store, page.user, job_id, request_id)
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


def choosing(req: PendingRequest) -> bool:
    """Whether the card asks for the decision first (a segmented control) and then only the
    chosen option's fields: options whose ``fields`` differ. Its inputs are named per option
    (``v.<action_id>.<name>``), so the same field of two options is two inputs; the server
    reads the chosen option's (the same rule decides it for the page and for the post)."""
    if req.kind == "tool_approval" or not req.fields:
        return False
    return len({repr(req.fields.get(o.action_id)) for o in req.options}) > 1


def value_prefix(req: PendingRequest, action: str) -> str:
    return f"{forms.PREFIX}{action}." if choosing(req) else forms.PREFIX


def _decided_values(req: PendingRequest, outcome: views.Outcome) -> list[tuple[str, Any]]:
    """A decision's values under their schema titles (the name where there is none)."""
    schema = (req.fields or {}).get(outcome.action_id or "") or {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    shown = []
    for key, value in (outcome.values or {}).items():
        sub = props.get(key) if isinstance(props.get(key), dict) else {}
        shown.append((str(sub.get("title") or key.replace("_", " ").capitalize()), value))
    return shown


def card_context(view: views.RequestView, *, typed: dict[str, Any] | None = None, field_errors: dict[str, str] | None = None,
                 typed_args: dict[str, str] | None = None, typed_message: dict[str, str] | None = None,
                 error: str | None = None, error_action: str | None = None, notice: str | None = None,
                 conflict: bool = False, facts: context.CardFacts | None = None,
                 typed_by_option: dict[str, dict[str, Any]] | None = None, rules_line: str | None = None,
                 standing: rules.Standing | None = None, run_link: bool = True) -> dict[str, Any]:
    """The card's forms. A gate whose options share one values schema (or none): the fields
    once and a button per option. Options with different schemas: the decision first (one radio
    per option), then each option's fields under its heading. A tool approval: approve / edit
    (with what the person changed, old -> new), respond, reject."""
    req = view.request
    groups: list[dict[str, Any]] = []
    choices: list[dict[str, Any]] = []
    if choosing(req):
        for option in req.options:
            mine = option.action_id == error_action
            kept = (typed_by_option or {}).get(option.action_id) or (typed if mine else None)
            fields = forms.fields_of((req.fields or {}).get(option.action_id), kept,
                                     field_errors if mine else None, prefix=value_prefix(req, option.action_id))
            choices.append({"option": option, "fields": fields, "checked": mine})
    elif req.kind != "tool_approval":
        schema = (req.fields or {}).get(req.options[0].action_id) if req.options and req.fields else None
        groups.append({"options": list(req.options), "fields": forms.fields_of(schema, typed, field_errors),
                       "error": error})
    allowed = set(req.allowed_decisions)
    tool = req.tool or {}
    proposal = tool.get("args") if isinstance(tool.get("args"), dict) else {}
    changes = forms.arg_changes(proposal, FormData([(forms.ARG_PREFIX + k, v) for k, v in (typed_args or {}).items()]))
    outcome = view.outcome
    decided_args = forms.args_diff(proposal, (outcome.values or {}).get("args")) \
        if req.kind == "tool_approval" and outcome.action_id == "edit" else []
    return {
        "view": view, "req": req, "groups": groups, "choices": choices, "tool": tool, "allowed": allowed,
        "args": forms.arg_fields(proposal, typed_args), "changes": changes, "decided_args": decided_args,
        "decided_values": [] if decided_args else _decided_values(req, outcome),
        "typed_message": typed_message or {},
        "message_required": {act: tool_value_required(act, "message") for act in TOOL_APPROVAL_VALUES},
        "error": error, "error_action": error_action, "notice": notice,
        "conflict": conflict, "facts": facts, "rules_line": rules_line,
        "standing": standing, "run_link": run_link,
        "card_url": card_url(view.job.job_id, req.request_id),
        "offer_remember": req.kind == "tool_approval",  # "don't ask again" (not from a one-time link)
    }


async def _facts(page: PageContext, view: views.RequestView) -> context.CardFacts:
    flow = await page.store.get_flow(view.job.flow_id, version=view.job.flow_version) \
        or await page.store.get_flow(view.job.flow_id)
    until = None if view.is_open else (view.outcome.decided_at or view.job.updated_at)
    return await context.facts(page.store, page.user, view.job, view.request, flow, until)


async def _seen(page: PageContext, view: views.RequestView) -> dict[str, Any]:
    """What the card shows beside its forms: the context (api/pages/context.py) and, while the
    request waits, its rules in words (api/pages/rules.py)."""
    line = standing = None
    if view.is_open:
        line = await rules.rules_line(views.Names(page.store), view.job, view.request, view.outcome.votes)
        standing = await rules.standing(page.service.access, page.user, view.job, view.request, view.outcome.votes)
    try:  # a person once asked, who may not see the run: the card without links to it
        run_link = view.job.user_id == page.user.id or bool(await visible_job(page.store, page.user, view.job.job_id))
    except JobNotFound:
        run_link = False
    return {"facts": await _facts(page, view), "rules_line": line, "standing": standing, "run_link": run_link}


@router.get("/runs/{job_id}/requests/{request_id}")
async def card(request: Request, job_id: str, request_id: str, page: PageContext = Page,
               voted: str | None = None, decided: str | None = None) -> Response:
    view = await _request(page, job_id, request_id, settle=True)
    await with_count(request, page)
    notice = None
    if voted and view.is_open and len(voted) < 20:
        notice = f"Your vote is recorded ({voted} approvals)."
    return render(request, "card.html", done=await queue.done(page, decided),
                  **card_context(view, notice=notice, **await _seen(page, view)))


@router.get("/runs/{job_id}/requests/{request_id}/live")
async def card_live(request: Request, job_id: str, request_id: str, page: PageContext = Page) -> Response:
    await visible_job(page.store, page.user, job_id)
    page.service.feed.check(page.user.id)
    stream = live.request_stream(page.store, page.service.feed, job_id, request_id, user_id=page.user.id)
    return live_response(request, page, stream, job_id)


class EditNotSent(Exception):
    """A plain Approve sent with arguments the person changed: it would run the proposal and
    drop what they typed, so nothing is sent and the card asks again, showing the change."""

    def __init__(self, changes: list[forms.ArgChange]) -> None:
        super().__init__("edited arguments sent with Approve")
        self.changes = changes


class NoChoice(Exception):
    """A card that asks for the decision first was sent without one."""


def remember_from(form: FormData) -> dict[str, Any] | None:
    """The card's "don't ask again" control as a decision's ``remember`` (None: ask each time).
    What it holds is checked as any decision's (check_decision): a made-up scope or duration is a
    422 shown on the card."""
    scope = text(form.get("remember"))
    if not scope:
        return None
    raw = text(form.get("remember_for")) or ""
    try:
        seconds: Any = int(raw)
    except ValueError:
        seconds = raw[:50]
    return {"scope": scope[:50], "for": seconds}


def _decision_from(view: views.RequestView, form: FormData) -> tuple[str, dict[str, Any] | None]:
    action = text(form.get("action_id")) or ""
    req = view.request
    if req.kind == "tool_approval":
        proposal = (req.tool or {}).get("args")
        if action == "approve" and (changes := forms.arg_changes(proposal if isinstance(proposal, dict) else {}, form)):
            raise EditNotSent(changes)
        if action == "edit":
            return action, {"args": forms.edited_args(proposal, form)}
        message = text(form.get(f"message.{action}"))
        if action in ("respond", "reject") and message is not None and message.strip():
            return action, {"message": message}
        return action, None
    if choosing(req) and action not in req.allowed_decisions:
        raise NoChoice()
    schema = (req.fields or {}).get(action)
    return action, forms.values_from(schema, form, prefix=value_prefix(req, action))


def _problems_by_field(err: SignoffError, schema: dict[str, Any] | None) -> tuple[dict[str, str], str]:
    """A refusal's problems per field, in people's words (forms.in_words), and its message."""
    problems = err.details.get("problems") or []
    by_field: dict[str, str] = {}
    for problem in problems:
        if isinstance(problem, dict):
            loc = str(problem.get("loc", ""))
            name = loc.split(".", 2)[1] if loc.startswith("values.") else loc
            by_field.setdefault(name, forms.in_words(problem, schema, name))
    props = (schema or {}).get("properties") if isinstance((schema or {}).get("properties"), dict) else {}
    if by_field and all(name in props for name in by_field):  # each said next to its field
        count = len(by_field)
        return by_field, "Please fix the field marked below." if count == 1 else f"Please fix the {count} fields marked below."
    return by_field, printable(err.message)


def _refusal(view: views.RequestView, refused: Exception) -> str:
    if isinstance(refused, NoChoice):
        return "Choose a decision first: " + " or ".join(o.label for o in view.request.options) + "."
    names = ", ".join(c.name for c in getattr(refused, "changes", []))
    if "edit" in view.request.allowed_decisions:
        return (f"You changed {names}, so nothing was sent: Approve runs the call as the agent proposed it. "
                "Check your change below and approve the edited call, or discard it.")
    return f"This call cannot be edited (you changed {names}), so nothing was sent. Discard the change to approve it."


@router.post("/runs/{job_id}/requests/{request_id}")
async def decide(request: Request, job_id: str, request_id: str, page: PageContext = Page) -> Response:
    form = await read_form(request, page)
    view = await _request(page, job_id, request_id)
    action = text(form.get("action_id")) or ""
    typed = forms.typed_values(form, value_prefix(view.request, action))
    typed_args = forms.typed_args(form)
    typed_message = {k.split(".", 1)[1]: str(v) for k, v in form.items() if k.startswith("message.")}
    try:
        action, values = _decision_from(view, form)  # (a field too deep to read: 422, shown again)
        try:
            decision: dict[str, Any] = {"action_id": action, "values": values}
            if view.request.kind == "tool_approval" and action in ("approve", "edit") and \
                    (remember := remember_from(form)) is not None:
                decision["remember"] = remember  # "don't ask again" (a standing approval, DESIGN §17)
            body = ResumeRequest.model_validate({"request_id": request_id, "decision": decision})
        except ValidationError as e:
            raise InvalidRequest("; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in e.errors()[:5]))
        check_body(body, request.app.state.settings, text=("decision",))
        await page.service.resume(page.user, job_id, request_id, body.decision, via="page")
    except (EditNotSent, NoChoice) as refused:
        await with_count(request, page)
        return render(request, "card.html", 422, **card_context(
            view, typed_args=typed_args, typed_message=typed_message, error=_refusal(view, refused),
            error_action="approve" if isinstance(refused, EditNotSent) else None, **await _seen(page, view),
            typed_by_option={o.action_id: forms.typed_values(form, value_prefix(view.request, o.action_id))
                             for o in view.request.options}))
    except SignoffError as err:
        status = STATUS_BY_CODE.get(err.code, 500)
        if status in (403, 422):
            field_errors, message = _problems_by_field(err, (view.request.fields or {}).get(action))
            await with_count(request, page)
            return render(request, "card.html", status, **card_context(
                view, typed=typed, field_errors=field_errors, typed_args=typed_args, typed_message=typed_message,
                error=message, error_action=action, **await _seen(page, view)))
        if status == 409:
            settled = await _request(page, job_id, request_id, settle=True, lost=err.code == "NOT_RESUMABLE",
                                     decided=True)
            await with_count(request, page)
            shown = await _seen(page, settled)
            if err.code == "ALREADY_VOTED":
                return render(request, "card.html", 409, **card_context(settled, notice="Your vote was already counted.",
                                                                        **shown))
            return render(request, "card.html", 409, **card_context(settled, conflict=True, **shown))
        raise
    # on to the next request (issue 29): a quick action from the list goes back to the list; a
    # decision on a card goes to the next request waiting for the person, or to the list; either
    # says what became of this one (``decided``)
    done = urlencode({"decided": queue.done_value(job_id, request_id)})
    if text(form.get("back")) == "inbox":
        return RedirectResponse("/?" + done, status_code=303)
    following = await queue.next_waiting(page, job_id, request_id, view.request.paused_at)
    return RedirectResponse((following or "/") + "?" + done, status_code=303)
