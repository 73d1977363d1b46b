"""A fair share of the service per user (issue 28), through real HTTP (uvicorn) against the real
app and worker: a user's runs queued or running are bounded (SIGNOFF_USER_MAX_RUNS_IN_FLIGHT),
counted where the job is inserted so racing submits never pass it (SQLite and PostgreSQL); and
the service's write budget (SIGNOFF_WRITE_RATE_TOTAL) is shared among the users who write, so a
user under their share is not refused because another floods."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from signoff.engine.models import JobStatus
from tests.helpers import eventually
from tests.integration.api.conftest import BlockingHTTP, Harness, harness, serving

LIMIT = 3


def blocking_flow(url: str) -> dict[str, Any]:
    """A gate-less flow whose HTTP Request holds its run in_progress until the server lets it go."""
    return {"name": "held", "nodes": [
        {"id": "ask", "type": "ChatInput"},
        {"id": "fetch", "type": "HTTPRequest", "params": {"method": "POST", "timeout": 120, "url": url}},
        {"id": "out", "type": "ChatOutput"}],
        "edges": [{"from": "ask.message", "to": "fetch.body"}, {"from": "fetch.response", "to": "out.input_value"}]}


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("fair"), temporal_client,
                       user_max_runs_in_flight=LIMIT) as h:
        yield h


def client(base: str, h: Harness, user: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, headers={"x-api-key": h.users[user][1]}, timeout=60)


@pytest.mark.both_stores  # the count is taken under the user's row lock: PostgreSQL's, SQLite's writer
async def test_racing_submits_never_pass_the_runs_in_flight_limit(h: Harness) -> None:
    blocking = BlockingHTTP()
    h.egress.add(blocking)
    name = f"held-{uuid.uuid4().hex[:6]}"
    try:
        async with serving(h.app) as base, client(base, h, "alice") as c, client(base, h, "bob") as bob:
            r = await c.post("/api/v1/flows", json=blocking_flow(f"{blocking.url}/block/{name}"))
            assert r.status_code == 201, r.text
            flow = r.json()["id"]
            submits = [c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "x", "mode": "background",
                                                         "idempotency_key": f"k{i}"}) for i in range(3 * LIMIT)]
            answers = await asyncio.gather(*submits)
            taken = [r for r in answers if r.status_code == 200]
            refused = [r for r in answers if r.status_code != 200]
            assert len(taken) == LIMIT, [r.text for r in answers]
            for r in refused:
                assert r.status_code == 429, r.text
                assert r.json()["detail"]["code"] == "RUNS_IN_FLIGHT_LIMIT", r.text
                assert int(r.headers["retry-after"]) >= 1
                assert r.json()["detail"]["retry_after"] == int(r.headers["retry-after"])
            user_id = h.users["alice"][0]
            assert len(await h.store.list_user_active_jobs(user_id)) == LIMIT  # nothing else was inserted
            # each run waits in Temporal's task queue under its user's fairness key
            desc = await h.service.client.get_workflow_handle(taken[0].json()["job_id"]).describe()
            assert desc.raw_description.workflow_execution_info.priority.fairness_key == user_id
            # a submit sent again with its idempotency key answers its job, at the limit too
            i = next(i for i, r in enumerate(answers) if r.status_code == 200)
            again = await c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "x", "mode": "background",
                                                            "idempotency_key": f"k{i}"})
            assert again.status_code == 200 and again.json()["job_id"] == answers[i].json()["job_id"], again.text
            # another user's runs are theirs to count
            r = await bob.post("/api/v1/flows", json=blocking_flow(f"{blocking.url}/block/{name}"))
            assert r.status_code == 201, r.text
            r = await bob.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "x",
                                                          "mode": "background"})
            assert r.status_code == 200, r.text
            taken.append(r)
            # a run that ends frees its place
            await eventually(lambda: name in blocking.seen, what="a held run to call the server")
            blocking.release(name)
            for r in taken:
                await h.wait_status(r.json()["job_id"], JobStatus.completed)
            r = await c.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "input_value": "x",
                                                        "mode": "sync"})
            assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
            # a run paused at a gate is not in flight: LIMIT more runs may start beside it
            more = await asyncio.gather(*(c.post("/api/v2/workflows", json={
                "flow_id": flow, "input_value": "x", "mode": "background"}) for _ in range(LIMIT)))
            assert [r.status_code for r in more] == [200] * LIMIT, [r.text for r in more]
            for r in more:
                await h.wait_status(r.json()["job_id"], JobStatus.completed)
    finally:
        blocking.close()


async def test_a_user_under_their_share_is_not_refused_when_others_flood(
        store_backend, tmp_path_factory, temporal_client) -> None:
    """Five users flood, one writes now and then: with a service budget of 10 writes a second
    shared by six writers, each flooder is paced to its share (429 RATE_LIMITED naming
    SIGNOFF_WRITE_RATE_TOTAL) while the sixth, under its share, is answered every time."""
    async with harness(store_backend, tmp_path_factory.mktemp("share"), temporal_client,
                       write_rate=20, write_burst=2, write_rate_total=10) as h:
        names = [f"flood{i}" for i in range(5)] + ["calm"]
        for name in names:
            user = await h.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            h.users[name] = (user.id, await h.store.create_api_key(user.id))
        flow = {"name": "f", "nodes": [{"id": "a", "type": "ChatInput"}, {"id": "o", "type": "ChatOutput"}],
                "edges": [{"from": "a.message", "to": "o.input_value"}]}
        async with serving(h.app) as base:
            clients = {n: client(base, h, n) for n in names}
            try:
                for n in names:  # every one writes once: six writers share the 10 a second
                    assert (await clients[n].post("/api/v1/flows", json=flow)).status_code == 201
                floods = await asyncio.gather(*(clients[n].post("/api/v1/flows", json=flow)
                                                for n in names[:5] for _ in range(12)))
                limited = [r for r in floods if r.status_code == 429]
                assert limited, "the flooders were never paced"
                body = limited[0].json()["detail"]
                assert body["code"] == "RATE_LIMITED" and "SIGNOFF_WRITE_RATE_TOTAL" in body["message"], body
                # the calm user's one write: its bucket holds its burst, whatever the others did
                r = await clients["calm"].post("/api/v1/flows", json=flow)
                assert r.status_code == 201, r.text
            finally:
                for c in clients.values():
                    await c.aclose()


async def test_a_users_inline_runs_wait_their_turn_behind_anothers_one(
        store_backend, tmp_path_factory, temporal_client) -> None:
    """SIGNOFF_INLINE_MAX_RUNNING=1: alice's four sync runs of gate-less flows take the one place
    in turn, and bob's one run, sent after them, goes next when alice's first ends, before her
    second, third and fourth (first come, first served would run all of hers first; no limit would
    run all five at once)."""
    blocking = BlockingHTTP()
    async with harness(store_backend, tmp_path_factory.mktemp("turns"), temporal_client,
                       inline_max_running=1) as h:
        h.egress.add(blocking)
        tag = uuid.uuid4().hex[:6]
        try:
            async with serving(h.app) as base, client(base, h, "alice") as alice, client(base, h, "bob") as bob:
                async def run(c: httpx.AsyncClient, name: str) -> str:
                    r = await c.post("/api/v1/flows", json=blocking_flow(f"{blocking.url}/block/{name}"))
                    assert r.status_code == 201, r.text
                    r = await c.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "x",
                                                                "mode": "sync", "timeout": 0.2})
                    assert r.status_code == 200 and r.json()["status"] == "in_progress", r.text
                    return r.json()["job_id"]

                jobs = [await run(alice, f"a{i}-{tag}") for i in range(4)]
                await eventually(lambda: blocking.seen == [f"a0-{tag}"], what="alice's first run to hold the place")
                jobs.append(await run(bob, f"b-{tag}"))
                for k in range(5):  # let go of each run that holds the place, in the order they came to it
                    await eventually(lambda: len(blocking.seen) > k, what=f"run {k + 1} of 5 to call")
                    blocking.release(blocking.seen[k])
                for job_id in jobs:
                    await h.wait_status(job_id, JobStatus.completed)
                assert blocking.seen == [f"a0-{tag}", f"b-{tag}", f"a1-{tag}", f"a2-{tag}", f"a3-{tag}"]
        finally:
            blocking.close()


async def test_a_runs_activities_take_their_users_turns(h: Harness, monkeypatch) -> None:
    """The worker's writes for a run (its layers' activity, the decision's local activity) are
    keyed by the run's user, as the workflow names them in each activity's headers
    (workflows/whose.py): keyed by run, each run of a user who starts them as fast as they can
    would be a newcomer at the SQLite writer (engine/fairgate.py) and go before a person's run.
    Its regular activities' tasks carry the user's fairness key too (the server does not hand the
    workflow's on), so Temporal's queue takes them in turns per user."""
    from temporalio import activity

    gate = getattr(h.store, "_write_lock", None)
    if gate is None:
        pytest.skip("the SQLite store's writer")
    seen: list[tuple[str, bool, str]] = []
    keys: set[str | None] = set()
    hold = gate.hold

    def spy(user_id: str):
        if activity.in_activity():
            info = activity.info()
            seen.append((info.activity_type, info.is_local, user_id))
            if not info.is_local:  # and its task waited in Temporal's queue under the user's key
                keys.add(info.priority.fairness_key if info.priority is not None else None)
        return hold(user_id)

    monkeypatch.setattr(gate, "hold", spy)
    user_id = h.users["alice"][0]
    async with serving(h.app) as base, client(base, h, "alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "input_value": "x", "mode": "sync"})
        assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
        job_id = r.json()["job_id"]
        job = await h.store.get_job(job_id)
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": job.pending.request_id, "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await h.wait_status(job_id, JobStatus.completed)
    kinds = {(name, local) for name, local, _ in seen}
    assert any(local for _, local in kinds) and any(not local for _, local in kinds), kinds
    assert {u for _, _, u in seen} == {user_id}, seen
    assert keys == {user_id}, keys
