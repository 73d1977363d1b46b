"""DESIGN §1/§5/§6 line by line against the running app: every response shape, every event's
data, the error body on every error path, the resume order with the job left suspended, the
idempotent repeat, the sync `timeout`, a late answer rerouted, and the history cards' stamps."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from signoff.engine.models import JobStatus

from tests.helpers import eventually
from tests.integration.api.conftest import BlockingHTTP, Harness, sse_frames, submit, submit_suspended

JOB_KEYS = {"object", "job_id", "flow_id", "status", "links"}
RESPONSE_KEYS = {"object", "status", "job_id", "session_id", "output", "outputs", "errors", "human_request"}
PENDING_KEYS = {"request_id", "kind", "prompt", "options", "allowed_decisions", "timeout_seconds", "fallback_action",
                "paused_at"}
LISTED_KEYS = {"job_id", "flow_id", "session_id", "created_at", "request_id", "kind", "prompt", "options",
               "allowed_decisions"}
DECISION_KEYS = {"request_id", "action_id", "values", "decided_by", "decided_at", "via", "client_identity",
                 "update_id"}  # the Update that carried it (a Signal's decision has none)


def detail(r: httpx.Response, status: int, code: str, job_id: str | None = None) -> dict[str, Any]:
    """The error body of DESIGN §6: {"detail": {"error", "code", "message", "job_id"?}}."""
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"detail"}, body
    d = body["detail"]
    assert {"error", "code", "message"} <= set(d) and d["code"] == code, body
    assert isinstance(d["error"], str) and d["error"] and isinstance(d["message"], str) and d["message"], body
    if job_id is not None:
        assert d.get("job_id") == job_id, body
    return d


async def events(c: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    frames = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events")).text)
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1)), frames
    return frames


async def create_flow(c: httpx.AsyncClient, spec: dict[str, Any]) -> str:
    r = await c.post("/api/v1/flows", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def two_gates() -> dict[str, Any]:
    return {
        "name": "Two gates",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "first", "type": "HumanInput", "params": {"prompt": "First?", "decisions": ["Approve", "Reject"]}},
            {"id": "second", "type": "HumanInput", "params": {"prompt": "Second?", "decisions": ["Approve", "Reject"]}},
            {"id": "ok", "type": "ChatOutput", "params": {"text": "both"}},
            {"id": "no1", "type": "ChatOutput", "params": {"text": "no 1"}},
            {"id": "no2", "type": "ChatOutput", "params": {"text": "no 2"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "first.prompt"},
            {"from": "first.branch_approve", "to": "second.prompt"},
            {"from": "first.branch_reject", "to": "no1.input_value"},
            {"from": "second.branch_approve", "to": "ok.input_value"},
            {"from": "second.branch_reject", "to": "no2.input_value"},
        ],
    }


# ---- shapes ------------------------------------------------------------------------------------


async def test_job_status_pending_resume_and_event_shapes(api: Harness) -> None:
    async with api.client("alice") as c:
        job = await submit(c, api.flows["refund"], session_id="shapes")
        assert JOB_KEYS <= set(job) and job["object"] == "job" and job["flow_id"] == api.flows["refund"]
        assert job["status"] in ("queued", "in_progress")
        job_id = job["job_id"]
        assert job["links"] == {"status": f"/api/v2/workflows/{job_id}", "events": f"/api/v2/workflows/{job_id}/events",
                                "stop": "/api/v2/workflows/stop"}
        await api.wait_status(job_id, JobStatus.suspended)

        by_path = (await c.get(job["links"]["status"])).json()
        by_query = (await c.get("/api/v2/workflows", params={"job_id": job_id})).json()
        assert by_path == by_query
        assert JOB_KEYS <= set(by_path) and by_path["object"] == "job" and by_path["status"] == "suspended"
        assert by_path["errors"] == []
        hr = by_path["human_request"]
        assert PENDING_KEYS <= set(hr) and hr["request_id"] == f"gate:{job_id}" and hr["kind"] == "node_input"
        assert hr["options"] == [{"action_id": "approve", "label": "Approve"}, {"action_id": "reject", "label": "Reject"}]
        assert hr["allowed_decisions"] == ["approve", "reject"] and hr["fallback_action"] is None
        assert (await c.get(f"/api/v2/workflows/{job_id}/pending")).json() == hr

        (listed,) = [p for p in (await c.get("/api/v2/workflows/pending", params={"flow_id": api.flows["refund"]})).json()
                     if p["job_id"] == job_id]
        assert LISTED_KEYS <= set(listed)
        assert {k: listed[k] for k in PENDING_KEYS & set(listed)} == {k: hr[k] for k in PENDING_KEYS & set(listed)}
        assert listed["flow_id"] == api.flows["refund"] and listed["session_id"] == "shapes"
        assert listed["created_at"] == by_path["created_at"]

        frames = await events(c, job_id)
        assert frames[-1]["event"] == "human_input_required"
        required = frames[-1]["data"]
        assert PENDING_KEYS <= set(required) and required["request_id"] == hr["request_id"]
        assert datetime.fromisoformat(required["paused_at"]) == datetime.fromisoformat(hr["paused_at"])

        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": hr["request_id"], "decision": {"action_id": "approve", "values": {"n": 1}}})
        assert r.status_code == 200 and set(r.json()) == {"job_id", "status", "run"}
        assert r.json()["job_id"] == job_id and r.json()["status"] == "resuming"
        await api.wait_status(job_id, JobStatus.completed)

        done = (await c.get(f"/api/v2/workflows/{job_id}")).json()
        assert done == (await c.get("/api/v2/workflows", params={"job_id": job_id})).json()
        assert r.json()["run"] == done  # the flow ended in the decision's step: no status read needed
        assert RESPONSE_KEYS <= set(done) and done["object"] == "response" and done["status"] == "completed"
        assert done["job_id"] == job_id and done["session_id"] == "shapes" and done["human_request"] is None
        assert done["errors"] == [] and set(done["output"]) == {"reason", "text", "source"}
        assert done["output"]["text"] == "Refund sent"
        assert done["outputs"] and all(set(o) == {"type", "status", "display_name", "content"}
                                       for o in done["outputs"].values())

        frames = await events(c, job_id)
        names = [f["event"] for f in frames]
        decision = frames[names.index("human_input_decision")]["data"]
        assert set(decision) == DECISION_KEYS
        assert decision["request_id"] == hr["request_id"] and decision["action_id"] == "approve"
        assert decision["values"] == {"n": 1} and decision["decided_by"] == api.users["alice"][0]
        assert decision["via"] == "api" and decision["client_identity"] == api.service.client.identity
        datetime.fromisoformat(decision["decided_at"])
        assert "human_input_expired" not in names
        assert frames[-1]["event"] == "end" and frames[-1]["data"] == {"status": "completed"}

        r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        assert r.status_code == 200
        stop = r.json()
        assert set(stop) == {"job_id", "status", "message"} and stop["job_id"] == job_id
        assert stop["status"] == "completed"
        assert (await api.store.get_job(job_id)).status == JobStatus.completed


async def test_flow_create_and_list_shapes(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=two_gates())
        assert r.status_code == 201
        flow = r.json()
        assert {"id", "name", "version"} <= set(flow) and flow["name"] == "Two gates" and flow["version"] == 1
        listed = {f["id"]: f for f in (await c.get("/api/v1/flows")).json()}
        assert {"id", "name", "version", "created_at"} <= set(listed[flow["id"]])
        assert listed[flow["id"]]["created_at"] == flow["created_at"]


# ---- stop, supersede, cards --------------------------------------------------------------------


async def test_supersede_stop_events_and_cards(api: Harness) -> None:
    first = (await submit_suspended(api, session_id="cards"))["job_id"]
    second = (await submit_suspended(api, session_id="cards"))["job_id"]
    async with api.client("alice") as c:
        frames = await events(c, first)
        assert frames[-1] == {"event": "run_cancelled", "data": {"reason": "superseded", "superseded_by": second},
                              "seq": len(frames)}
        status = (await c.get(f"/api/v2/workflows/{first}")).json()
        assert status["status"] == "cancelled" and status["human_request"] is None

        r = await c.post("/api/v2/workflows/stop", json={"job_id": second})
        assert r.status_code == 200
        assert r.json()["job_id"] == second and r.json()["status"] == "cancelled" and r.json()["message"]
        frames = await events(c, second)
        assert frames[-1]["event"] == "run_cancelled" and frames[-1]["data"] == {"reason": "stopped"}
        again = (await c.post("/api/v2/workflows/stop", json={"job_id": first})).json()
        assert again["status"] == "cancelled"
        assert [f["event"] for f in await events(c, first)].count("run_cancelled") == 1

        cards = {m["job_id"]: m["card"] for m in (await c.get("/api/v1/monitor/messages",
                                                                params={"session_id": "cards"})).json()
                 if m["kind"] == "card"}
        assert cards[first]["superseded"] is True and "submitted_action" not in cards[first]
        # stopped is not superseded: no new run replaced the second
        assert cards[second]["stopped"] is True and "superseded" not in cards[second]
        assert "submitted_action" not in cards[second] and "stopped" not in cards[first]
        assert cards[first]["request_id"] == f"gate:{first}"


async def test_a_card_is_stamped_only_for_its_own_request(api: Harness) -> None:
    async with api.client("alice") as c:
        flow = await create_flow(c, two_gates())
        resp = await submit(c, flow, "sync", session_id="two-cards")
        job_id = resp["job_id"]
        assert resp["status"] == "suspended" and resp["human_request"]["request_id"] == f"first:{job_id}"
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"first:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200
        await api.wait_status(job_id, JobStatus.suspended)
        assert (await c.get(f"/api/v2/workflows/{job_id}/pending")).json()["request_id"] == f"second:{job_id}"

        def cards(history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
            return {m["card"]["request_id"]: m["card"] for m in history if m["kind"] == "card"}

        got = cards((await c.get("/api/v1/monitor/messages", params={"session_id": "two-cards"})).json())
        assert got[f"first:{job_id}"]["submitted_action"] == "approve"
        assert "submitted_action" not in got[f"second:{job_id}"] and "superseded" not in got[f"second:{job_id}"]

        # the first gate's id is stale now: 409, and nothing is stamped
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"first:{job_id}", "decision": {"action_id": "reject"}})
        detail(r, 409, "NOT_RESUMABLE", job_id)
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"second:{job_id}", "decision": {"action_id": "reject"}})
        assert r.status_code == 200
        await api.wait_status(job_id, JobStatus.completed)
        got = cards((await c.get("/api/v1/monitor/messages", params={"session_id": "two-cards"})).json())
        assert got[f"first:{job_id}"]["submitted_action"] == "approve"
        assert got[f"second:{job_id}"]["submitted_action"] == "reject"
        assert not any(card.get("superseded") for card in got.values())


# ---- errors ------------------------------------------------------------------------------------


async def test_every_job_route_is_404_for_another_user_or_a_malformed_id(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="404s"))["job_id"]
    decision = {"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}}
    before = len(await api.store.read_events(job_id))
    async with api.client("bob") as c:
        for jid in (job_id, "not-a-job", str(uuid.uuid4()), "x" * 200, "x" * 201, "y" * 5000, "%20", "a:b"):
            for method, path, kw in (
                ("GET", f"/api/v2/workflows/{jid}", {}),
                ("GET", "/api/v2/workflows", {"params": {"job_id": jid}}),
                ("GET", f"/api/v2/workflows/{jid}/pending", {}),
                ("GET", f"/api/v2/workflows/{jid}/events", {}),
                ("POST", f"/api/v2/workflows/{jid}/resume", {"json": decision}),
                ("POST", "/api/v2/workflows/stop", {"json": {"job_id": jid}}),
                ("GET", f"/api/v1/monitor/traces/{jid}", {}),
            ):
                r = await c.request(method, path, **kw)
                detail(r, 404, "JOB_NOT_FOUND")  # the same for the path, query and body forms
        for form in ({"params": {"job_id": ""}}, ):
            detail(await c.get("/api/v2/workflows", **form), 404, "JOB_NOT_FOUND")
        detail(await c.post("/api/v2/workflows/stop", json={"job_id": ""}), 404, "JOB_NOT_FOUND")
    async with api.client("bob") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "x"})
        detail(r, 404, "FLOW_NOT_FOUND")
        for path in (f"/api/v1/flows/{api.flows['refund']}",):
            detail(await c.get(path), 404, "FLOW_NOT_FOUND")
            detail(await c.delete(path), 404, "FLOW_NOT_FOUND")
    job = await api.store.get_job(job_id)
    assert job.status == JobStatus.suspended and len(await api.store.read_events(job_id)) == before


async def test_401_on_every_route_whatever_the_body(api: Harness) -> None:
    job_id = str(uuid.uuid4())
    async with api.client() as c:
        for method, path in (
            ("POST", "/api/v2/workflows"), ("GET", "/api/v2/workflows"), ("GET", f"/api/v2/workflows/{job_id}"),
            ("POST", "/api/v2/workflows/stop"), ("POST", f"/api/v2/workflows/{job_id}/resume"),
            ("GET", f"/api/v2/workflows/{job_id}/pending"), ("GET", "/api/v2/workflows/pending"),
            ("GET", f"/api/v2/workflows/{job_id}/events"), ("POST", "/api/v1/flows"), ("GET", "/api/v1/flows"),
            ("DELETE", "/api/v1/flows/x"), ("GET", "/api/v1/monitor/messages"), ("GET", f"/api/v1/monitor/traces/{job_id}"),
            ("GET", "/api/nowhere"), ("PUT", "/api/v2/workflows/stop"),
        ):
            for headers in ({}, {"x-api-key": ""}, {"x-api-key": "sk-wrong"}, {"x-api-key": api.users["alice"][1] + "x"}):
                r = await c.request(method, path, content=b"{broken", headers={"content-type": "application/json",
                                                                                 **headers})
                detail(r, 401, "UNAUTHORIZED")


async def test_resume_order_404_403_422_409_leaves_the_job_suspended(api: Harness) -> None:
    flow = api.flows["refund"]
    bob_id = api.users["bob"][0]
    async with api.client("alice") as c:
        assert (await c.post(f"/api/v1/flows/{flow}/shares", json={"user": bob_id})).status_code == 201
    job_id = (await submit_suspended(api, "bob", session_id="order-all"))["job_id"]
    good = f"gate:{job_id}"
    job = await api.store.get_job(job_id)
    before = len(await api.store.read_events(job_id))

    async def still_suspended() -> None:
        now = await api.store.get_job(job_id)
        assert now.status == JobStatus.suspended and now.pending == job.pending
        assert len(await api.store.read_events(job_id)) == before

    async with api.client("bob") as c:
        # 422 before 409: a bad action with a stale id is INVALID_DECISION
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": "gate:stale", "decision": {"action_id": "maybe"}})
        detail(r, 422, "INVALID_DECISION", job_id)
        await still_suspended()
        r = await c.post(f"/api/v2/workflows/{job_id}/resume", json={"request_id": "gate:stale",
                                                                     "decision": {"action_id": "approve"}})
        detail(r, 409, "NOT_RESUMABLE", job_id)
        await still_suspended()
    async with api.client("alice") as c:
        # 404 before everything: someone else's job, however wrong the rest is
        r = await c.post(f"/api/v2/workflows/{job_id}/resume", json={"request_id": "gate:stale",
                                                                     "decision": {"action_id": "maybe"}})
        detail(r, 404, "JOB_NOT_FOUND")
        assert (await c.delete(f"/api/v1/flows/{flow}/shares/{bob_id}")).status_code == 204
    async with api.client("bob") as c:
        # 403 before 422 and 409
        for body in ({"request_id": "gate:stale", "decision": {"action_id": "maybe"}},
                     {"request_id": good, "decision": {"action_id": "maybe"}},
                     {"request_id": good, "decision": {"action_id": "approve"}}):
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", json=body)
            detail(r, 403, "FORBIDDEN", job_id)
            await still_suspended()
        # the status still offers the decision
        assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["human_request"]["request_id"] == good
        assert [p["job_id"] for p in (await c.get("/api/v2/workflows/pending")).json()] == [job_id]


async def test_repeated_idempotency_key_returns_the_first_job(api: Harness) -> None:
    async with api.client("alice") as c:
        first = await submit(c, api.flows["refund"], "sync", session_id="idem-all", idempotency_key="same")
        assert first["status"] == "suspended"
        same = {"flow_id": api.flows["refund"], "input_value": "refund 42", "mode": "sync", "session_id": "idem-all",
                "idempotency_key": "same"}
        for body in (same, {**same, "timeout": 5}):  # the same request (a retry may wait longer)
            r = await c.post("/api/v2/workflows", json=body)
            assert r.status_code == 200 and r.json()["job_id"] == first["job_id"] and r.json()["status"] == "suspended"
        # the same key with another request is refused, as Stripe does (issue 28), and starts nothing
        for other in ({"input_value": "other"}, {"mode": "background"}, {"session_id": "idem-other"},
                      {"tweaks": {"gate": {"prompt": "x"}}}):
            r = await c.post("/api/v2/workflows", json={**same, **other})
            assert r.status_code == 422, r.text
            assert r.json()["detail"]["code"] == "IDEMPOTENCY_MISMATCH" and r.json()["detail"]["job_id"] == first["job_id"]
        assert [p["job_id"] for p in (await c.get("/api/v2/workflows/pending")).json()].count(first["job_id"]) == 1
    assert (await api.store.get_job(first["job_id"])).status == JobStatus.suspended  # not superseded by itself
    async with api.client("alice") as c:
        assert (await c.post(f"/api/v1/flows/{api.flows['refund']}/shares",
                             json={"user": api.users["bob"][0]})).status_code == 201
    async with api.client("bob") as c:  # the key is per user
        other = await submit(c, api.flows["refund"], idempotency_key="same")
        assert other["job_id"] != first["job_id"]


# ---- sync timeout, late answers, failures ------------------------------------------------------


def _blocking_flow(url: str, *, gate: bool) -> dict[str, Any]:
    nodes = [{"id": "ask", "type": "ChatInput"},
             {"id": "fetch", "type": "HTTPRequest", "params": {"method": "POST", "timeout": 120, "url": url}},
             {"id": "out", "type": "ChatOutput"}]
    edges = [{"from": "ask.message", "to": "fetch.body"}]
    if gate:
        nodes.append({"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve"]}})
        edges += [{"from": "fetch.response", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "out.input_value"}]
    else:
        edges.append({"from": "fetch.response", "to": "out.input_value"})
    return {"name": f"blocking {'gate' if gate else 'plain'}", "nodes": nodes, "edges": edges}


async def test_sync_timeout_answers_with_the_job_still_running(api: Harness) -> None:
    """Both runners (in-process for a gate-less flow, Temporal for a flow with a gate): after
    `timeout` the answer is the job, still running, with its links; the whole call waits
    `timeout` once, not once in the service and again in the route."""
    blocking = BlockingHTTP()
    api.egress.add(blocking)
    waits: list[float] = []
    inline_wait = api.service.inline.wait

    async def recording_wait(job_id: str, timeout: float) -> bool:
        waits.append(timeout)
        return await inline_wait(job_id, timeout)

    api.service.inline.wait = recording_wait  # type: ignore[method-assign]
    try:
        async with api.client("alice", timeout=httpx.Timeout(60)) as c:
            for gate in (False, True):
                name = f"{'gate' if gate else 'plain'}-{uuid.uuid4().hex[:6]}"
                flow = await create_flow(c, _blocking_flow(f"{blocking.url}/block/{name}", gate=gate))
                waits.clear()
                r = await c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "x", "mode": "sync",
                                                            "timeout": 0.5})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["status"] in ("queued", "in_progress"), body
                assert JOB_KEYS <= set(body) and body["object"] == "job", body
                assert body["links"]["status"] == f"/api/v2/workflows/{body['job_id']}"
                assert sum(max(w, 0.0) for w in waits) <= 0.5, waits
                await eventually(lambda: name in blocking.seen, what="the run to call the blocking server")
                blocking.release(name)
                await api.wait_status(body["job_id"], JobStatus.suspended if gate else JobStatus.completed)
    finally:
        api.service.inline.wait = inline_wait  # type: ignore[method-assign]
        blocking.close()


async def test_a_resume_answers_where_the_run_is_now(api: Harness) -> None:
    """The resume's `run` is the status read, taken once the decision was applied: a call after
    the first gate holds the run, so it says `in_progress` (the job, with its links); the second
    gate's decision ends the run in its own step: `completed`, the body the status read gives."""
    blocking = BlockingHTTP()
    api.egress.add(blocking)
    name = f"after-{uuid.uuid4().hex[:6]}"
    spec = {"name": "gate, call, gate", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve"]}},
        {"id": "fetch", "type": "HTTPRequest",
         "params": {"method": "POST", "timeout": 120, "url": f"{blocking.url}/block/{name}"}},
        {"id": "again", "type": "HumanInput", "params": {"decisions": ["Approve"]}},
        {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "fetch.body"},
                  {"from": "fetch.response", "to": "again.prompt"},
                  {"from": "again.branch_approve", "to": "out.input_value"}]}
    try:
        async with api.client("alice", timeout=httpx.Timeout(60)) as c:
            first = await submit(c, await create_flow(c, spec), "sync")
            job_id = first["job_id"]
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", json={
                "request_id": first["human_request"]["request_id"], "decision": {"action_id": "approve"}})
            assert r.status_code == 200, r.text
            run = r.json()["run"]
            assert run["status"] == "in_progress" and JOB_KEYS <= set(run) and run["object"] == "job", run
            assert run["links"]["status"] == f"/api/v2/workflows/{job_id}" and run["human_request"] is None
            blocking.release(name)
            await api.wait_status(job_id, JobStatus.suspended)
            waiting = (await c.get(f"/api/v2/workflows/{job_id}")).json()
            assert waiting["human_request"]["prompt"] == f"answer from {name}"
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", json={
                "request_id": "gate:" + job_id, "decision": {"action_id": "approve"}})
            assert r.status_code == 409 and r.json()["detail"]["code"] == "NOT_RESUMABLE"  # answered already
            r = await c.post(f"/api/v2/workflows/{job_id}/resume", json={
                "request_id": waiting["human_request"]["request_id"], "decision": {"action_id": "approve"}})
            assert r.status_code == 200 and r.json()["run"] == (await c.get(f"/api/v2/workflows/{job_id}")).json()
            assert r.json()["run"]["status"] == "completed"
            assert r.json()["run"]["output"]["text"] == f"answer from {name}"
    finally:
        blocking.close()


