"""What a hostile user of a shared signoff sends, through real HTTP against the real app (SQLite
and PostgreSQL): a YAML alias bomb, YAML 1.1 booleans, JSON nested hundreds deep, lone UTF-16
surrogates, NaN, and more nodes than SIGNOFF_MAX_FLOW_NODES. Each gets a clear 4xx with a
``code`` naming where, and nothing else changes: no flow stored, no job started, a suspended
job left as it was."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from signoff.engine.models import JobStatus

from tests.integration.api.conftest import REFUND, Harness, harness, submit_suspended

# The hostile user's 354-byte document: nine anchors, each list nine aliases of the one before
# (9^9 * 3 "lol"s: about 2 GB once expanded), hung under a node's params.
BOMB = "\n".join(
    ['name: bomb', 'a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]']
    + [f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    + ["nodes:", "  - {id: ask, type: ChatInput, params: {x: *i}}", ""]
)

# the refund flow as a person writes it in YAML: the node `no`, and values YAML 1.1 reads as booleans
REFUND_YAML = """\
name: Refund approval
nodes:
  - {id: ask, type: ChatInput, params: {sender_name: yes}}
  - id: gate
    type: HumanInput
    params: {prompt: "Approve this refund?", decisions: [Approve, Reject]}
  - {id: ok, type: ChatOutput, params: {text: on}}
  - {id: no, type: ChatOutput, params: {text: Refund refused}}
edges:
  - {from: ask.message, to: gate.prompt}
  - {from: gate.branch_approve, to: ok.input_value}
  - {from: gate.branch_reject, to: no.input_value}
"""

YAML = {"content-type": "application/yaml"}
JSON = {"content-type": "application/json"}


def detail(r: httpx.Response, status: int, *codes: str) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"detail"} and {"error", "code", "message"} <= set(body["detail"]), body
    assert body["detail"]["code"] in codes, body
    return body["detail"]


def nest(levels: int) -> Any:
    """A value of exactly ``levels`` lists and objects inside each other, ``[{"k": [{"k": ...}]}]``
    (built without recursion)."""
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if (levels - i) % 2 else {"k": value}
    return value


def raw(body: Any) -> bytes:
    """JSON text as a client may send it: ``\\ud800`` escapes kept (httpx's own encoder cannot)."""
    return json.dumps(body).encode()


async def flow_count(api: Harness, user: str = "alice") -> int:
    return len(await api.store.list_flows(api.users[user][0]))


async def own_flow(api: Harness, c: httpx.AsyncClient) -> str:
    """A copy of the refund flow for one test, so its jobs are that test's alone."""
    r = await c.post("/api/v1/flows", json={**REFUND, "name": f"refund {uuid.uuid4().hex[:6]}"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def no_job_started(api: Harness, flow_id: str) -> None:
    """A refused submit started nothing: a sync submit that had been accepted would have waited
    for the gate, so its job would be pending now."""
    assert await api.store.list_pending(api.users["alice"][0], flow_id=flow_id) == []


async def unchanged(api: Harness, job_id: str, events_before: int) -> None:
    job = await api.store.get_job(job_id)
    assert job.status == JobStatus.suspended and job.pending.request_id == f"gate:{job_id}"
    assert len(await api.store.read_events(job_id)) == events_before


# ---- YAML ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [YAML, {}], ids=["yaml", "no-content-type"])
async def test_yaml_alias_bomb_is_refused_before_it_expands(api: Harness, headers) -> None:
    assert len(BOMB.encode()) < 400
    before = await flow_count(api)
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", content=BOMB, headers=headers)
        d = detail(r, 422, "FLOW_INVALID")
        assert "anchors and aliases are not accepted" in d["message"] + json.dumps(d["problems"])
        assert len(r.content) < 1_000  # the answer names the first anchor; nothing was expanded
        listed = await c.get("/api/v1/flows")
        assert len(listed.content) < 10_000
        r = await c.post("/api/v1/flows", content="name: x\nbase: &b {type: ChatInput}\nnodes: [{<<: *b, id: a}]\n",
                         headers=YAML)
        detail(r, 422, "FLOW_INVALID")
    assert await flow_count(api) == before


async def test_yaml_is_read_as_yaml_1_2_so_a_node_called_no_stays_a_string(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", content=REFUND_YAML, headers=YAML)
        assert r.status_code == 201, r.text
        spec = r.json()["spec"]
        assert [n["id"] for n in spec["nodes"]] == ["ask", "gate", "ok", "no"]
        assert spec["nodes"][0]["params"] == {"sender_name": "yes"} and spec["nodes"][2]["params"] == {"text": "on"}
        stored = (await c.get(f"/api/v1/flows/{r.json()['id']}")).json()["spec"]
        assert stored == spec
        job = await c.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "refund 42",
                                                      "mode": "sync", "session_id": "yaml12"})
        job_id = job.json()["job_id"]
        assert job.json()["status"] == "suspended", job.text
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "reject"}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)
        assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["output"]["text"] == "Refund refused"


