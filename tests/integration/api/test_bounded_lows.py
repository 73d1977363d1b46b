"""The lows of issue 28, through real HTTP against the real app (SQLite and PostgreSQL): a NUL
character in any path parameter of any route (PostgreSQL's text cannot hold one: secrets and
webhooks answered 500) and a page form field whose JSON nests past what Python reads (500) get a
4xx with a code, or the form shown again naming the field."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from fastapi.routing import APIRoute

from signoff.engine.models import JobStatus

from tests.integration.api.conftest import Harness
from tests.integration.api.test_trust import signed_in

NUL = "x%00y"
BODIES: dict[str, Any] = {  # a body each POST / PUT route takes, so that the path is what is tested
    "/api/v1/flows/{flow_id}/shares": {"user": "bob"},
    "/api/v2/workflows/{job_id}/resume": {"request_id": "r", "decision": {"action_id": "approve"}},
    "/api/v1/secrets/{name}": {"value": "v"},
    "/api/v1/groups/{name}/members": {"user": "bob"},
    "/api/v1/agui/{flow_id}": {"threadId": "t", "runId": "r", "messages": [], "tools": [], "context": [],
                               "state": {}, "forwardedProps": {}},
}


def routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) of the app with a path parameter, the pages' included."""
    found = []
    for route in app.routes:
        inner = getattr(route, "original_router", None)
        prefix = route.include_context.prefix if inner is not None else ""
        for r in (inner.routes if inner is not None else [route]):
            if isinstance(r, APIRoute) and "{" in r.path:
                found += [(m, prefix + r.path) for m in sorted(r.methods - {"HEAD"})]
    return found


@pytest.mark.both_stores  # PostgreSQL text cannot hold NUL: a 500 there, not on SQLite
async def test_nul_in_any_path_parameter_is_a_4xx_with_a_code(api: Harness) -> None:
    found = routes(api.app)
    assert ("DELETE", "/api/v1/secrets/{name}") in found and ("POST", "/runs/{job_id}/requests/{request_id}") in found
    assert len(found) >= 20
    async with api.client("alice") as c, api.client() as browser:
        browser.headers["origin"] = "http://api"
        await signed_in(browser, api.users["alice"][1])
        csrf = re.search(r'name="csrf" value="([^"]+)"', (await browser.get("/flows")).text).group(1)
        wrong = []
        for method, path in found:
            url = re.sub(r"\{[a-z_]+\}", NUL, path)
            if path.startswith("/api/v1/agui/"):  # AG-UI answers in its stream: RUN_ERROR with the code
                r = await c.request(method, url, json=BODIES[path])
                if r.status_code != 200 or '"type":"RUN_ERROR"' not in r.text or '"code":"FLOW_NOT_FOUND"' not in r.text:
                    wrong.append((method, path, r.status_code, r.text[:300]))
            elif path.startswith("/api/"):
                r = await c.request(method, url, json=BODIES.get(path) if method in ("POST", "PUT") else None)
                if not 400 <= r.status_code < 500 or not r.json()["detail"].get("code"):
                    wrong.append((method, path, r.status_code, r.text[:300]))
            else:  # a page: signed in, its form with the session's token
                data = {"csrf": csrf, "action_id": "approve", "input_value": "x"} if method == "POST" else None
                r = await browser.request(method, url, data=data)
                if not 400 <= r.status_code < 500:
                    wrong.append((method, path, r.status_code, r.text[:300]))
        assert not wrong, "; ".join(f"{m} {p}: {s} {t[:120]}" for m, p, s, t in wrong)


async def test_a_page_form_field_too_deep_to_read_shows_the_form_again(api: Harness) -> None:
    flow = {"name": f"any json {uuid.uuid4().hex[:6]}", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"fields": {"type": "object", "properties": {
            "data": {"title": "Data", "description": "any JSON"}}}}},
        {"id": "ok", "type": "ChatOutput"}, {"id": "no", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"},
                  {"from": "gate.branch_reject", "to": "no.input_value"}]}
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=flow)
        assert r.status_code == 201, r.text
        r = await c.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "x", "mode": "sync"})
        assert r.json()["status"] == "suspended", r.text
        job_id, request_id = r.json()["job_id"], r.json()["human_request"]["request_id"]
    card = f"/runs/{job_id}/requests/{request_id}"
    async with api.client() as browser:
        browser.headers["origin"] = "http://api"
        await signed_in(browser, api.users["alice"][1])
        page = (await browser.get(card)).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        for deep in ("[" * 100_000, "[" * 500 + "]" * 500):  # past Python's recursion; past SIGNOFF_MAX_JSON_DEPTH
            r = await browser.post(card, data={"csrf": csrf, "action_id": "approve", "v.data": deep})
            assert r.status_code == 422, (r.status_code, r.text[:500])
            assert "too deep" in r.text or "levels deep" in r.text, r.text[:2000]
        job = await api.store.get_job(job_id)
        assert job.status == JobStatus.suspended
        r = await browser.post(card, data={"csrf": csrf, "action_id": "approve", "v.data": '{"ok": [1, 2]}'})
        assert r.status_code in (200, 303), r.text[:500]
    job = await api.wait_status(job_id, JobStatus.completed)
    (decided,) = [e for e in await api.store.read_events(job_id) if e.event == "human_input_decision"]
    assert decided.data["via"] == "page", decided.data  # the card's decision says where it was made