async def _answer_late(api: Harness, c: httpx.AsyncClient, flow: str, session: str, action: str) -> list[dict[str, Any]]:
    resp = await submit(c, flow, "sync", session_id=session)
    job_id = resp["job_id"]
    hr = resp["human_request"]
    expires = datetime.fromisoformat(hr["paused_at"]) + timedelta(seconds=hr["timeout_seconds"])
    await eventually(lambda: datetime.now(timezone.utc) > expires, what="the gate's timeout to pass")
    r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                     json={"request_id": hr["request_id"], "decision": {"action_id": action}})
    assert r.status_code == 200 and r.json()["status"] == "resuming", r.text
    await api.wait_status(job_id, JobStatus.completed)
    return await events(c, job_id)


async def test_a_late_answer_is_accepted_and_rerouted(api: Harness) -> None:
    def flow(fallback: bool) -> dict[str, Any]:
        gate = {"id": "gate", "type": "HumanInput",
                "params": {"decisions": ["Approve", "Reject"], "timeout": 0.2, "enable_fallback": fallback}}
        spec = {"name": f"late {fallback}", "nodes": [{"id": "ask", "type": "ChatInput"}, gate,
                                                      {"id": "ok", "type": "ChatOutput", "params": {"text": "sent"}}],
                "edges": [{"from": "ask.message", "to": "gate.prompt"}, {"from": "gate.branch_approve", "to": "ok.input_value"}]}
        if fallback:
            spec["nodes"].append({"id": "late", "type": "ChatOutput", "params": {"text": "too late"}})
            spec["edges"].append({"from": "gate.branch_fallback", "to": "late.input_value"})
        return spec

    async with api.client("alice") as c:
        for fallback, rerouted in ((True, "fallback"), (False, "__expired__")):
            fid = await create_flow(c, flow(fallback))
            frames = await _answer_late(api, c, fid, f"late-{fallback}", "approve")
            names = [f["event"] for f in frames]
            i = names.index("human_input_expired")
            assert names[i + 1] == "human_input_decision"
            job_id = frames[0]["data"]["request_id"].split(":", 1)[1]
            assert frames[i]["data"] == {"request_id": f"gate:{job_id}", "requested_action": "approve",
                                         "rerouted_to": rerouted, "timeout_seconds": 0.2}
            assert frames[i + 1]["data"]["action_id"] == rerouted
            done = (await c.get(f"/api/v2/workflows/{job_id}")).json()
            texts = [o["content"] for o in done["outputs"].values()]
            assert "sent" not in str(texts)
            if fallback:
                assert "too late" in str(texts)