@pytest.mark.parametrize("text", [
    "name: t\nnodes: [{id: a, type: ChatInput, params: {d: !!binary aGVsbG8=}}]\n",
    "name: t\nnodes: [{id: a, type: ChatInput, params: {d: .nan}}]\n",
    "name: t\nnodes: [{id: a, type: ChatInput, params: {? [x]: y}}]\n",
    "name: t\nnodes: [{id: a, type: ChatInput, params: {d: !!python/object/apply:os.system [true]}}]\n",
], ids=["binary", "nan", "list-key", "python-tag"])
async def test_yaml_that_json_cannot_say_is_refused(api: Harness, text) -> None:
    before = await flow_count(api)
    async with api.client("alice") as c:
        d = detail(await c.post("/api/v1/flows", content=text, headers=YAML), 422, "FLOW_INVALID")
        assert "line 2" in json.dumps(d["problems"])
    assert await flow_count(api) == before


# ---- depth ---------------------------------------------------------------------------------------


async def test_flow_depth_just_under_the_limit_is_stored_just_over_is_refused(api: Harness) -> None:
    limit = api.settings.max_json_depth
    assert limit == 32
    # flow (1) > nodes (2) > node (3) > params (4) > input_value: nest(n) brings the deepest to 4 + n
    def spec(levels: int) -> dict[str, Any]:
        nodes = [dict(n) for n in REFUND["nodes"]]
        nodes[2] = {**nodes[2], "params": {**nodes[2]["params"], "input_value": nest(levels)}}
        return {**REFUND, "nodes": nodes}

    before = await flow_count(api)
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", content=raw(spec(limit - 4)), headers=JSON)
        assert r.status_code == 201, r.text
        fid = r.json()["id"]
        assert (await c.get(f"/api/v1/flows/{fid}")).json()["spec"]["nodes"][2]["params"]["input_value"] == nest(limit - 4)
        for body, headers in ((raw(spec(limit - 3)), JSON), (json.dumps(spec(limit - 3)).encode(), YAML),
                              (raw(spec(900)), JSON)):
            d = detail(await c.post("/api/v1/flows", content=body, headers=headers), 422, "FLOW_INVALID")
            where = d["problems"][0]["where"]
            assert where.startswith("nodes.2.params.input_value.0.k.0"), d
            assert "32 levels" in d["problems"][0]["message"] and "SIGNOFF_MAX_JSON_DEPTH" in d["problems"][0]["message"]
        for body in (b"[" * 1_500_000, b'{"name": "x", "nodes": ' + b"[" * 1_500_000):  # beyond any parser
            d = detail(await c.post("/api/v1/flows", content=body, headers=JSON), 422, "FLOW_INVALID")
            assert "SIGNOFF_MAX_JSON_DEPTH" in d["problems"][0]["message"]
    assert await flow_count(api) == before + 1


async def test_tweaks_depth_just_under_is_accepted_just_over_refused(api: Harness) -> None:
    limit = api.settings.max_json_depth
    async with api.client("alice") as c:
        flow = await own_flow(api, c)
        # body (1) > tweaks (2) > ok (3) > input_value: nest(n) brings the deepest to 3 + n
        for levels in (limit - 2, 400):
            r = await c.post("/api/v2/workflows", content=raw({
                "flow_id": flow, "input_value": "x", "mode": "sync", "tweaks": {"ok": {"input_value": nest(levels)}}}),
                headers=JSON)
            d = detail(r, 422, "INVALID_REQUEST")
            assert d["problems"][0]["type"] == "json_too_deep", d
            assert d["problems"][0]["loc"].startswith("body.tweaks.ok.input_value.0.k"), d
        r = await c.post("/api/v2/workflows", content=b'{"flow_id": "x", "tweaks": ' + b"[" * 1_500_000, headers=JSON)
        assert "SIGNOFF_MAX_JSON_DEPTH" in detail(r, 422, "INVALID_REQUEST")["message"]
        await no_job_started(api, flow)
        r = await c.post("/api/v2/workflows", content=raw({
            "flow_id": flow, "input_value": "x", "mode": "sync", "session_id": "deep-ok",
            "tweaks": {"ok": {"input_value": nest(limit - 3)}}}), headers=JSON)
        assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
        job = await api.store.get_job(r.json()["job_id"])
        assert job.request["tweaks"]["ok"]["input_value"] == nest(limit - 3)


