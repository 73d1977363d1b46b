"""Trust through the HTTP API (DESIGN §13), as a hostile share holder would try it: a share
gives a run of the flow and nothing more (credentials masked, tweaks limited to what the owner
marked), secrets go in and never come out, a deleted flow leaves nothing waiting, and the traces
list filters before it limits."""

from __future__ import annotations

import uuid

from signoff.engine.models import JobStatus

from tests.integration.api.conftest import REFUND, Harness, submit, submit_suspended


def code(r) -> str:
    return r.json()["detail"]["code"]


def authenticated_flow(url: str) -> dict:
    return {"name": f"calls the bank {uuid.uuid4().hex[:6]}", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "call", "type": "HTTPRequest", "params": {
            "url": url, "method": "POST",
            "headers": {"Authorization": "Bearer literal-owner-token", "X-Key": {"$secret": "bank"}}}},
        {"id": "agent", "type": "Agent", "params": {"base_url": "https://models.example/v1", "api_key": "sk-inline"}},
        {"id": "out", "type": "TextOutput"}],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"},
                  {"from": "ask.message", "to": "agent.input_value"}]}


async def _share(api: Harness, flow_id: str) -> None:
    async with api.client("alice") as c:
        r = await c.post(f"/api/v1/flows/{flow_id}/shares", json={"user": api.users["bob"][0]})
        assert r.status_code == 201, r.text


async def test_a_share_holder_reads_the_flow_with_its_credentials_masked(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=authenticated_flow("https://bank.example/pay"))
        assert r.status_code == 201, r.text
        flow_id = r.json()["id"]
        own = (await c.get(f"/api/v1/flows/{flow_id}")).json()["spec"]
    assert own["nodes"][1]["params"]["headers"]["Authorization"] == "Bearer literal-owner-token"
    await _share(api, flow_id)
    async with api.client("bob") as c:
        r = await c.get(f"/api/v1/flows/{flow_id}")
    assert r.status_code == 200
    text = r.text
    assert "literal-owner-token" not in text and "sk-inline" not in text
    nodes = {n["id"]: n for n in r.json()["spec"]["nodes"]}
    assert nodes["call"]["params"]["headers"] == {"Authorization": "********", "X-Key": {"$secret": "bank"}}
    assert nodes["agent"]["params"]["api_key"] == "********"
    assert nodes["call"]["params"]["url"] == "https://bank.example/pay"  # what is not a credential stays readable


async def test_a_token_in_a_url_is_masked_for_a_share_holder(api: Harness) -> None:
    """People put tokens where they were not declared as headers: in a URL's userinfo or query."""
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=authenticated_flow(
            "https://svc:pw-in-url-77@bank.example:8443/pay?api_key=key-in-query-99&mode=live"))
        assert r.status_code == 201, r.text
        flow_id = r.json()["id"]
    await _share(api, flow_id)
    async with api.client("bob") as c:
        r = await c.get(f"/api/v1/flows/{flow_id}")
    assert r.status_code == 200 and "pw-in-url-77" not in r.text and "key-in-query-99" not in r.text
    nodes = {n["id"]: n for n in r.json()["spec"]["nodes"]}
    assert nodes["call"]["params"]["url"] == "https://********@bank.example:8443/pay?api_key=********&mode=********"


async def test_a_share_holder_cannot_redirect_the_owners_call_with_tweaks(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json=authenticated_flow("https://bank.example/pay"))
        flow_id = r.json()["id"]
    await _share(api, flow_id)
    async with api.client("bob") as c:
        for tweaks in ({"call": {"url": "https://evil.example/steal"}}, {"agent": {"base_url": "https://evil.example"}},
                       {"call": {"headers": {"X-Key": {"$secret": "bank"}}}}):
            r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "x", "tweaks": tweaks})
            assert r.status_code == 403 and code(r) == "FORBIDDEN", r.text
            assert "tweakable" in r.json()["detail"]["message"]
        assert [j for j in await api.store.list_user_active_jobs(api.users["bob"][0]) if j.flow_id == flow_id] == []
        # the input is the share holder's to give
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "x",
                                                    "tweaks": {"ask": {"input_value": "pay 5"}}})
        assert r.status_code == 200, r.text
        await c.post("/api/v2/workflows/stop", json={"job_id": r.json()["job_id"]})
    async with api.client("alice") as c:  # a tweak of a node the flow lacks is refused at submit, for anyone
        r = await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "x", "tweaks": {"nope": {}}})
        assert r.status_code == 422 and code(r) == "FLOW_INVALID", r.text


async def test_a_secret_goes_in_and_never_comes_out(api: Harness) -> None:
    value = "sk-live-" + uuid.uuid4().hex
    name = f"bank-{uuid.uuid4().hex[:6]}"
    async with api.client("alice") as c:
        r = await c.put(f"/api/v1/secrets/{name}", json={"value": value})
        assert r.status_code == 200, r.text
        assert set(r.json()) == {"name", "created_at", "updated_at"} and value not in r.text
        listed = await c.get("/api/v1/secrets")
        assert name in [s["name"] for s in listed.json()] and value not in listed.text
        for bad in ("../x", "a b", "x" * 201, "-leading"):
            r = await c.put(f"/api/v1/secrets/{bad}", json={"value": "v"})
            assert r.status_code in (404, 422), (bad, r.status_code)
        r = await c.put(f"/api/v1/secrets/{name}", json={"value": "a\u0000b"})
        assert r.status_code == 422 and code(r) == "INVALID_REQUEST"
        r = await c.put(f"/api/v1/secrets/{name}", json={"value": value, "extra": 1})
        assert r.status_code == 422
    async with api.client("bob") as c:  # another user neither sees nor deletes it
        assert name not in [s["name"] for s in (await c.get("/api/v1/secrets")).json()]
        r = await c.delete(f"/api/v1/secrets/{name}")
        assert r.status_code == 404 and code(r) == "SECRET_NOT_FOUND"
    async with api.client() as c:
        assert (await c.get("/api/v1/secrets")).status_code == 401
    async with api.client("alice") as c:
        assert (await c.delete(f"/api/v1/secrets/{name}")).status_code == 204
        assert (await c.delete(f"/api/v1/secrets/{name}")).status_code == 404
    record = await api.store.get_secret(api.users["alice"][0], name)
    assert record is None