async def test_run_failed_data_on_both_runners(api: Harness) -> None:
    spec = {"name": "fails", "nodes": [{"id": "ask", "type": "ChatInput"}, {"id": "fetch", "type": "HTTPRequest"},
                                       {"id": "out", "type": "ChatOutput"}],
            "edges": [{"from": "ask.message", "to": "fetch.url"}, {"from": "fetch.response", "to": "out.input_value"}]}
    async with api.client("alice") as c:
        flow = await create_flow(c, spec)
        sync = await submit(c, flow, "sync", input_value="not a url")  # in-process runner
        bg = await submit(c, flow, "background", input_value="not a url")  # Temporal
        await api.wait_status(bg["job_id"], JobStatus.failed)
        for job_id in (sync["job_id"], bg["job_id"]):
            body = (await c.get(f"/api/v2/workflows/{job_id}")).json()
            assert body["status"] == "failed" and body["errors"], body
            frames = await events(c, job_id)
            assert frames[-1]["event"] == "run_failed", frames
            data = frames[-1]["data"]
            assert {"error", "type"} <= set(data) <= {"error", "type", "code", "vertex_id"}, data
            assert data["vertex_id"] == "fetch" and "not an http(s) URL" in data["error"], data
            assert data["code"] == "COMPONENT_ERROR" == body["errors"][0]["code"], data


async def test_stop_of_a_running_job_reports_cancelled_on_both_runners(api: Harness) -> None:
    """A run held in progress (its HTTP call blocked): stop answers `cancelled` with
    run_cancelled {reason: stopped}, and the run never completes afterwards."""
    blocking = BlockingHTTP()
    api.egress.add(blocking)
    try:
        async with api.client("alice", timeout=httpx.Timeout(60)) as c:
            for gate, mode in ((False, "sync"), (True, "background")):
                name = f"stop-{uuid.uuid4().hex[:6]}"
                flow = await create_flow(c, _blocking_flow(f"{blocking.url}/block/{name}", gate=gate))
                r = await c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "x", "mode": mode,
                                                            "timeout": 0.1})
                job_id = r.json()["job_id"]
                await eventually(lambda: name in blocking.seen, what="the run to call the blocking server")
                r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
                assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
                blocking.release(name)
                frames = await events(c, job_id)
                assert frames[-1]["event"] == "run_cancelled" and frames[-1]["data"] == {"reason": "stopped"}, frames
                assert (await c.get(f"/api/v2/workflows/{job_id}")).json()["status"] == "cancelled"
                assert (await api.store.get_job(job_id)).status == JobStatus.cancelled
    finally:
        blocking.close()