async def test_decision_values_depth_leaves_the_job_suspended(api: Harness) -> None:
    limit = api.settings.max_json_depth
    job_id = (await submit_suspended(api, session_id="deep-values"))["job_id"]
    seen = len(await api.store.read_events(job_id))
    async with api.client("alice") as c:
        # body (1) > decision (2) > values (3) > v: nest(n) brings the deepest to 3 + n
        for levels in (limit - 2, 600):
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", content=raw({
                "request_id": f"gate:{job_id}", "decision": {"action_id": "approve", "values": {"v": nest(levels)}}}),
                headers=JSON)
            d = detail(r, 422, "INVALID_REQUEST")
            assert d["problems"][0]["type"] == "json_too_deep" and d["problems"][0]["loc"].startswith(
                "body.decision.values.v.0.k"), d
        r = await c.post(f"/api/v2/workflows/{job_id}/resume", content=b"[" * 1_500_000, headers=JSON)
        detail(r, 422, "INVALID_REQUEST")
        await unchanged(api, job_id, seen)
        r = await c.post(f"/api/v2/workflows/{job_id}/resume", content=raw({
            "request_id": f"gate:{job_id}", "decision": {"action_id": "approve", "values": {"v": nest(limit - 3)}}}),
            headers=JSON)
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)
        decided = [e for e in await api.store.read_events(job_id) if e.event == "human_input_decision"]
        assert decided[0].data["values"] == {"v": nest(limit - 3)}
        assert (await c.get(f"/api/v2/workflows/{job_id}/events")).status_code == 200


@pytest.mark.parametrize("path,body", [
    ("/api/v2/workflows/stop", b'{"job_id": ' + b"[" * 100_000),
    ("/api/v2/workflows/stop", raw({"job_id": "x", "extra": nest(50)})),
    ("/api/v1/flows/{flow}/shares", raw({"user": "bob", "actions": nest(40)})),
], ids=["stop-raw", "stop-field", "share-field"])
async def test_any_body_field_nested_too_deep_is_422(api: Harness, path, body) -> None:
    async with api.client("alice") as c:
        r = await c.post(path.format(flow=api.flows["refund"]), content=body, headers=JSON)
        detail(r, 422, "INVALID_REQUEST")


# ---- lone surrogates, NaN, unreadable JSON ------------------------------------------------------

S = "\ud800"

SUBMIT_SURROGATES = [
    ({"input_value": f"refund{S}"}, "body.input_value"),
    ({"session_id": f"s{S}"}, "body.session_id"),
    ({"idempotency_key": S}, "body.idempotency_key"),
    ({"flow_id": f"f{S}"}, "body.flow_id"),
    ({"tweaks": {"ask": {"input_value": f"x{S}"}}}, "body.tweaks.ask.input_value"),
    ({"tweaks": {"ask": {"meta": [{"deep": S}]}}}, "body.tweaks.ask.meta.0.deep"),
    ({"tweaks": {"ask": {f"k{S}": "v"}}}, "body.tweaks.ask.k\\ud800"),
    ({"tweaks": {f"node{S}": {"k": "v"}}}, "body.tweaks.node\\ud800"),
]


@pytest.mark.parametrize("body,loc", SUBMIT_SURROGATES, ids=[loc for _, loc in SUBMIT_SURROGATES])
async def test_lone_surrogate_in_a_submit_is_422_naming_the_field(api: Harness, body, loc) -> None:
    async with api.client("alice") as c:
        flow = await own_flow(api, c)
        r = await c.post("/api/v2/workflows", content=raw({"flow_id": flow, "mode": "sync", **body}), headers=JSON)
        d = detail(r, 422, "INVALID_REQUEST")
        assert {"loc": loc, "type": "string_surrogate"} in [{k: p[k] for k in ("loc", "type")} for p in d["problems"]], d
        await no_job_started(api, flow)


