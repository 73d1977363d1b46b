"""Auth, visibility (404 never 403), shares and revoke (403, job stays suspended), the resume
order 404 → 403 → 422 → 409, and malformed input getting a 4xx with a code (never FastAPI's 400:
a body it cannot read is 422 INVALID_REQUEST too). The input limits in depth are in
test_input_limits.py."""

from __future__ import annotations

import pytest
import yaml

from signoff.engine.models import JobStatus

from tests.integration.api.conftest import REFUND, Harness, submit_suspended


def code(r) -> str:
    body = r.json()
    assert set(body) == {"detail"} and {"error", "code", "message"} <= set(body["detail"]), body
    return body["detail"]["code"]


async def test_health_needs_no_key(api: Harness) -> None:
    async with api.client() as c:
        r = await c.get("/health")
        assert r.status_code == 200 and r.json()["temporal"] == "ok"


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "nope"}, {"x-api-key": "x" * 500}])
@pytest.mark.parametrize("body", [b"{not json", b'{"flow_id": 1}', b"x" * 10_000_000])
async def test_401_whatever_the_body(api: Harness, headers, body) -> None:
    async with api.client() as c:
        r = await c.post("/api/v2/workflows", content=body, headers={"content-type": "application/json", **headers})
        assert r.status_code == 401 and code(r) == "UNAUTHORIZED"


async def test_other_users_jobs_and_flows_are_404(api: Harness) -> None:
    job_id = (await submit_suspended(api))["job_id"]
    async with api.client("bob") as c:
        for path in (f"/api/v2/workflows/{job_id}", f"/api/v2/workflows/{job_id}/pending",
                     f"/api/v2/workflows/{job_id}/events", f"/api/v1/flows/{api.flows['refund']}"):
            r = await c.get(path)
            assert r.status_code == 404, path
            assert code(r) in ("JOB_NOT_FOUND", "FLOW_NOT_FOUND")
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"
        r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "x"})
        assert r.status_code == 404 and code(r) == "FLOW_NOT_FOUND"
        assert api.flows["refund"] not in [f["id"] for f in (await c.get("/api/v1/flows")).json()]
        assert job_id not in [p["job_id"] for p in (await c.get("/api/v2/workflows/pending")).json()]
    assert (await api.store.get_job(job_id)).status == JobStatus.suspended


async def test_share_then_revoke_makes_resume_403_and_keeps_the_job(api: Harness) -> None:
    flow = api.flows["refund"]
    bob_id = api.users["bob"][0]
    async with api.client("alice") as c:
        r = await c.post(f"/api/v1/flows/{flow}/shares", json={"user": bob_id})
        assert r.status_code == 201, r.text
    async with api.client("bob") as c:
        assert flow in [f["id"] for f in (await c.get("/api/v1/flows")).json()]
        r = await c.post(f"/api/v1/flows/{flow}/shares", json={"user": api.users["alice"][0]})
        assert r.status_code == 403 and code(r) == "FORBIDDEN"
    resp = await submit_suspended(api, "bob", session_id="shared")
    job_id = resp["job_id"]
    async with api.client("alice") as c:
        assert (await c.delete(f"/api/v1/flows/{flow}/shares/{bob_id}")).status_code == 204
    async with api.client("bob") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 403 and code(r) == "FORBIDDEN"
    job = await api.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending is not None
    async with api.client("bob") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "x"})
        assert r.status_code == 404 and code(r) == "FLOW_NOT_FOUND"


async def test_resume_422_then_409_and_the_job_stays_suspended(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="order"))["job_id"]
    async with api.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "maybe"}})
        assert r.status_code == 422 and code(r) == "INVALID_DECISION"
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": "gate:stale", "decision": {"action_id": "approve"}})
        assert r.status_code == 409 and code(r) == "NOT_RESUMABLE"
        assert (await api.store.get_job(job_id)).status == JobStatus.suspended
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "reject"}})
        assert r.status_code == 200
        await api.wait_status(job_id, JobStatus.completed)
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 409 and code(r) == "NOT_RESUMABLE"
        stop = (await c.post("/api/v2/workflows/stop", json={"job_id": job_id})).json()
        assert stop["status"] == "completed"
        assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["output"]["text"] == "Refund refused"