async def test_deleting_a_flow_leaves_no_request_waiting_for_it(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v1/flows", json={**(await c.get(f"/api/v1/flows/{api.flows['refund']}")).json()["spec"],
                                                "name": "to delete"})
        flow_id = r.json()["id"]
    job = await submit_suspended(api, flow_id=flow_id)
    async with api.client("alice") as c:
        assert job["job_id"] in [p["job_id"] for p in (await c.get("/api/v2/workflows/pending")).json()]
        assert (await c.delete(f"/api/v1/flows/{flow_id}")).status_code == 204
        assert job["job_id"] not in [p["job_id"] for p in (await c.get("/api/v2/workflows/pending")).json()]
        status = (await c.get(f"/api/v2/workflows/{job['job_id']}")).json()
        assert status["status"] == "cancelled", status
        r = await c.post(f"/api/v2/workflows/{job['job_id']}/resume",
                         json={"request_id": job["human_request"]["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code in (403, 409), r.text
    assert (await api.store.get_job(job["job_id"])).status == JobStatus.cancelled


async def test_the_traces_list_filters_before_it_limits(api: Harness) -> None:
    mine = await submit_suspended(api)
    async with api.client("bob") as c:
        r = await c.post("/api/v1/flows", json=(await api.store.get_flow(api.flows["refund"])).spec)
        bobs = r.json()["id"]
        for _ in range(3):  # newer traces of someone else
            await submit(c, bobs, "sync")
    async with api.client("alice") as c:
        rows = (await c.get("/api/v1/monitor/traces", params={"limit": 1})).json()
    # before the fix, the newest trace (bob's) took the one place and alice saw none
    assert len(rows) == 1 and (await api.store.get_job(rows[0]["run_id"])).user_id == api.users["alice"][0]
    assert mine["job_id"]


async def test_revoking_a_users_keys_ends_their_page_sessions(api: Harness, monkeypatch) -> None:
    """`signoff users revoke-key` against the pages' database: a page session signed in with a
    key must not outlive it (another user's session stays)."""
    from signoff.commands.users import _revoke

    monkeypatch.setenv("SIGNOFF_HOME", str(api.settings.home))
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", api.settings.resolved_database_url)
    name = f"mallory-{uuid.uuid4().hex[:6]}"
    mallory = await api.store.create_user(name)
    key = await api.store.create_api_key(mallory.id)

    async with browser(api) as hers, browser(api) as alices:
        await signed_in(hers, key)
        await signed_in(alices, api.users["alice"][1])
        assert await _revoke(name, None) == 1
        r = await hers.get("/flows")
        assert r.status_code == 303 and r.headers["location"].startswith("/sign-in")
        assert (await alices.get("/flows")).status_code == 200


def browser(api: Harness) -> "httpx.AsyncClient":
    """A cookie-keeping client of the pages."""
    import httpx

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")


async def signed_in(c: "httpx.AsyncClient", api_key: str) -> None:
    """Sign ``c`` in to the pages with ``api_key`` (the form's token, then the key)."""
    import re

    token = re.search(r'name="token" value="([^"]+)"', (await c.get("/sign-in")).text).group(1)
    r = await c.post("/sign-in", data={"token": token, "next": "/flows", "api_key": api_key})
    assert r.status_code == 303, r.text
    assert (await c.get("/flows")).status_code == 200


async def test_an_approver_reads_the_run_not_the_owners_other_runs_and_cannot_stop_it(api: Harness) -> None:
    """bob decides alice's run; he sees that run's messages and answers, not what alice typed in
    her earlier runs of the session, and he may not stop her run (API, pages)."""
    bob_id = api.users["bob"][0]
    flow = {**REFUND, "name": f"assigned {uuid.uuid4().hex[:6]}", "nodes": [
        {**n, "params": {**n.get("params", {}), "approvers": [bob_id]}} if n["type"] == "HumanInput" else n
        for n in REFUND["nodes"]]}
    session = f"s-{uuid.uuid4().hex[:6]}"
    async with api.client("alice") as c:
        flow_id = (await c.post("/api/v1/flows", json=flow)).json()["id"]
        first = (await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "ALICE-PRIVATE-EARLIER",
                                                         "mode": "sync", "session_id": session})).json()
        await c.post("/api/v2/workflows/stop", json={"job_id": first["job_id"]})
        second = (await c.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 77 EUR",
                                                          "mode": "sync", "session_id": session})).json()
    assert second["status"] == "suspended", second
    job_id = second["job_id"]
    async with browser(api) as b:
        await signed_in(b, api.users["bob"][1])
        page = await b.get(f"/runs/{job_id}")
        assert page.status_code == 200 and "refund 77 EUR" in page.text
        assert "ALICE-PRIVATE-EARLIER" not in page.text
        assert f"/runs/{job_id}/stop" not in page.text  # no Stop button for an approver
    async with api.client("bob") as c:
        r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "FORBIDDEN", r.text
    assert (await api.store.get_job(job_id)).status == JobStatus.suspended