async def test_lone_surrogate_in_a_decision_leaves_the_job_suspended(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="surrogate"))["job_id"]
    seen = len(await api.store.read_events(job_id))
    async with api.client("alice") as c:
        for body, loc in (
            ({"request_id": f"gate:{job_id}", "decision": {"action_id": "approve", "values": {"note": S}}},
             "body.decision.values.note"),
            ({"request_id": f"gate:{job_id}", "decision": {"action_id": "approve", "values": {S: "x"}}},
             "body.decision.values.\\ud800"),
            ({"request_id": f"gate:{job_id}", "decision": {"action_id": f"approve{S}"}}, "body.decision.action_id"),
            ({"request_id": f"gate:{job_id}{S}", "decision": {"action_id": "approve"}}, "body.request_id"),
        ):
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", content=raw(body), headers=JSON)
            d = detail(r, 422, "INVALID_REQUEST")
            assert [p["loc"] for p in d["problems"] if p["type"] == "string_surrogate"] == [loc], d
        r = await c.post("/api/v2/workflows/stop", content=raw({"job_id": f"{job_id}{S}"}), headers=JSON)
        assert detail(r, 422, "INVALID_REQUEST")["problems"][0]["loc"] == "body.job_id"
        r = await c.post(f"/api/v1/flows/{api.flows['refund']}/shares", content=raw({"user": f"bob{S}"}), headers=JSON)
        assert detail(r, 422, "INVALID_REQUEST")["problems"][0]["loc"] == "body.user"
    await unchanged(api, job_id, seen)


def _with(**change: Any) -> dict[str, Any]:
    nodes = [dict(n) for n in REFUND["nodes"]]
    if "node_param" in change:
        nodes[2] = {**nodes[2], "params": {"text": change["node_param"]}}
    if "node_id" in change:
        nodes[3] = {**nodes[3], "id": change["node_id"]}
    spec = {**REFUND, "nodes": nodes}
    if "name" in change:
        spec["name"] = change["name"]
    if "key" in change:
        spec[change["key"]] = 1
    return spec


FLOW_SURROGATES = [
    (_with(name=f"Refund{S}"), "name"),
    (_with(node_param=f"sent{S}"), "nodes.2.params.text"),
    (_with(node_id=f"no{S}"), "nodes.3.id"),
    (_with(key=f"x{S}"), "x\\ud800"),
]


@pytest.mark.parametrize("spec,where", FLOW_SURROGATES, ids=[w for _, w in FLOW_SURROGATES])
async def test_lone_surrogate_in_a_flow_is_422_and_nothing_is_stored(api: Harness, spec, where) -> None:
    before = await flow_count(api)
    async with api.client("alice") as c:
        d = detail(await c.post("/api/v1/flows", content=raw(spec), headers=JSON), 422, "FLOW_INVALID")
        assert [p["where"] for p in d["problems"]] == [where], d
        assert "surrogate" in d["problems"][0]["message"]
        yaml_text = 'name: "Refund\\ud800"\n' + REFUND_YAML.split("\n", 1)[1]
        d = detail(await c.post("/api/v1/flows", content=yaml_text, headers=YAML), 422, "FLOW_INVALID")
        assert [p["where"] for p in d["problems"]] == ["name"], d
    assert await flow_count(api) == before


