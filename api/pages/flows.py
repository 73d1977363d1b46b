"""The flows page (``/flows``): the flows the person may run, each with a form to start a run,
their recent runs, and a form to add a flow (a file or pasted JSON / YAML, checked as the API's
upload is)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from signoff.engine.errors import FlowInvalid, StorageLimit
from signoff.engine.usage import check_stored_bytes, stored_size
from signoff.service.access import recent_runs

from signoff.api.deps import get_flows
from signoff.api.errors import FlowTooLarge, InvalidRequest, printable
from signoff.api.flowspec import read_flow
from signoff.api.limits import check_body
from signoff.api.models import WorkflowCreate
from signoff.api.pages import formatting
from signoff.api.pages.page import Page, PageContext, clean, page_router, read_form, text, with_count
from signoff.api.pages.render import render
from signoff.api.pages.views import Names

router = page_router()

RECENT_RUNS = 20  # the person's runs the page lists


async def _flows_page(request: Request, page: PageContext, status_code: int = 200, **extra: Any) -> Response:
    flows = await get_flows(request).all(page.user)
    names = Names(page.store)
    runs = [{"job": job, "flow_name": await names.flow_name(job.flow_id), "duration": formatting.run_duration(job)}
            for _row, job in await recent_runs(page.store, page.user, limit=RECENT_RUNS)]
    await with_count(request, page)
    owners = {f.owner_id: await names.user(f.owner_id) for f in flows}
    return render(request, "flows.html", status_code, flows=sorted(flows, key=lambda f: f.name.lower()),
                  runs=runs, owners=owners, **extra)


def _problems(err: FlowInvalid | InvalidRequest | FlowTooLarge) -> list[dict[str, str]]:
    """A refused upload's problems, each with where it is (a node, an edge, a field)."""
    problems = []
    for p in getattr(err, "problems", None) or err.details.get("problems") or []:
        if isinstance(p, dict):
            where = p.get("node") or p.get("where") or p.get("loc") or p.get("edge") or ""
            problems.append({"where": str(where), "message": str(p.get("message", p))})
        else:
            problems.append({"where": "", "message": str(p)})
    return problems


@router.get("/flows")
async def flows_page(request: Request, page: PageContext = Page) -> Response:
    return await _flows_page(request, page)


@router.post("/flows")
async def upload_flow(request: Request, page: PageContext = Page) -> Response:
    form = await read_form(request, page, files=1)
    settings = request.app.state.settings
    upload = form.get("file")
    pasted = text(form.get("spec")) or ""
    raw, ctype = pasted.encode(), None
    try:
        if upload is not None and not isinstance(upload, str) and upload.filename:
            raw = await upload.read(settings.max_body_bytes + 1)
            name = upload.filename.lower()
            ctype = "application/yaml" if name.endswith((".yaml", ".yml")) else "application/json"
    finally:
        await form.close()
    if ctype is None and pasted.strip() and not pasted.lstrip().startswith(("{", "[")):
        ctype = "application/yaml"
    if not raw.strip():
        return await _flows_page(request, page, 422, upload_error="Choose a file or paste a flow (JSON or YAML).",
                                 spec_text=pasted)
    try:
        if len(raw) > settings.max_body_bytes:
            raise InvalidRequest(f"The flow is larger than {settings.max_body_bytes} bytes")
        spec = await read_flow(raw, ctype, settings)
    except (FlowInvalid, InvalidRequest, FlowTooLarge) as err:
        return await _flows_page(request, page, 422, upload_error=printable(err.message), problems=_problems(err),
                                 spec_text=pasted)
    try:
        await check_stored_bytes(page.store, page.user.id, settings.user_max_stored_bytes, adding=stored_size(spec))
    except StorageLimit as err:
        return await _flows_page(request, page, 409, upload_error=err.message, spec_text=pasted)
    flow = await page.store.save_flow(page.user.id, spec["name"], spec)
    return RedirectResponse("/flows?" + urlencode({"added": flow.id}), status_code=303)


@router.post("/flows/{flow_id}/runs")
async def start_run(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    form = await read_form(request, page)
    flow = await get_flows(request).get(page.user, flow_id)
    try:
        body = WorkflowCreate.model_validate({"flow_id": flow.id, "input_value": text(form.get("input_value")) or "",
                                              "session_id": clean(text(form.get("session_id"))), "mode": "background"})
    except ValidationError as e:
        return await _flows_page(request, page, 422, run_error={flow.id: "; ".join(x["msg"] for x in e.errors()[:3])})
    check_body(body, request.app.state.settings, text=("input_value", "tweaks"))
    job, _ = await page.service.submit(page.user, flow, input_value=body.input_value, session_id=body.session_id,
                                       tweaks=None, idempotency_key=None, mode="background")
    return RedirectResponse(f"/runs/{quote(job.job_id, safe='')}", status_code=303)
