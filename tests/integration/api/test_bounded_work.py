"""Nothing a flow or a person supplies runs unbounded (issue 28), through real HTTP against the
real app and worker (SQLite and PostgreSQL): an If-Else pattern that backtracks forever on
Python's ``re`` routes at once on RE2 (native and Langflow-imported flows), a pattern RE2 cannot
run and a ``fields`` over SIGNOFF_MAX_FIELDS_BYTES are refused at save naming the node, decision
values are bounded (SIGNOFF_MAX_VALUE_ITEMS) and checked in linear time (``uniqueItems`` on
objects: jsonschema compared every pair, freezing the API, then the worker's Update validator
until Temporal's deadlock detector failed the task and the API answered 500), and a
400-digit number is INVALID_VALUES, not a 500. A regression of the unbounded ones hangs (the
test fails by its timeout) rather than passing."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from signoff.engine.models import JobStatus

from tests.fixtures.langflow import chat_input, chat_output, if_else, lf_edge, lf_flow
from tests.integration.api.conftest import Harness

CATASTROPHIC = "^(a+)+$"  # 2^n steps for a backtracking matcher on n a's and one other character


def detail(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()["detail"]
    assert body["code"] == code, body
    return body


def router_flow(pattern: str, op: str = "regex") -> dict[str, Any]:
    return {"name": f"router {uuid.uuid4().hex[:6]}", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "route", "type": "ConditionalRouter", "params": {"operator": op, "match_text": pattern,
                                                                "case_sensitive": True}},
        {"id": "yes", "type": "ChatOutput", "params": {"text": "matched"}},
        {"id": "no", "type": "ChatOutput", "params": {"text": "no match"}}],
        "edges": [{"from": "ask.message", "to": "route.input_text"},
                  {"from": "route.true_result", "to": "yes.input_value"},
                  {"from": "route.false_result", "to": "no.input_value"}]}


def gate_flow(fields: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"gate {uuid.uuid4().hex[:6]}", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"], "fields": fields}},
        {"id": "ok", "type": "ChatOutput"}, {"id": "no", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"},
                  {"from": "gate.branch_reject", "to": "no.input_value"}]}


def if_else_flow(pattern: str) -> dict[str, Any]:
    ci, router = chat_input("ChatInput-re001"), if_else("ConditionalRouter-re002", "regex", pattern)
    yes, no = chat_output("ChatOutput-re003"), chat_output("ChatOutput-re004")
    return lf_flow(f"If-Else {uuid.uuid4().hex[:6]}", [ci, router, yes, no], [
        lf_edge(ci, "message", router, "input_text"), lf_edge(router, "true_result", yes, "input_value"),
        lf_edge(router, "false_result", no, "input_value")])


async def save(c: httpx.AsyncClient, spec: dict[str, Any]) -> str:
    r = await c.post("/api/v1/flows", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def flow_names(api: Harness) -> set[str]:
    return {f.name for f in await api.store.list_flows(api.users["alice"][0])}


# ---- If-Else regex ----------------------------------------------------------------------------


async def test_a_catastrophic_if_else_pattern_routes_at_once_in_the_api(api: Harness) -> None:
    """A sync run of a gate-less flow runs in the API process: on Python's re, 60 a's and a '!'
    held its event loop (and /health/live) for 2^60 steps."""
    async with api.client("alice") as c:
        flow_id = await save(c, router_flow(CATASTROPHIC))
        for text, out in (("a" * 60 + "!", "no match"), ("a" * 60, "matched")):
            r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": text, "mode": "sync"})
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "completed" and r.json()["output"]["text"] == out, r.json()
        assert (await c.get("/health/live")).status_code == 200


async def test_a_catastrophic_langflow_if_else_pattern_routes_at_once_on_the_worker(api: Harness) -> None:
    """Langflow's If-Else ``regex`` (signoff's regex_match), imported, run on Temporal."""
    async with api.client("alice") as c:
        flow_id = await save(c, if_else_flow(CATASTROPHIC))
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "a" * 60 + "!",
                                                    "mode": "background"})
        assert r.status_code == 200, r.text
        job = await api.wait_status(r.json()["job_id"], JobStatus.completed, JobStatus.failed)
        assert job.status == JobStatus.completed
        done = (await c.get(f"/api/v2/workflows/{job.job_id}")).json()
        assert list(done["outputs"]) == ["ChatOutput-re004"], done  # the false branch


async def test_a_pattern_re2_cannot_run_is_refused_at_save_naming_the_node(api: Harness) -> None:
    """Python's re compiles a backreference or a lookaround (and may backtrack on it); RE2 does
    not run them: refused when the flow is saved, imported or tweaked, not at run time."""
    before = await flow_names(api)
    async with api.client("alice") as c:
        for spec, node in ((router_flow(r"^(a)\1$"), "route"), (router_flow("^(?=a)a$", "regex_match"), "route"),
                           (if_else_flow("(?<!b)a"), "ConditionalRouter-re002")):
            d = detail(await c.post("/api/v1/flows", json=spec), 422, "FLOW_INVALID")
            (problem,) = [p for p in d["problems"] if p.get("node") == node]
            assert "RE2" in problem["message"] and "match_text" in problem["message"], d
        flow_id = await save(c, router_flow("^a+$"))
        r = await c.post("/api/v2/workflows", json={
            "flow_id": flow_id, "input_value": "a", "mode": "sync",
            "tweaks": {"route": {"match_text": r"(a)\1"}}})
        d = detail(r, 422, "FLOW_INVALID")
        assert any(p.get("node") == "route" and "RE2" in p["message"] for p in d["problems"]), d
    assert len(await flow_names(api) - before) == 1  # only the good flow was stored


# ---- fields and values ------------------------------------------------------------------------


async def test_fields_over_the_size_cap_is_refused_at_save(api: Harness) -> None:
    limit = api.settings.max_fields_bytes
    enum = [f"option number {i}" for i in range(limit // 10)]
    big = {"type": "object", "properties": {"pick": {"type": "string", "enum": enum}}}
    assert len(json.dumps(big)) > limit
    before = await flow_names(api)
    async with api.client("alice") as c:
        for fields in (big, {"Approve": big}):
            d = detail(await c.post("/api/v1/flows", json=gate_flow(fields)), 422, "FLOW_INVALID")
            (problem,) = d["problems"]
            assert problem["node"] == "gate" and "SIGNOFF_MAX_FIELDS_BYTES" in problem["message"], d
        assert await flow_names(api) == before
        await save(c, gate_flow({"type": "object", "properties": {"pick": {"type": "string", "enum": enum[:100]}}}))


async def paused(api: Harness, c: httpx.AsyncClient, fields: dict[str, Any]) -> tuple[str, str]:
    flow_id = await save(c, gate_flow(fields))
    r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund", "mode": "sync"})
    assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
    return r.json()["job_id"], r.json()["human_request"]["request_id"]


async def still_waiting(api: Harness, job_id: str, request_id: str) -> None:
    job = await api.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == request_id
    assert "human_input_decision" not in {e.event for e in await api.store.read_events(job_id)}


async def test_values_arrays_are_bounded_and_big_numbers_are_invalid_values(api: Harness) -> None:
    fields = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                               "amount": {"type": "number", "multipleOf": 0.01}}}
    cap = getattr(api.settings, "max_value_items", 1000)  # (so the test runs against the code before it too)
    async with api.client("alice") as c:
        job_id, request_id = await paused(api, c, fields)
        url = f"/api/v2/workflows/{job_id}/resume"
        r = await c.post(url, json={"request_id": request_id, "decision": {
            "action_id": "approve", "values": {"tags": ["t"] * (cap + 1)}}})
        d = detail(r, 422, "INVALID_VALUES")
        assert d["problems"] == [{"loc": "values.tags", "type": "maxItems",
                                  "message": f"has {cap + 1} items; the limit is {cap} (SIGNOFF_MAX_VALUE_ITEMS)"}]
        # 400 digits: jsonschema's multipleOf divided it as a float (OverflowError: 500)
        r = await c.post(url, content=b'{"request_id": "%s", "decision": {"action_id": "approve", "values": '
                                      b'{"amount": 1%s}}}' % (request_id.encode(), b"0" * 400),
                         headers={"content-type": "application/json"})
        d = detail(r, 422, "INVALID_VALUES")
        assert [p["loc"] for p in d["problems"]] == ["values.amount"], d
        await still_waiting(api, job_id, request_id)
        r = await c.post(url, json={"request_id": request_id, "decision": {
            "action_id": "approve", "values": {"tags": ["t"] * cap, "amount": 12.5}}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)


async def test_unique_items_on_objects_is_bounded_and_checked_at_once_by_api_and_workflow(api: Harness) -> None:
    """20 000 objects (jsonschema cannot sort them: it compared all 2e8 pairs, holding the API's
    event loop for minutes) are refused at once, whatever maxItems the schema gives; as many as
    SIGNOFF_MAX_VALUE_ITEMS are checked by the API, taken by the workflow, and recorded."""
    fields = {"type": "object", "properties": {"rows": {"type": "array", "uniqueItems": True, "maxItems": 50_000}}}
    cap = getattr(api.settings, "max_value_items", 1000)  # (so the test runs against the code before it too)
    async with api.client("alice") as c:
        job_id, request_id = await paused(api, c, fields)
        url = f"/api/v2/workflows/{job_id}/resume"
        r = await c.post(url, json={"request_id": request_id, "decision": {
            "action_id": "approve", "values": {"rows": [{"n": i} for i in range(20_000)]}}})
        d = detail(r, 422, "INVALID_VALUES")
        assert [p["loc"] for p in d["problems"]] == ["values.rows"] and "SIGNOFF_MAX_VALUE_ITEMS" in d["message"], d
        rows = [{"n": i, "tags": [str(i)]} for i in range(cap - 1)]
        r = await c.post(url, json={"request_id": request_id, "decision": {
            "action_id": "approve", "values": {"rows": [*rows, {"tags": ["7"], "n": 7.0}]}}})
        d = detail(r, 422, "INVALID_VALUES")
        assert [p["loc"] for p in d["problems"]] == ["values.rows"] and "non-unique" in d["message"], d
        await still_waiting(api, job_id, request_id)
        r = await c.post(url, json={"request_id": request_id, "decision": {
            "action_id": "approve", "values": {"rows": rows}}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)
        decided = [e for e in await api.store.read_events(job_id) if e.event == "human_input_decision"]
        assert len(decided) == 1 and decided[0].data["values"] == {"rows": rows}