async def test_nan_and_infinity_are_422(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="nan"))["job_id"]
    seen = len(await api.store.read_events(job_id))
    before = await flow_count(api)
    async with api.client("alice") as c:
        flow = await own_flow(api, c)
        for tweak in (b"NaN", b"Infinity", b"-Infinity", b"1e400"):
            r = await c.post("/api/v2/workflows", headers=JSON, content=b'{"flow_id": "%s", "mode": "sync", '
                             b'"tweaks": {"ask": {"x": %s}}}' % (flow.encode(), tweak))
            assert detail(r, 422, "INVALID_REQUEST")["problems"][0] == {
                "loc": "body.tweaks.ask.x", "type": "number_not_finite", "message": "is not a JSON number (NaN or infinite)"}
        await no_job_started(api, flow)
        r = await c.post(f"/api/v2/workflows/{job_id}/resume", headers=JSON, content=(
            b'{"request_id": "gate:%s", "decision": {"action_id": "approve", "values": {"n": NaN}}}' % job_id.encode()))
        assert detail(r, 422, "INVALID_REQUEST")["problems"][0]["loc"] == "body.decision.values.n"
        for number in (b"NaN", b"1e400"):
            text = json.dumps(REFUND).replace('"Refund sent"', "%s") % number.decode()
            detail(await c.post("/api/v1/flows", content=text, headers=JSON), 422, "FLOW_INVALID")
    await unchanged(api, job_id, seen)
    assert await flow_count(api) == before + 1  # the test's own flow


async def test_a_body_json_cannot_read_is_422_not_400(api: Harness) -> None:
    async with api.client("alice") as c:
        for body in (b'{"flow_id": "x", "tweaks": {"a": {"n": ' + b"9" * 5000 + b"}}}",
                     b'{"flow_id": "\xff\xfe"}'):
            r = await c.post("/api/v2/workflows", content=body, headers=JSON)
            detail(r, 422, "INVALID_REQUEST")


# ---- SIGNOFF_MAX_FLOW_NODES ----------------------------------------------------------------------


def wide(n: int) -> dict[str, Any]:
    return {"name": f"wide {n}", "nodes": [{"id": f"n{i}", "type": "TextInput"} for i in range(n)], "edges": []}


async def test_max_flow_nodes_is_the_one_limit_of_the_running_app(api: Harness) -> None:
    limit = api.settings.max_flow_nodes
    before = await flow_count(api)
    async with api.client("alice") as c:
        d = detail(await c.post("/api/v1/flows", json=wide(limit + 1)), 422, "FLOW_TOO_LARGE")
        assert f"the limit is {limit} (SIGNOFF_MAX_FLOW_NODES)" in d["message"]
        api.settings.max_flow_nodes = limit + 100  # the engine's validation no longer holds its own 500
        try:
            r = await c.post("/api/v1/flows", json=wide(limit + 1))
            assert r.status_code == 201, r.text[:500]
            api.settings.max_flow_nodes = 3
            d = detail(await c.post("/api/v1/flows", json=REFUND), 422, "FLOW_TOO_LARGE")
            assert "the flow has 5 nodes; the limit is 3" in d["message"].lower()
        finally:
            api.settings.max_flow_nodes = limit
    assert await flow_count(api) == before + 1


# ---- SIGNOFF_FLOWS_DIR: the same parser and limits ----------------------------------------------


@pytest_asyncio.fixture(scope="module")
async def folder_api(store_backend, tmp_path_factory, temporal_client):
    folder: Path = tmp_path_factory.mktemp("flows")
    (folder / "refund_yaml.yaml").write_text(REFUND_YAML)
    (folder / "bomb.yaml").write_text(BOMB)
    (folder / "deep.json").write_text(json.dumps({**wide(1), "meta": nest(40)}))
    (folder / "surrogate.json").write_text(json.dumps({**wide(1), "name": f"x{S}"}))
    (folder / "wide.json").write_text(json.dumps(wide(6)))
    (folder / "small.json").write_text(json.dumps(wide(5)))
    # 5: the harness uploads the example refund flow (5 nodes)
    async with harness(store_backend, tmp_path_factory.mktemp("api"), temporal_client, flows_dir=folder,
                       max_flow_nodes=5) as h:
        yield h


async def test_flows_dir_uses_the_same_parser_and_limits(folder_api: Harness) -> None:
    async with folder_api.client("alice") as c:
        r = await c.get("/api/v1/flows/refund_yaml")
        assert r.status_code == 200, r.text
        assert [n["id"] for n in r.json()["spec"]["nodes"]] == ["ask", "gate", "ok", "no"]
        assert (await c.get("/api/v1/flows/small")).status_code == 200
        for skipped in ("bomb", "deep", "surrogate", "wide"):
            detail(await c.get(f"/api/v1/flows/{skipped}"), 404, "FLOW_NOT_FOUND")
        listed = {f["id"] for f in (await c.get("/api/v1/flows")).json()}
        assert {"refund_yaml", "small"} <= listed and not listed & {"bomb", "deep", "surrogate", "wide"}
