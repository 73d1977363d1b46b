"""Deleting an ended run (DELETE /api/v2/workflows/{job_id}, `signoff delete`), through real HTTP
against the real app, worker and Temporal dev server, on SQLite and PostgreSQL (the delete is the
store's own SQL): the owner gets every byte the run kept back and nothing of it is left; another
user cannot delete it (404, as for reading it) and an approver who sees it may not (403); a run
that has not ended is refused (409 RUN_NOT_ENDED) and still takes its decision; a delete racing
the decision never cuts the run short."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import timedelta

import httpx
import pytest

from signoff.engine.models import JobStatus, utcnow
from tests.helpers import eventually
from tests.helpers import signoff_cli
from tests.integration.api.conftest import Harness, serving, submit_suspended



def code(r: httpx.Response) -> str:
    return r.json()["detail"]["code"]


async def used(c: httpx.AsyncClient) -> int:
    r = await c.get("/api/v1/users/me")
    assert r.status_code == 200, r.text
    return r.json()["stored_bytes"]


async def ended_run(h: Harness, user: str = "alice") -> str:
    """A run of ``user`` that paused at its gate, was approved and completed."""
    job = await submit_suspended(h, user)
    async with h.client(user) as c:
        r = await c.post(f"/api/v2/workflows/{job['job_id']}/resume",
                         json={"request_id": job["human_request"]["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    await h.wait_status(job["job_id"], JobStatus.completed)
    return job["job_id"]


async def _workflow_closed(h: Harness, job_id: str) -> bool:
    import temporalio.client

    desc = await h.service.client.get_workflow_handle(job_id).describe()
    return desc.status != temporalio.client.WorkflowExecutionStatus.RUNNING


async def nothing_left(h: Harness, job_id: str) -> None:
    assert await h.store.get_job(job_id) is None
    assert await h.store.read_events(job_id) == []
    assert await h.store.get_trace(job_id) == []
    assert await h.store.load_latest_checkpoint(job_id) is None


@pytest.mark.both_stores  # each store's own byte accounting
async def test_the_owner_deletes_an_ended_run_and_gets_back_every_byte_it_kept(api: Harness) -> None:
    async with api.client("alice") as alice:
        before = await used(alice)
        job_id = await ended_run(api)
        assert await used(alice) > before  # its request, events, messages, trace...
        assert len(await api.store.read_events(job_id)) >= 3 and await api.store.get_trace(job_id)

        r = await alice.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 204 and r.content == b"", r.text
        assert await used(alice) == before
        await nothing_left(api, job_id)
        for path in (f"/api/v2/workflows/{job_id}", f"/api/v2/workflows/{job_id}/events"):
            r = await alice.get(path)
            assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND", path
        r = await alice.delete(f"/api/v2/workflows/{job_id}")  # twice: gone
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"
        assert await used(alice) == before


async def test_another_user_cannot_delete_a_run_and_an_approver_may_not(api: Harness) -> None:
    job_id = await ended_run(api)
    async with api.client("bob") as bob:
        r = await bob.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 404 and code(r) == "JOB_NOT_FOUND"  # as for reading it: not even that it exists
        for bad in ("nope", "x" * 300, "%00", "..%2F..%2Fv1%2Fflows"):
            r = await bob.delete(f"/api/v2/workflows/{bad}")
            assert r.status_code == 404, (bad, r.text)
        # bob voted on it (he sees the run): still not his to delete
        await api.store.add_participants(job_id, [api.users["bob"][0]])
        assert (await bob.get(f"/api/v2/workflows/{job_id}")).status_code == 200
        r = await bob.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 403 and code(r) == "FORBIDDEN"
    async with api.client() as anonymous:
        r = await anonymous.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 401
    assert (await api.store.get_job(job_id)).status == JobStatus.completed
    assert await api.store.read_events(job_id)


async def test_deleting_a_waiting_run_is_refused_and_the_run_still_resumes(api: Harness) -> None:
    job = await submit_suspended(api)
    job_id = job["job_id"]
    async with api.client("alice") as alice:
        events = len(await api.store.read_events(job_id))
        r = await alice.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 409 and code(r) == "RUN_NOT_ENDED", r.text
        assert "stop it first" in r.json()["detail"]["message"]
        # nor does a retention however short (test_retention.py runs the sweep's own)
        assert job_id not in await api.store.delete_runs_ended_before(utcnow() + timedelta(days=1))
        assert (await api.store.get_job(job_id)).status == JobStatus.suspended
        assert len(await api.store.read_events(job_id)) == events

        r = await alice.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": job["human_request"]["request_id"], "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)
        assert (await alice.delete(f"/api/v2/workflows/{job_id}")).status_code == 204


async def test_a_stopped_run_is_deleted_once_its_workflow_is_let_go_of(api: Harness) -> None:
    job_id = (await submit_suspended(api))["job_id"]
    async with api.client("alice") as alice:
        r = await alice.post("/api/v2/workflows/stop", json={"job_id": job_id})
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        await api.store.want_release(job_id)  # as if Temporal had been away when it was stopped
        r = await alice.delete(f"/api/v2/workflows/{job_id}")
        assert r.status_code == 409 and code(r) == "RUN_NOT_ENDED" and "try again" in r.json()["detail"]["message"]
        assert (await api.store.get_job(job_id)).status == JobStatus.cancelled
        await api.service.release_due(older_than=0)  # the sweep lets go of it
        # the cancelled workflow then closes the run's trace, maybe more than once; a delete before it closes leaves a late
        # root span behind (left open: docs/security.md, "Deleting ended runs")
        await eventually(lambda: _workflow_closed(api, job_id), what="the cancelled run's workflow to close")
        assert (await alice.delete(f"/api/v2/workflows/{job_id}")).status_code == 204
        await nothing_left(api, job_id)


@pytest.mark.both_stores  # a race of two claims
async def test_a_delete_racing_the_decision_never_cuts_the_run_short(api: Harness) -> None:
    """Each round: the decision and a delete sent at once. The decision always takes effect (200,
    its event recorded); the delete is refused while the run goes on, or, when the run ended
    first, takes it whole."""
    for _ in range(4):
        job = await submit_suspended(api)
        job_id = job["job_id"]
        async with api.client("alice") as alice:
            resumed, deleted = await asyncio.gather(
                alice.post(f"/api/v2/workflows/{job_id}/resume",
                           json={"request_id": job["human_request"]["request_id"], "decision": {"action_id": "approve"}}),
                alice.delete(f"/api/v2/workflows/{job_id}"))
        assert resumed.status_code == 200, resumed.text
        if deleted.status_code == 204:  # the run had completed
            await nothing_left(api, job_id)
            continue
        assert deleted.status_code == 409 and code(deleted) == "RUN_NOT_ENDED", deleted.text
        assert (await api.wait_status(job_id, JobStatus.completed)).status == JobStatus.completed
        assert [e for e in await api.store.read_events(job_id) if e.event == "human_input_decision"]


async def test_signoff_delete(api: Harness) -> None:
    done_id = await ended_run(api)
    waiting_id = (await submit_suspended(api))["job_id"]

    async def cli(*args: str) -> subprocess.CompletedProcess:
        return await asyncio.to_thread(signoff_cli, "delete", *args, "--api-url", url,
                                       "--api-key", api.users["alice"][1])

    async with serving(api.app) as url:
        done = await cli(done_id)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"run {done_id} deleted"
        again = await cli(done_id)
        assert again.returncode == 1 and "JOB_NOT_FOUND" in again.stderr
        refused = await cli(waiting_id)
        assert refused.returncode == 1 and "RUN_NOT_ENDED" in refused.stderr and "stop it first" in refused.stderr
        sideways = await cli(f"../../v1/flows/{api.flows['refund']}")  # one path segment, never another route
        assert sideways.returncode == 1 and "NOT_FOUND" in sideways.stderr
    await nothing_left(api, done_id)
    assert (await api.store.get_job(waiting_id)).status == JobStatus.suspended
    assert await api.store.get_flow(api.flows["refund"]) is not None
