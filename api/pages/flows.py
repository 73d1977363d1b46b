"""The flows page (``/flows``): the flows the person may run, each with a form to start a run,
their recent runs, and a form to add a flow (a file or pasted JSON / YAML, checked as the API's
upload is). A flow's own page (``/flows/{flow}``): its graph, its spec, the person's recent runs
of it, and for its owner its shares and delete; its export for whoever may see it."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import ValidationError

from signoff.engine.errors import FlowInvalid, Forbidden, StorageLimit, UserNotFound
from signoff.engine.langflow import to_langflow
from signoff.engine.models import FlowRecord
from signoff.engine.sharing import shared_view
from signoff.engine.usage import check_stored_bytes, stored_size
from signoff.service.access import named_user, recent_runs

from signoff.api.deps import flows_of
from signoff.api.errors import FlowTooLarge, InvalidRequest, printable
from signoff.api.flowspec import read_flow
from signoff.api.limits import check_body
from signoff.api.models import WorkflowCreate
from signoff.api.pages import formatting, graph
from signoff.api.pages.page import Page, PageContext, clean, page_router, read_form, text, with_count
from signoff.api.pages.render import render
from signoff.api.pages.views import Names

router = page_router()

RECENT_RUNS = 20  # the person's runs the page lists


async def _flows_page(request: Request, page: PageContext, status_code: int = 200, **extra: Any) -> Response:
    flows = await flows_of(request).all(page.user)
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
    flow = await flows_of(request).get(page.user, flow_id)
    try:
        body = WorkflowCreate.model_validate({"flow_id": flow.id, "input_value": text(form.get("input_value")) or "",
                                              "session_id": clean(text(form.get("session_id"))), "mode": "background"})
    except ValidationError as e:
        return await _flows_page(request, page, 422, run_error={flow.id: "; ".join(x["msg"] for x in e.errors()[:3])})
    check_body(body, request.app.state.settings, text=("input_value", "tweaks"))
    job, _ = await page.service.submit(page.user, flow, input_value=body.input_value, session_id=body.session_id,
                                       tweaks=None, idempotency_key=None, mode="background")
    return RedirectResponse(f"/runs/{quote(job.job_id, safe='')}", status_code=303)


# ---- one flow's page ---------------------------------------------------------------------------------

SPEC_CHARS = 200_000  # the spec shown on the page (the export has it whole)
SHARES_SHOWN = 100


def _spec_of(flow: FlowRecord, user_id: str) -> dict[str, Any]:
    """The spec as its reader may see it: whole for its owner, credentials masked for anyone else
    (as ``GET /api/v1/flows/{id}``)."""
    return flow.spec if flow.owner_id == user_id else shared_view(flow.spec)


async def _flow_page(request: Request, page: PageContext, flow_id: str, status_code: int = 200,
                     **extra: Any) -> Response:
    flow = await flows_of(request).get(page.user, flow_id)  # FlowNotFound (the 404 page) unless they may see it
    spec = _spec_of(flow, page.user.id)
    names = Names(page.store)
    runs = [{"job": job, "flow_name": flow.name, "duration": formatting.run_duration(job)}
            for _row, job in await recent_runs(page.store, page.user, flow_id=flow.id, limit=RECENT_RUNS)]
    mine = flow.owner_id == page.user.id
    shares = [{"user_id": uid, "name": await names.user(uid), "actions": actions}
              for uid, actions in await page.store.list_shares(flow.id, limit=SHARES_SHOWN)] if mine else []
    text_spec = json.dumps(spec, ensure_ascii=False, indent=2, default=str)
    await with_count(request, page)
    return render(request, "flow.html", status_code, flow=flow, mine=mine, owner_name=await names.user(flow.owner_id),
                  graph=graph.layout(spec, graph.steps(spec)), graph_desc="The flow's steps",
                  spec_text=text_spec if len(text_spec) <= SPEC_CHARS else text_spec[:SPEC_CHARS] + "\n…",
                  spec_cut=len(text_spec) > SPEC_CHARS, runs=runs, shares=shares,
                  shared=request.query_params.get("shared"), revoked=request.query_params.get("revoked"), **extra)


@router.get("/flows/{flow_id}")
async def flow_page(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    return await _flow_page(request, page, flow_id)


@router.get("/flows/{flow_id}/export")
async def flow_export(request: Request, flow_id: str, page: PageContext = Page, format: str = "signoff") -> Response:
    """The spec as a file to download (``format=langflow``: a Langflow export), as the API's export."""
    flow = await flows_of(request).get(page.user, flow_id)
    spec = _spec_of(flow, page.user.id)
    doc = to_langflow(spec, flow_id=flow.id) if format == "langflow" else spec
    filename = re.sub(r"[^A-Za-z0-9._-]+", "-", flow.name).strip("-")[:80] or flow.id
    return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{filename}.json"',
                                      "Cache-Control": "no-store"})


async def _owned(request: Request, page: PageContext, flow_id: str) -> FlowRecord:
    flow = await flows_of(request).get(page.user, flow_id)
    if flow.owner_id != page.user.id:
        raise Forbidden("Only the flow's owner may share or delete it")  # (the API's 403)
    return flow


@router.post("/flows/{flow_id}/shares")
async def flow_share(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    """Share the flow with a person (by name or id) to run it: the API's ``POST .../shares``."""
    form = await read_form(request, page)
    flow = await _owned(request, page, flow_id)
    ref = clean(text(form.get("user")))
    if ref is None:
        return await _flow_page(request, page, flow.id, 422, share_error="Write the name of the person to share it with.")
    try:
        target = await named_user(page.store, ref)
    except UserNotFound:
        return await _flow_page(request, page, flow.id, 422, share_error=f"No one is named “{ref}”.", share_user=ref)
    if target.id == page.user.id:
        return await _flow_page(request, page, flow.id, 422, share_error="It is your flow already.", share_user=ref)
    await page.store.grant_share(flow.id, target.id, ["execute"])
    return RedirectResponse(f"/flows/{quote(flow.id, safe='')}?" + urlencode({"shared": target.name}), status_code=303)


@router.post("/flows/{flow_id}/shares/revoke")
async def flow_unshare(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    """Take a share back (the API's ``DELETE .../shares/{user}``): their open streams of its runs end now."""
    form = await read_form(request, page)
    flow = await _owned(request, page, flow_id)
    user_id = clean(text(form.get("user_id")))
    if user_id is None or not await page.store.revoke_share(flow.id, user_id):
        return await _flow_page(request, page, flow.id, 422, share_error="That person no longer has a share.")
    page.service.feed.recheck(user_id)
    name = await Names(page.store).user(user_id)
    return RedirectResponse(f"/flows/{quote(flow.id, safe='')}?" + urlencode({"revoked": name}), status_code=303)


@router.post("/flows/{flow_id}/delete")
async def flow_delete(request: Request, flow_id: str, page: PageContext = Page) -> Response:
    """Delete the flow (its owner, once they ticked the confirmation): its runs still going are
    cancelled first (RunService.delete_flow, as the API's ``DELETE``)."""
    form = await read_form(request, page)
    flow = await _owned(request, page, flow_id)
    if text(form.get("confirm")) != "yes":
        return await _flow_page(request, page, flow.id, 422,
                                delete_error="Tick the box to confirm: deleting cannot be undone.")
    await page.service.delete_flow(page.user, flow)
    return RedirectResponse("/flows?" + urlencode({"deleted": flow.name[:200]}), status_code=303)
