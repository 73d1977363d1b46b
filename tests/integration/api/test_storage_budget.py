"""The budget of stored bytes per user (SIGNOFF_USER_MAX_STORED_BYTES, docs/security.md "Budgets
per user"), through real HTTP (uvicorn on 127.0.0.1) against the real app, worker and Temporal dev
server: a user at their budget is refused a new flow or a new run with 409 STORAGE_LIMIT saying
what they keep and what is allowed, while another user is not; the run they have going still
takes its decision and ends; deleting a flow gives its bytes back, and so does deleting ended
runs. SQLite only: the count is the store's, tested on every store by tests/store_conformance.py."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest_asyncio

from signoff.engine.models import JobStatus
from tests.helpers import signoff_cli
from tests.integration.api.conftest import REFUND, Harness, harness, serving

LIMIT = 8000  # a run of the example refund flow with a 210-character input keeps about 6.8 KB


def padded(pad: int) -> dict:
    """The refund flow, made bigger by its description (what an owner may write at length)."""
    spec = copy.deepcopy(REFUND)
    spec["description"] = "p" * pad
    return spec


@pytest_asyncio.fixture(scope="module")
async def world(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[tuple[Harness, str]]:
    async with harness(store_backend, tmp_path_factory.mktemp("stored"), temporal_client,
                       user_max_stored_bytes=LIMIT) as h:
        async with serving(h.app) as url:
            yield h, url


def client(world: tuple[Harness, str], user: str) -> httpx.AsyncClient:
    h, url = world
    return httpx.AsyncClient(base_url=url, headers={"x-api-key": h.users[user][1]}, timeout=60)


async def used(c: httpx.AsyncClient) -> int:
    r = await c.get("/api/v1/users/me")
    assert r.status_code == 200, r.text
    assert r.json()["max_stored_bytes"] == LIMIT
    return r.json()["stored_bytes"]


async def test_a_user_at_their_budget_is_refused_new_flows_and_runs_and_another_user_is_not(world) -> None:
    h, _ = world
    async with client(world, "alice") as alice, client(world, "bob") as bob:
        start = await used(alice)
        assert start > 0  # the refund flow the harness uploaded as alice
        r = await alice.post("/api/v1/flows", json=padded(LIMIT - start - 1500))
        assert r.status_code == 201, r.text
        padded_id = r.json()["id"]
        now = await used(alice)
        assert LIMIT - 1500 < now < LIMIT  # the spec as stored (normalised): its description counted
        flows = len((await alice.get("/api/v1/flows")).json())

        # one more such flow would pass the budget: refused, saying used and allowed, not saved
        r = await alice.post("/api/v1/flows", json=padded(3000))
        assert r.status_code == 409, r.text
        detail = r.json()["detail"]
        assert detail["code"] == "STORAGE_LIMIT"
        assert detail["used"] == now and detail["limit"] == LIMIT and detail["adding"] > 3000
        assert "SIGNOFF_USER_MAX_STORED_BYTES" in detail["message"]
        assert len((await alice.get("/api/v1/flows")).json()) == flows and await used(alice) == now

        # runs push alice past her budget (a run going is bounded by its own budget, not stopped)
        waiting = []
        for _ in range(20):
            if await used(alice) >= LIMIT:
                break
            r = await alice.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "mode": "sync",
                                                            "input_value": "refund 42 " + "x" * 200})
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "suspended", r.text
            waiting.append(r.json())
        over = await used(alice)
        assert over >= LIMIT and waiting

        jobs = len(await h.store.list_user_active_jobs(h.users["alice"][0]))
        r = await alice.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "input_value": "refund 43"})
        assert r.status_code == 409, r.text
        assert r.json()["detail"]["code"] == "STORAGE_LIMIT" and r.json()["detail"]["used"] == over
        assert len(await h.store.list_user_active_jobs(h.users["alice"][0])) == jobs  # nothing created

        # another user is not alice: bob saves the same flow and runs it
        r = await bob.post("/api/v1/flows", json=padded(3000))
        assert r.status_code == 201, r.text
        r = await bob.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "refund 44"})
        assert r.status_code == 200, r.text
        assert await used(bob) > 3000  # his own count (his run may take him past the budget too)

        # alice's run that waits still takes its decision and ends, over her budget
        first = waiting[0]
        r = await alice.post(f"/api/v2/workflows/{first['job_id']}/resume",
                             json={"request_id": first["human_request"]["request_id"],
                                   "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        assert (await h.wait_status(first["job_id"], JobStatus.completed)).status == JobStatus.completed

        # deleting a flow gives its bytes back: alice may run again
        assert (await alice.delete(f"/api/v1/flows/{padded_id}")).status_code == 204
        assert await used(alice) < LIMIT
        r = await alice.post("/api/v2/workflows", json={"flow_id": h.flows["refund"], "input_value": "refund 45"})
        assert r.status_code == 200, r.text


async def test_signoff_whoami_says_what_you_keep_against_your_budget(world) -> None:
    h, url = world
    async with client(world, "bob") as bob:
        kept = await used(bob)
    name = (await h.store.get_user(h.users["bob"][0])).name
    done = await asyncio.to_thread(signoff_cli, "whoami", "--api-url", url, "--api-key", h.users["bob"][1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{name} ({h.users['bob'][0]})"
    shown = f"{kept} bytes" if kept < 1024 else f"{kept / 1024:.1f} KiB"
    assert done.stdout.splitlines()[1] == f"stored: {shown} of {LIMIT / 1024:.1f} KiB ({100 * kept / LIMIT:.0f}%)"


async def test_a_user_stuck_at_their_budget_by_runs_deletes_ended_ones_and_runs_again(world) -> None:
    """The runs alone fill the budget (the flow is kept): submitting is refused until the user
    deletes ended runs (DELETE /api/v2/workflows/{job_id}), which gives back exactly what they kept."""
    h, url = world
    user = await h.store.create_user(f"carol-{uuid.uuid4().hex[:6]}")
    key = await h.store.create_api_key(user.id)
    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=60) as carol:
        r = await carol.post("/api/v1/flows", json=REFUND)
        assert r.status_code == 201, r.text
        flow_id = r.json()["id"]
        with_flow = await used(carol)
        ended = []
        for i in range(30):
            if await used(carol) >= LIMIT:
                break
            r = await carol.post("/api/v2/workflows", json={"flow_id": flow_id, "mode": "sync", "session_id": f"s{i}",
                                                            "input_value": "refund 42 " + "x" * 300})
            assert r.status_code == 200 and r.json()["status"] == "suspended", r.text
            job = r.json()
            r = await carol.post(f"/api/v2/workflows/{job['job_id']}/resume",
                                 json={"request_id": job["human_request"]["request_id"],
                                       "decision": {"action_id": "reject"}})
            assert r.status_code == 200, r.text
            await h.wait_status(job["job_id"], JobStatus.completed)
            ended.append(job["job_id"])
        assert await used(carol) >= LIMIT and ended
        r = await carol.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 43"})
        assert r.status_code == 409 and r.json()["detail"]["code"] == "STORAGE_LIMIT", r.text
        assert "ended runs" in r.json()["detail"]["message"]  # the message says how to get out

        for job_id in ended:
            assert (await carol.delete(f"/api/v2/workflows/{job_id}")).status_code == 204
        assert await used(carol) == with_flow  # every byte of every run given back
        r = await carol.post("/api/v2/workflows", json={"flow_id": flow_id, "input_value": "refund 44"})
        assert r.status_code == 200, r.text
