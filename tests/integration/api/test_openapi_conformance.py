"""The OpenAPI document says what the routes really answer: every route is driven through its
real paths (success and each error it can give: 401, 403, 404, 409, 413, 422, 503), and every
answer is checked by schemathesis's response checks against the app's own document: the status
is declared, the content type is declared for it, the body fits the declared schema (signoff's
error body for every error, never FastAPI's ``HTTPValidationError``), and no 5xx but the
declared 503. The random side is tests/acceptance/test_fuzz_openapi.py."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from signoff.api.app import create_app
from signoff.engine.models import JobStatus

from tests.integration.api.conftest import REFUND, Harness

CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


class Checked:
    """An httpx client whose every answer is validated against the OpenAPI operation it names."""

    def __init__(self, schema: Any, client: httpx.AsyncClient) -> None:
        self.schema = schema
        self.client = client
        self.seen: set[tuple[str, str, int]] = set()

    async def __call__(self, method: str, template: str, expect: int, *, path: dict[str, str] | None = None,
                       **kw: Any) -> httpx.Response:
        r = await self.client.request(method, template.format(**(path or {})), **kw)
        assert r.status_code == expect, (method, template, r.status_code, r.text[:500])
        case = self.schema[template][method].Case(path_parameters=path or {})
        checks = CHECKS if expect == 503 else [*CHECKS, not_a_server_error]
        case.validate_response(r, checks=checks)
        if r.status_code >= 400:
            detail = r.json()["detail"]
            assert detail["code"] and detail["message"], detail
        self.seen.add((method, template, r.status_code))
        return r


def test_the_document_declares_signoffs_error_body_everywhere() -> None:
    doc = create_app().openapi()
    text = json.dumps(doc)
    assert "HTTPValidationError" not in text and "ValidationError\"" not in text
    for path, item in doc["paths"].items():
        for method, op in item.items():
            errors = {s: r for s, r in op["responses"].items() if s >= "400"}
            assert errors or path == "/health/live", (method, path)  # liveness answers 200 or nothing
            for status, response in errors.items():
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            if path.startswith("/api/"):
                assert "401" in errors, (method, path)
            if "requestBody" in op:
                assert {"413", "422"} <= set(errors), (method, path)
    detail = doc["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"error", "code", "message"} and {"job_id", "problems"} <= set(detail["properties"])


def test_a_model_that_shapes_its_own_output_keeps_its_schema() -> None:
    """ResumeResponse leaves out its empty vote fields with a serializer of its own: the document
    still describes its fields (an annotated serializer made it an untyped object), so the
    conformance checks below check the resume's body."""
    resume = create_app().openapi()["components"]["schemas"]["ResumeResponse"]
    assert {"job_id", "status", "votes", "required", "run"} <= set(resume["properties"])