@pytest.mark.parametrize(
    "method,path,kwargs,status,expected",
    [
        ("POST", "/api/v2/workflows", {"content": b"{nope", "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"json": {"flow_id": 5, "input_value": []}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"json": {"flow_id": "f", "surprise": 1}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"json": {"flow_id": "f", "mode": "warp"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"json": {"flow_id": "f" * 1000}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"json": {"flow_id": "no-such-flow"}}, 404, "FLOW_NOT_FOUND"),
        ("POST", "/api/v2/workflows", {"content": b"[" * 3_000_000, "headers": {"content-type": "application/json"}}, 413, "BODY_TOO_LARGE"),
        ("POST", "/api/v2/workflows", {"content": b"[" * 1_500_000, "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"content": b'{"flow_id": "\xff"}', "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows", {"content": b'{"flow_id": "f", "tweaks": {"a": {"b": NaN}}}', "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("GET", "/api/v2/workflows/not-a-job", {}, 404, "JOB_NOT_FOUND"),
        ("GET", "/api/v2/workflows/%00%ff", {}, 404, "JOB_NOT_FOUND"),
        ("GET", "/api/v2/workflows", {}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows/x/resume", {"json": {"request_id": "a"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v2/workflows/not-a-job/resume", {"json": {"request_id": "a", "decision": {"action_id": "b"}}}, 404, "JOB_NOT_FOUND"),
        ("POST", "/api/v2/workflows/stop", {"json": {}}, 422, "INVALID_REQUEST"),
        ("GET", "/api/v2/workflows/x/events", {"headers": {"Last-Event-ID": "abc"}}, 404, "JOB_NOT_FOUND"),
        ("POST", "/api/v1/flows", {"content": b"a: [", "headers": {"content-type": "application/yaml"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v1/flows", {"content": b"", "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v1/flows", {"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v1/flows", {"json": [1, 2]}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v1/flows", {"content": b"[" * 1_500_000, "headers": {"content-type": "application/json"}}, 422, "FLOW_INVALID"),
        ("POST", "/api/v1/flows", {"content": b"a: &x 1\nb: *x\n", "headers": {"content-type": "application/yaml"}}, 422, "FLOW_INVALID"),
        ("POST", "/api/v1/flows", {"content": b"a: 1\n---\nb: 2\n", "headers": {"content-type": "application/yaml"}}, 422, "INVALID_REQUEST"),
        ("POST", "/api/v1/flows", {"json": {"name": "n", "nodes": [{"id": "a", "type": "Nope"}], "edges": [{"from": "a.x", "to": "b.y"}]}}, 422, "FLOW_INVALID"),
        ("POST", "/api/v1/flows", {"json": {"name": "n", "nodes": [{"id": f"n{i}", "type": "TextInput"} for i in range(501)], "edges": []}}, 422, "FLOW_TOO_LARGE"),
        ("DELETE", "/api/v1/flows/nope", {}, 404, "FLOW_NOT_FOUND"),
        ("GET", "/api/nowhere", {}, 404, "NOT_FOUND"),
        ("PUT", "/api/v2/workflows/stop", {}, 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/api/v1/monitor/messages", {}, 422, "INVALID_REQUEST"),
    ],
)
async def test_bad_input_gets_4xx_with_a_code(api: Harness, method, path, kwargs, status, expected) -> None:
    async with api.client("alice") as c:
        r = await c.request(method, path, **kwargs)
        assert r.status_code == status, r.text[:500]
        assert code(r) == expected


async def test_invalid_flow_lists_every_problem(api: Harness) -> None:
    bad = {"name": "bad", "nodes": [{"id": "a", "type": "Nope"}, {"id": "a", "type": "ChatInput"}],
           "edges": [{"from": "a.message", "to": "ghost.input_value"}]}
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=bad)
        assert r.status_code == 422 and code(r) == "FLOW_INVALID"
        assert len(r.json()["detail"]["problems"]) >= 3


async def test_yaml_upload_get_delete(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", content=yaml.safe_dump(REFUND), headers={"content-type": "application/yaml"})
        assert r.status_code == 201, r.text
        fid = r.json()["id"]
        assert (await c.get(f"/api/v1/flows/{fid}")).json()["spec"]["name"] == REFUND["name"]
    async with api.client("bob") as c:
        assert (await c.delete(f"/api/v1/flows/{fid}")).status_code == 404
    async with api.client("alice") as c:
        assert (await c.delete(f"/api/v1/flows/{fid}")).status_code == 204
        assert (await c.get(f"/api/v1/flows/{fid}")).status_code == 404


NUL = "\u0000"


@pytest.mark.both_stores  # PostgreSQL text cannot hold NUL
@pytest.mark.parametrize(
    "body",
    [
        {"input_value": f"refund{NUL}42"},
        {"session_id": f"s{NUL}1"},
        {"idempotency_key": f"k{NUL}"},
        {"tweaks": {"ask": {"input_value": f"x{NUL}y"}}},
        {"tweaks": {"ask": {f"k{NUL}": "v"}}},
    ],
    ids=["input_value", "session_id", "idempotency_key", "tweak_value", "tweak_key"],
)
async def test_nul_in_a_submitted_string_is_422_not_500(api: Harness, body) -> None:
    """PostgreSQL text cannot hold NUL: every backend refuses it up front, with a code."""
    async with api.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "mode": "sync", **body})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST", r.text
        assert r.json()["detail"]["problems"][0]["type"] == "string_nul"
    assert await api.store.list_pending(api.users["alice"][0]) is not None  # the store still answers


@pytest.mark.both_stores  # PostgreSQL text cannot hold NUL
async def test_nul_in_flows_shares_history_and_decisions_is_4xx(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="nul"))["job_id"]
    async with api.client("alice") as c:
        bad_flows = [
            {**REFUND, "name": f"Refund{NUL}"},
            {**REFUND, "nodes": [{**n, "params": {"text": f"sent{NUL}"}} if n["id"] == "ok" else n for n in REFUND["nodes"]]},
            {**REFUND, "nodes": [{**n, "id": f"{n['id']}{NUL}"} if n["id"] == "no" else n for n in REFUND["nodes"]]},
        ]
        for spec in bad_flows:
            r = await c.post("/api/v1/flows", json=spec)
            assert r.status_code == 422 and code(r) == "FLOW_INVALID", r.text
            assert any("NUL" in p["message"] for p in r.json()["detail"]["problems"]), r.text
        yaml_nul = 'name: "Refund\\0"\n' + yaml.safe_dump({k: v for k, v in REFUND.items() if k != "name"})
        r = await c.post("/api/v1/flows", content=yaml_nul, headers={"content-type": "application/yaml"})
        assert r.status_code == 422 and code(r) == "FLOW_INVALID", r.text
        assert any("NUL" in p["message"] for p in r.json()["detail"]["problems"]), r.text
        flow = api.flows["refund"]
        r = await c.post(f"/api/v1/flows/{flow}/shares", json={"user": f"bob{NUL}"})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
        r = await c.delete(f"/api/v1/flows/{flow}/shares/bob%00")
        assert r.status_code == 404 and code(r) == "USER_NOT_FOUND"
        for params in ({"session_id": f"nul{NUL}"}, {"session_id": "nul", "flow_id": f"f{NUL}"}):
            r = await c.get("/api/v1/monitor/messages", params=params)
            assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
        r = await c.post("/api/v2/workflows/stop", json={"job_id": f"{job_id}{NUL}"})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
        for body in ({"request_id": f"gate:{job_id}{NUL}", "decision": {"action_id": "approve"}},
                     {"request_id": f"gate:{job_id}", "decision": {"action_id": f"approve{NUL}"}},
                     {"request_id": f"gate:{job_id}", "decision": {"action_id": "approve", "values": {"note": NUL}}}):
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", json=body)
            assert r.status_code == 422 and code(r) == "INVALID_REQUEST", r.text
    job = await api.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == f"gate:{job_id}"


async def test_text_is_bounded_by_max_string_chars(api: Harness) -> None:
    """SIGNOFF_MAX_STRING_CHARS is the one limit for text (input, tweak and decision values,
    flow spec strings); identifiers have a fixed 200."""
    limit = api.settings.max_string_chars
    async with api.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "x" * (limit + 1)})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
        assert r.json()["detail"]["problems"] == [{"loc": "body.input_value", "type": "string_too_long",
                                                   "message": f"is {limit + 1} characters long; the limit is {limit}"
                                                              " (SIGNOFF_MAX_STRING_CHARS)"}]
        api.settings.max_string_chars = 30  # the running app reads the setting itself
        try:
            r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "x" * 31})
            assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
            r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "ok",
                                                        "tweaks": {"ask": {"sender_name": "y" * 31}}})
            assert r.status_code == 422 and r.json()["detail"]["problems"][0]["loc"] == "body.tweaks.ask.sender_name"
            r = await c.post("/api/v1/flows", json={**REFUND, "nodes": [
                {**n, "params": {"text": "z" * 31}} if n["id"] == "ok" else n for n in REFUND["nodes"]]})
            assert r.status_code == 422 and code(r) == "FLOW_INVALID"
            # the example's own question (its Prompt template, 33 characters) is long text too
            assert [p["where"] for p in r.json()["detail"]["problems"]] == ["nodes.2.params.text",
                                                                            "nodes.4.params.template"], r.text
        finally:
            api.settings.max_string_chars = limit
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "session_id": "s" * 201})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