async def test_every_route_answers_what_the_document_declares(api: Harness) -> None:
    schema = schemathesis.openapi.from_dict(api.app.openapi())
    alice_id, bob_id = api.users["alice"][0], api.users["bob"][0]
    async with api.client("alice") as a, api.client("bob") as b, api.client() as anon:
        A, B, N = Checked(schema, a), Checked(schema, b), Checked(schema, anon)
        await N("GET", "/health", 200)
        await N("GET", "/health/ready", 200)
        await N("GET", "/health/live", 200)

        # flows
        flow = (await A("POST", "/api/v1/flows", 201, json={**REFUND, "name": "conformance"})).json()["id"]
        await A("POST", "/api/v1/flows", 201, content="name: y\nnodes: [{id: a, type: ChatInput}]\n",
                headers={"content-type": "application/yaml"})
        await A("POST", "/api/v1/flows", 422, json={"name": "bad", "nodes": [{"id": "a", "type": "Nope"}]})
        await A("POST", "/api/v1/flows", 422, content="a: &x 1\n", headers={"content-type": "application/yaml"})
        await A("POST", "/api/v1/flows", 422, content=b"{nope", headers={"content-type": "application/json"})
        await A("POST", "/api/v1/flows", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await N("POST", "/api/v1/flows", 401, json=REFUND)
        await A("GET", "/api/v1/flows", 200)
        await N("GET", "/api/v1/flows", 401)
        await A("GET", "/api/v1/flows/{flow_id}", 200, path={"flow_id": flow})
        await B("GET", "/api/v1/flows/{flow_id}", 404, path={"flow_id": flow})
        # Langflow: an export uploads (and is refused with every problem), a flow exports
        exported = (await A("GET", "/api/v1/flows/{flow_id}/export", 200, path={"flow_id": flow})).json()
        await A("GET", "/api/v1/flows/{flow_id}/export", 200, path={"flow_id": flow}, params={"format": "signoff"})
        await A("GET", "/api/v1/flows/{flow_id}/export", 422, path={"flow_id": flow}, params={"format": "xml"})
        await B("GET", "/api/v1/flows/{flow_id}/export", 404, path={"flow_id": flow})
        await A("POST", "/api/v1/flows", 201, json=exported)
        await A("POST", "/api/v1/flows", 422, json={"name": "lf", "data": {"nodes": [
            {"id": "Chroma-x1", "data": {"id": "Chroma-x1", "type": "Chroma", "node": {"template": {}}}}], "edges": []}})
        await B("POST", "/api/v1/flows/{flow_id}/shares", 404, path={"flow_id": flow}, json={"user": alice_id})
        await A("POST", "/api/v1/flows/{flow_id}/shares", 404, path={"flow_id": flow}, json={"user": "nobody-here"})
        await A("POST", "/api/v1/flows/{flow_id}/shares", 422, path={"flow_id": flow}, json={"user": ""})
        await A("POST", "/api/v1/flows/{flow_id}/shares", 413, path={"flow_id": flow},
                content=b"x" * (api.settings.max_body_bytes + 1))
        await A("POST", "/api/v1/flows/{flow_id}/shares", 201, path={"flow_id": flow}, json={"user": bob_id})
        await B("POST", "/api/v1/flows/{flow_id}/shares", 403, path={"flow_id": flow}, json={"user": alice_id})
        await B("DELETE", "/api/v1/flows/{flow_id}/shares/{user_ref}", 403, path={"flow_id": flow, "user_ref": bob_id})
        await B("DELETE", "/api/v1/flows/{flow_id}", 403, path={"flow_id": flow})

        # runs: submit in each mode, status, pending
        body = {"flow_id": flow, "input_value": "refund 42"}
        job = (await A("POST", "/api/v2/workflows", 200, json={**body, "session_id": "bg"})).json()
        assert job["object"] == "job"
        sync = (await A("POST", "/api/v2/workflows", 200, json={**body, "mode": "sync", "session_id": "s1"})).json()
        assert sync["object"] == "response" and sync["status"] == "suspended"
        job_id = sync["job_id"]
        stream = await A("POST", "/api/v2/workflows", 200, json={**body, "mode": "stream", "session_id": "st"})
        assert stream.headers["content-type"].startswith("text/event-stream")
        await A("POST", "/api/v2/workflows", 404, json={**body, "flow_id": "no-such-flow"})
        await A("POST", "/api/v2/workflows", 422, json={**body, "mode": "warp"})
        await A("POST", "/api/v2/workflows", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await N("POST", "/api/v2/workflows", 401, json=body)
        await A("GET", "/api/v2/workflows", 200, params={"job_id": job_id})
        await A("GET", "/api/v2/workflows", 404, params={"job_id": "nope"})
        await A("GET", "/api/v2/workflows", 422)
        await A("GET", "/api/v2/workflows/{job_id}", 200, path={"job_id": job_id})
        await B("GET", "/api/v2/workflows/{job_id}", 404, path={"job_id": job_id})
        await A("GET", "/api/v2/workflows/{job_id}/pending", 200, path={"job_id": job_id})
        await A("GET", "/api/v2/workflows/pending", 200)
        await A("GET", "/api/v2/workflows/pending", 422, params={"flow_id": ""})
        await A("GET", "/api/v2/workflows/{job_id}/events", 200, path={"job_id": job_id})
        await A("GET", "/api/v2/workflows/{job_id}/events", 422, path={"job_id": job_id},
                headers={"Last-Event-ID": "abc"})
        await A("GET", "/api/v2/workflows/{job_id}/events", 404, path={"job_id": "nope"})
        # the event log with its hash chain (docs/audit.md)
        await A("GET", "/api/v1/runs/{job_id}/events", 200, path={"job_id": job_id}, params={"limit": 1})
        await A("GET", "/api/v1/runs/{job_id}/events", 422, path={"job_id": job_id}, params={"limit": 0})
        await A("GET", "/api/v1/runs/{job_id}/events", 404, path={"job_id": "nope"})

        # 429: alice has no live stream left (SIGNOFF_MAX_STREAMS_PER_USER)
        feed = api.service.feed
        feed.max_per_user, kept = 0, feed.max_per_user
        try:
            await A("GET", "/api/v2/workflows/{job_id}/events", 429, path={"job_id": job_id})
            await A("POST", "/api/v2/workflows", 429, json={**body, "mode": "stream", "session_id": "st2"})
            await A("POST", "/api/v1/agui/{flow_id}", 429, path={"flow_id": flow},
                    json={"threadId": "t429", "runId": "r429", "messages": [{"id": "m", "role": "user", "content": "x"}]})
        finally:
            feed.max_per_user = kept

        # AG-UI: a run (AG-UI events as SSE; it stops at the gate), not a RunAgentInput, too big
        agui = {"threadId": "agui", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "refund 1"}]}
        run = await A("POST", "/api/v1/agui/{flow_id}", 200, path={"flow_id": flow}, json=agui)
        assert run.headers["content-type"].startswith("text/event-stream") and '"interrupt"' in run.text
        await A("POST", "/api/v1/agui/{flow_id}", 422, path={"flow_id": flow}, json={"threadId": "agui"})
        await A("POST", "/api/v1/agui/{flow_id}", 413, path={"flow_id": flow},
                content=b"x" * (api.settings.max_body_bytes + 1))
        await N("POST", "/api/v1/agui/{flow_id}", 401, path={"flow_id": flow}, json=agui)

        # resume: 404, 403, 422, 409, 413, then 200; the pending request is gone afterwards
        resume = {"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}}
        shared = (await B("POST", "/api/v2/workflows", 200, json={**body, "mode": "sync", "session_id": "b"})).json()
        await A("POST", "/api/v2/workflows/{job_id}/resume", 404, path={"job_id": shared["job_id"]},
                json={**resume, "request_id": f"gate:{shared['job_id']}"})
        await A("DELETE", "/api/v1/flows/{flow_id}/shares/{user_ref}", 204, path={"flow_id": flow, "user_ref": bob_id})
        await A("DELETE", "/api/v1/flows/{flow_id}/shares/{user_ref}", 404, path={"flow_id": flow, "user_ref": bob_id})
        await B("POST", "/api/v2/workflows/{job_id}/resume", 403, path={"job_id": shared["job_id"]},
                json={**resume, "request_id": f"gate:{shared['job_id']}"})
        await A("POST", "/api/v2/workflows/{job_id}/resume", 422, path={"job_id": job_id},
                json={**resume, "decision": {"action_id": "maybe"}})
        await A("POST", "/api/v2/workflows/{job_id}/resume", 422, path={"job_id": job_id}, json={"request_id": "x"})
        await A("POST", "/api/v2/workflows/{job_id}/resume", 409, path={"job_id": job_id},
                json={**resume, "request_id": "gate:stale"})
        await A("POST", "/api/v2/workflows/{job_id}/resume", 413, path={"job_id": job_id},
                content=b"x" * (api.settings.max_body_bytes + 1))
        await N("POST", "/api/v2/workflows/{job_id}/resume", 401, path={"job_id": job_id}, json=resume)
        await A("POST", "/api/v2/workflows/{job_id}/resume", 200, path={"job_id": job_id}, json=resume)
        await api.wait_status(job_id, JobStatus.completed)
        done = (await A("GET", "/api/v2/workflows/{job_id}", 200, path={"job_id": job_id})).json()
        assert done["object"] == "response" and done["output"]["text"] == "Refund sent"
        await A("GET", "/api/v2/workflows/{job_id}/pending", 404, path={"job_id": job_id})

        # the oversight record (docs/audit.md): the decision's receipt, the keys, the operator's export
        assert len((await A("GET", "/api/v1/runs/{job_id}/receipts", 200, path={"job_id": job_id})).json()["receipts"]) == 1
        await B("GET", "/api/v1/runs/{job_id}/receipts", 404, path={"job_id": job_id})
        await A("GET", "/api/v1/runs/{job_id}/receipts", 422, path={"job_id": job_id}, params={"limit": 0})
        await B("GET", "/api/v1/audit/public-key", 200)
        await A("GET", "/api/v1/audit/receipts", 403, params={"since": "2026-01-01"})
        api.settings.operators = bob_id
        try:
            await B("GET", "/api/v1/audit/receipts", 200, params={"since": "2000-01-01", "limit": 1})
            await B("GET", "/api/v1/audit/receipts", 422, params={"since": "2000-01-01", "flow": "a\x00b"})
            await B("GET", "/api/v1/audit/receipts", 422, params={"since": "0001-01-01T00:00:00+14:00"})
        finally:
            api.settings.operators = ""

        # stop
        await A("POST", "/api/v2/workflows/stop", 200, json={"job_id": job["job_id"]})
        await A("POST", "/api/v2/workflows/stop", 200, json={"job_id": job_id})
        await A("POST", "/api/v2/workflows/stop", 404, json={"job_id": str(uuid.uuid4())})
        assigned = (await A("POST", "/api/v1/flows", 201, json={**REFUND, "name": "assigned", "nodes": [
            {**n, "params": {**n.get("params", {}), "approvers": [bob_id]}} if n["type"] == "HumanInput" else n
            for n in REFUND["nodes"]]})).json()["id"]
        theirs = (await A("POST", "/api/v2/workflows", 200, json={"flow_id": assigned, "input_value": "x",
                                                                  "mode": "sync", "session_id": "as"})).json()
        await B("POST", "/api/v2/workflows/stop", 403, json={"job_id": theirs["job_id"]})  # an approver
        await A("POST", "/api/v2/workflows/stop", 422, json={})
        await A("POST", "/api/v2/workflows/stop", 413, content=b"x" * (api.settings.max_body_bytes + 1))

        # resume-batch: each item answered in the body (here the run stopped above: its 409)
        batch = {"items": [{"job_id": job_id, **resume}]}
        answered = (await A("POST", "/api/v2/workflows/resume-batch", 200, json=batch)).json()
        assert [r["status_code"] for r in answered["results"]] == [409] and answered["applied"] == 0
        await A("POST", "/api/v2/workflows/resume-batch", 422, json={"items": []})
        await A("POST", "/api/v2/workflows/resume-batch", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await N("POST", "/api/v2/workflows/resume-batch", 401, json=batch)

        # monitor
        await A("GET", "/api/v1/monitor/messages", 200, params={"session_id": "s1"})
        await A("GET", "/api/v1/monitor/messages", 422)
        await A("GET", "/api/v1/monitor/traces", 200, params={"flow_id": flow})
        await A("GET", "/api/v1/monitor/traces", 422, params={"limit": 0})
        await A("GET", "/api/v1/monitor/traces/{run_id}", 200, path={"run_id": job_id})
        await A("GET", "/api/v1/monitor/traces/{run_id}", 404, path={"run_id": "nope"})
        await N("GET", "/api/v1/monitor/traces/{run_id}", 401, path={"run_id": job_id})

        # delete a run: an approver 403, a waiting run 409, an ended one 204, then 404
        await B("DELETE", "/api/v2/workflows/{job_id}", 403, path={"job_id": theirs["job_id"]})
        await A("DELETE", "/api/v2/workflows/{job_id}", 409, path={"job_id": theirs["job_id"]})
        await N("DELETE", "/api/v2/workflows/{job_id}", 401, path={"job_id": job_id})
        await B("DELETE", "/api/v2/workflows/{job_id}", 404, path={"job_id": job_id})
        await A("DELETE", "/api/v2/workflows/{job_id}", 204, path={"job_id": job_id})
        await A("DELETE", "/api/v2/workflows/{job_id}", 404, path={"job_id": job_id})

        await A("DELETE", "/api/v1/flows/{flow_id}", 204, path={"flow_id": flow})
        await A("DELETE", "/api/v1/flows/{flow_id}", 404, path={"flow_id": flow})

        # secrets
        name = f"conformance-{uuid.uuid4().hex[:6]}"
        await A("PUT", "/api/v1/secrets/{name}", 200, path={"name": name}, json={"value": "v"})
        await A("PUT", "/api/v1/secrets/{name}", 422, path={"name": name}, json={"value": ""})
        await A("PUT", "/api/v1/secrets/{name}", 413, path={"name": name},
                content=b"x" * (api.settings.max_body_bytes + 1))
        await A("GET", "/api/v1/secrets", 200)
        await B("DELETE", "/api/v1/secrets/{name}", 404, path={"name": name})
        await A("DELETE", "/api/v1/secrets/{name}", 422, path={"name": "x" * 201})
        await A("DELETE", "/api/v1/secrets/{name}", 204, path={"name": name})

        # groups
        group = f"g-{uuid.uuid4().hex[:6]}"
        await A("POST", "/api/v1/groups", 201, json={"name": group, "members": [bob_id]})
        await A("POST", "/api/v1/groups", 409, json={"name": group})
        await A("POST", "/api/v1/groups", 404, json={"name": "other", "members": ["nobody-here"]})
        await A("POST", "/api/v1/groups", 422, json={"name": "no spaces"})
        await A("POST", "/api/v1/groups", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await A("GET", "/api/v1/groups", 200)
        await A("GET", "/api/v1/groups/{name}", 200, path={"name": group})
        await B("GET", "/api/v1/groups/{name}", 404, path={"name": group})
        await A("GET", "/api/v1/groups/{name}", 422, path={"name": "-x"})
        await A("POST", "/api/v1/groups/{name}/members", 200, path={"name": group}, json={"users": [alice_id]})
        await B("POST", "/api/v1/groups/{name}/members", 404, path={"name": group}, json={"users": [bob_id]})
        await A("POST", "/api/v1/groups/{name}/members", 422, path={"name": group}, json={"users": []})
        await A("POST", "/api/v1/groups/{name}/members", 413, path={"name": group},
                content=b"x" * (api.settings.max_body_bytes + 1))
        await A("DELETE", "/api/v1/groups/{name}/members/{member}", 200, path={"name": group, "member": bob_id})
        await A("DELETE", "/api/v1/groups/{name}/members/{member}", 404, path={"name": group, "member": "nobody-here"})
        await A("DELETE", "/api/v1/groups/{name}/members/{member}", 422, path={"name": "-x", "member": bob_id})
        await B("DELETE", "/api/v1/groups/{name}", 404, path={"name": group})
        await A("DELETE", "/api/v1/groups/{name}", 422, path={"name": "-x"})
        await A("DELETE", "/api/v1/groups/{name}", 204, path={"name": group})

        # webhooks
        api.egress.add("127.0.0.1:9")
        hook = (await A("POST", "/api/v1/webhooks", 201, json={"url": "http://127.0.0.1:9/hook",
                                                              "secret": "s" * 16})).json()
        await A("POST", "/api/v1/webhooks", 422, json={"url": "http://10.255.255.1/hook", "secret": "s" * 16})
        await A("POST", "/api/v1/webhooks", 422, json={"url": "http://127.0.0.1:9/hook", "secret": "short"})
        await A("POST", "/api/v1/webhooks", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await A("GET", "/api/v1/webhooks", 200)
        await A("GET", "/api/v1/webhooks/{webhook_id}/deliveries", 200, path={"webhook_id": hook["id"]})
        await B("GET", "/api/v1/webhooks/{webhook_id}/deliveries", 404, path={"webhook_id": hook["id"]})
        await A("GET", "/api/v1/webhooks/{webhook_id}/deliveries", 422, path={"webhook_id": hook["id"]},
                params={"limit": 0})
        await B("DELETE", "/api/v1/webhooks/{webhook_id}", 404, path={"webhook_id": hook["id"]})
        await A("DELETE", "/api/v1/webhooks/{webhook_id}", 422, path={"webhook_id": "x" * 201})
        limit = api.settings.max_webhooks_per_user
        api.settings.max_webhooks_per_user = 1
        try:
            await A("POST", "/api/v1/webhooks", 409, json={"url": "http://127.0.0.1:9/hook", "secret": "s" * 16})
        finally:
            api.settings.max_webhooks_per_user = limit
        await A("DELETE", "/api/v1/webhooks/{webhook_id}", 204, path={"webhook_id": hook["id"]})

        # mutes
        await A("PUT", "/api/v1/users/me/mutes/{person}", 200, path={"person": bob_id})
        await A("PUT", "/api/v1/users/me/mutes/{person}", 404, path={"person": "nobody-" + uuid.uuid4().hex})
        await A("PUT", "/api/v1/users/me/mutes/{person}", 422, path={"person": alice_id})
        await A("GET", "/api/v1/users/me/mutes", 200)
        await A("DELETE", "/api/v1/users/me/mutes/{person}", 404, path={"person": "nobody-" + uuid.uuid4().hex})
        await A("DELETE", "/api/v1/users/me/mutes/{person}", 422, path={"person": "x" * 201})
        await A("DELETE", "/api/v1/users/me/mutes/{person}", 204, path={"person": bob_id})
        # standing approvals (made by a tool approval's remember; here straight in the store)
        from datetime import timedelta

        from signoff.engine.models import StandingApproval, utcnow

        now = utcnow()
        rule = await api.store.create_standing_approval(StandingApproval(
            id=f"sa_{uuid.uuid4().hex}", maker_id=alice_id, flow_id=api.flows["refund"], flow_owner_id=alice_id,
            tool="refund", scope="flow", job_id="j", request_id="r", created_at=now,
            expires_at=now + timedelta(hours=1)))
        await A("GET", "/api/v1/standing-approvals", 200)
        await A("GET", "/api/v1/standing-approvals/{rule_id}", 200, path={"rule_id": rule.id})
        await B("GET", "/api/v1/standing-approvals/{rule_id}", 404, path={"rule_id": rule.id})
        await A("GET", "/api/v1/standing-approvals/{rule_id}", 422, path={"rule_id": "x" * 201})
        await B("DELETE", "/api/v1/standing-approvals/{rule_id}", 404, path={"rule_id": rule.id})
        await A("DELETE", "/api/v1/standing-approvals/{rule_id}", 422, path={"rule_id": "x" * 201})
        await A("DELETE", "/api/v1/standing-approvals/{rule_id}", 204, path={"rule_id": rule.id})

        # contacts (DESIGN §14) and a run's notification log (its owner's)
        await A("PATCH", "/api/v1/users/me", 200, json={"email": "alice@example.com"})
        await A("PATCH", "/api/v1/users/me", 422, json={"email": "alice@example.com\r\nBcc: x@example.com"})
        await A("PATCH", "/api/v1/users/me", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await A("PATCH", "/api/v1/users/me", 200, json={"slack": "U0CONFORM1"})
        await api.store.set_contacts(alice_id, {"slack": "U0CONFORM1"}, verified=True)  # (a pending one is taken)
        await B("PATCH", "/api/v1/users/me", 409, json={"slack": "U0CONFORM1"})
        await A("PATCH", "/api/v1/users/me", 200, json={"slack": None})
        # a new confirmation of a pending contact (no channel configured here: nothing to send it on)
        await A("POST", "/api/v1/users/me/verify", 202, json={"contact": "email"})
        await A("POST", "/api/v1/users/me/verify", 422, json={"contact": "slack"})
        await A("POST", "/api/v1/users/me/verify", 422, json={"contact": "phone"})
        await A("POST", "/api/v1/users/me/verify", 413, content=b"x" * (api.settings.max_body_bytes + 1))
        await A("GET", "/api/v2/workflows/{job_id}/notifications", 200, path={"job_id": theirs["job_id"]})
        await B("GET", "/api/v2/workflows/{job_id}/notifications", 403, path={"job_id": theirs["job_id"]})
        await A("GET", "/api/v2/workflows/{job_id}/notifications", 404, path={"job_id": str(uuid.uuid4())})
        await A("GET", "/api/v2/workflows/{job_id}/notifications", 422, path={"job_id": theirs["job_id"]},
                params={"limit": 0})

        # stored bytes: what the caller keeps, and 409 STORAGE_LIMIT at the budget
        r = await A("GET", "/api/v1/users/me", 200)
        assert r.json()["id"] == alice_id and r.json()["stored_bytes"] > 0
        budget = api.settings.user_max_stored_bytes
        api.settings.user_max_stored_bytes = r.json()["stored_bytes"]
        try:
            await A("POST", "/api/v1/flows", 409, json=REFUND)
            await A("POST", "/api/v2/workflows", 409, json={"flow_id": api.flows["refund"], "input_value": "x"})
        finally:
            api.settings.user_max_stored_bytes = budget

    # 503: a process without Temporal, and a database that does not answer
    down = create_app(api.settings, store=api.store)  # no service: its lifespan is not run
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=down), base_url="http://api",
                                 headers={"x-api-key": api.users["alice"][1]}) as c:
        D = Checked(schema, c)
        await D("POST", "/api/v2/workflows", 503, json={"flow_id": api.flows["refund"], "input_value": "x"})
        await D("POST", "/api/v2/workflows/stop", 503, json={"job_id": job_id})
        await D("POST", "/api/v2/workflows/{job_id}/resume", 503, path={"job_id": job_id}, json=resume)
        await D("POST", "/api/v1/agui/{flow_id}", 503, path={"flow_id": api.flows["refund"]}, json=agui)

    # 429 RATE_LIMITED on every write, once the user's bucket is empty (SIGNOFF_WRITE_RATE)
    limited = create_app(api.settings.model_copy(update={"write_rate": 0.001, "write_burst": 1}), store=api.store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://api",
                                 headers={"x-api-key": api.users["alice"][1]}) as c:
        L = Checked(schema, c)
        await c.post("/api/v1/flows", json=REFUND)  # the one write the bucket held
        for template, item in api.app.openapi()["paths"].items():
            for method in item:
                if template.startswith("/api/") and method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                    names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
                    r = await L(method.upper(), template, 429, path={n: "x" for n in names}, json={"job_id": "x"})
                    assert int(r.headers["retry-after"]) >= 1

    class NoDatabase:
        async def ping(self) -> None:
            raise ConnectionError("down")

    dead = create_app(api.settings, store=NoDatabase())  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=dead), base_url="http://api") as c:
        health = Checked(schema, c)
        await health("GET", "/health", 503)
        r = await health("GET", "/health/ready", 503)
        assert r.json()["detail"]["checks"]["store"].startswith("down") and r.headers["retry-after"]
        await health("GET", "/health/live", 200)  # alive, not ready

    # 401 on every /api route, whatever it is asked
    doc = api.app.openapi()
    async with api.client() as c:
        anon = Checked(schema, c)
        for template, item in doc["paths"].items():
            for method in item:
                if template.startswith("/api/"):
                    names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
                    await anon(method.upper(), template, 401, path={n: "x" for n in names}, json={"job_id": "x"})

    declared = {(m.upper(), p, int(s)) for p, item in doc["paths"].items() for m, op in item.items()
                for s in op["responses"]}
    assert declared - A.seen - B.seen - N.seen - D.seen - L.seen - health.seen - anon.seen == set()  # every one answered


