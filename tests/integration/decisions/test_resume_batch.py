"""Many decisions in one call (DESIGN §17, ``POST /api/v2/workflows/resume-batch``) through the
real app, a real worker and the Temporal dev server, on SQLite and PostgreSQL: each item is a
decision of its own (its own access check, checks and claim), answered as its own resume would
be; exactly once each whatever decides the same requests meanwhile (a single resume, the
``resume`` Update through Temporal, a stop); at most SIGNOFF_RESUME_BATCH_CONCURRENCY under way
at once; each item a write of SIGNOFF_WRITE_RATE."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from signoff.api.ratelimit import WriteBudget
from signoff.engine.models import Decision, JobStatus
from signoff.workflows.types import ResumeInput, ResumeResult
from tests.integration.api.conftest import Harness
from tests.integration.decisions.conftest import gate_flow, resume, run_suspended, uid, upload, user_name

pytestmark = pytest.mark.temporal

URL = "/api/v2/workflows/resume-batch"


def item(job: dict[str, Any], action: str = "approve", **decision: Any) -> dict[str, Any]:
    return {"job_id": job["job_id"], "request_id": job["human_request"]["request_id"],
            "decision": {"action_id": action, **decision}}


async def batch(h: Harness, who: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    async with h.client(who, timeout=120) as c:
        r = await c.post(URL, json={"items": items})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(x["job_id"], x["request_id"]) for x in body["results"]] == [(i["job_id"], i["request_id"]) for i in items]
    assert body["applied"] == sum(x["status_code"] == 200 for x in body["results"])
    return body


async def suspended_runs(h: Harness, n: int, flow_id: str | None = None) -> list[dict[str, Any]]:
    sem = asyncio.Semaphore(10)

    async def one() -> dict[str, Any]:
        async with sem:
            return await run_suspended(h, flow_id or h.flows["refund"])

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def decisions(h: Harness, job_id: str) -> list[dict[str, Any]]:
    return [e.data for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]


async def update(h: Harness, job: dict[str, Any]) -> int:
    """The same decision through Temporal (the ``resume`` Update, as the CLI sends it, for alice):
    200 when applied, else 409 (refused, or the workflow closed before it took the Update)."""
    handle = h.service.client.get_workflow_handle(job["job_id"])
    try:
        await handle.execute_update(
            "resume", ResumeInput(request_id=job["human_request"]["request_id"], decision=Decision(action_id="approve"),
                                  user=uid(h, "alice")),
            id=f"test-{uuid.uuid4()}", result_type=ResumeResult, rpc_timeout=timedelta(seconds=30))
    except (WorkflowUpdateFailedError, RPCError):
        return 409
    return 200


@pytest.mark.both_stores  # claims raced through the whole stack
async def test_a_bulk_decision_of_20_with_two_decided_elsewhere_meanwhile(h: Harness):
    """The inbox's case: 20 requests selected, two of them decided elsewhere before the batch
    lands (one by a single resume, one by the ``resume`` Update through Temporal): 18 applied,
    the two answered 409 NOT_RESUMABLE, and every request decided exactly once."""
    jobs = await suspended_runs(h, 20)
    r = await resume(h, "alice", jobs[3]["job_id"], "approve")
    assert r.status_code == 200, r.text
    assert await update(h, jobs[11]) == 200

    body = await batch(h, "alice", [item(j) for j in jobs])

    codes = [(x["status_code"], x["body"].get("detail", {}).get("code")) for x in body["results"]]
    assert body["applied"] == 18, codes
    for i, x in enumerate(body["results"]):
        if i in (3, 11):
            assert (x["status_code"], x["body"]["detail"]["code"]) == (409, "NOT_RESUMABLE"), x
            assert x["body"]["detail"]["job_id"] == jobs[i]["job_id"]
        else:
            assert x["status_code"] == 200, x
            assert x["body"]["status"] == "resuming" and x["body"]["job_id"] == jobs[i]["job_id"]
            assert x["body"]["run"]["job_id"] == jobs[i]["job_id"]  # the run as a single resume shows it
    for j in jobs:
        await h.wait_status(j["job_id"], JobStatus.completed)
        assert len(await decisions(h, j["job_id"])) == 1, j["job_id"]


@pytest.mark.both_stores  # claims raced through the whole stack
async def test_a_batch_racing_single_resumes_updates_and_stops_decides_each_once(h: Harness):
    """A batch of 30 and, at the same time, for a third of its requests a single resume, the
    Update through Temporal or the owner's stop, each a moment before or after: every request
    is decided at most once, by the surface that was answered 200 (exactly one of them), and a
    stopped one that nobody decided before the stop has no decision at all."""
    jobs = await suspended_runs(h, 30)
    rnd = random.Random(29)
    raced = {i: ("http", "temporal", "stop")[i % 3] for i in rnd.sample(range(30), 12)}

    async def later(delay: float, call: Any) -> Any:
        await asyncio.sleep(delay)
        return await call

    async def other(i: int) -> tuple[str, int, dict[str, Any]]:
        job, how = jobs[i], raced[i]
        if how == "http":
            r = await resume(h, "alice", job["job_id"], "approve")
            return how, r.status_code, r.json()
        if how == "temporal":
            return how, await update(h, job), {}
        async with h.client("alice") as c:
            r = await c.post("/api/v2/workflows/stop", json={"job_id": job["job_id"]})
        assert r.status_code == 200, r.text
        return how, r.status_code, r.json()

    body, *others = await asyncio.gather(
        batch(h, "alice", [item(j) for j in jobs]),
        *(later(rnd.uniform(0, 2.0), other(i)) for i in raced))
    elsewhere = dict(zip(raced, others))
    seen = Counter()
    for i, j in enumerate(jobs):
        job = await h.wait_status(j["job_id"], JobStatus.completed, JobStatus.cancelled)
        recorded = await decisions(h, j["job_id"])
        assert len(recorded) <= 1, (i, recorded)
        mine = body["results"][i]
        assert mine["status_code"] in (200, 409), mine
        if mine["status_code"] == 409:
            assert mine["body"]["detail"]["code"] == "NOT_RESUMABLE", mine
        how, status, answer = elsewhere.get(i, ("none", 0, {}))
        if how in ("http", "temporal"):
            assert sorted((mine["status_code"], status)) == [200, 409], (i, mine, how, status, answer)
            assert len(recorded) == 1 and job.status == JobStatus.completed, (i, recorded, job.status)
        elif how == "stop":
            if mine["status_code"] == 200:
                assert len(recorded) == 1, (i, recorded)
            else:
                assert recorded == [] and job.status == JobStatus.cancelled, (i, recorded, job.status)
                assert answer["status"] == "cancelled", answer
        else:
            assert mine["status_code"] == 200 and len(recorded) == 1, (i, mine, recorded)
        seen[(how, mine["status_code"])] += 1
    print(f"\nbatch racing others: {dict(seen)}")


async def test_each_item_has_its_own_access_and_checks(h: Harness):
    """An item for a run the caller may not see is that item's 404, one they may see but not
    decide its 403, a bad action its 422, a malformed job id its 404, a limit broken its 422;
    the others are applied. A request named twice in one batch is decided once: the second
    answer is 409."""
    mine = await suspended_runs(h, 3)
    bobs = await run_suspended(h, await upload(h, gate_flow({}, name="bob's"), who="bob"), who="bob")
    assigned = await upload(h, gate_flow({"approvers": [await user_name(h, "carol")]}, name="carol decides"))
    carols = await run_suspended(h, assigned)  # alice's run that only carol decides
    too_long = "x" * (h.settings.max_string_chars + 1)
    items = [item(mine[0]), item(bobs), item(carols), item(mine[1], "nope"),
             {**item(mine[2]), "job_id": "../../etc"}, item(mine[2], values={"note": too_long}),
             item(mine[2]), item(mine[0])]
    body = await batch(h, "alice", items)
    got = [(x["status_code"], x["body"].get("detail", {}).get("code")) for x in body["results"]]
    assert got[1:7] == [(404, "JOB_NOT_FOUND"), (403, "NOT_AN_APPROVER"), (422, "INVALID_DECISION"),
                        (404, "JOB_NOT_FOUND"), (422, "INVALID_REQUEST"), (200, None)], got
    # the same request twice (side by side): one claim wins, the other is answered as a late resume
    assert sorted([got[0], got[7]]) == [(200, None), (409, "NOT_RESUMABLE")], got
    assert body["applied"] == 2
    for x in body["results"][1:6]:  # an error body names the job as a single resume's does (a malformed id: not)
        assert x["body"]["detail"]["job_id"] == (x["job_id"] if x["job_id"] != "../../etc" else None), x
    # nothing was done to the runs that were refused
    for j in (bobs, carols):
        assert (await h.store.get_job(j["job_id"])).status == JobStatus.suspended
        assert await decisions(h, j["job_id"]) == []
    for j in (mine[0], mine[2]):
        await h.wait_status(j["job_id"], JobStatus.completed)
        assert len(await decisions(h, j["job_id"])) == 1
    assert (await h.store.get_job(mine[1]["job_id"])).status == JobStatus.suspended  # its bad action changed nothing


async def test_hostile_ids_are_that_items_refusal_and_the_answer_still_json(h: Harness):
    """A job id with NUL or a lone surrogate (JSON can say both) is that item's 422, echoed
    escaped; a far too long one its 404; the batch answers 200 with valid JSON and the genuine
    item is decided. A request id that is no text refuses the batch as a single resume's body
    is refused, naming the item."""
    job = (await suspended_runs(h, 1))[0]
    hostile = ['{"job_id": "\\ud800x", "request_id": "gate:x", "decision": {"action_id": "approve"}}',
               '{"job_id": "a\\u0000b", "request_id": "gate:x", "decision": {"action_id": "approve"}}',
               '{"job_id": "' + "j" * 5000 + '", "request_id": "gate:x", "decision": {"action_id": "approve"}}']
    body = '{"items": [' + ", ".join([*hostile, json.dumps(item(job))]) + "]}"
    async with h.client("alice") as c:
        r = await c.post(URL, content=body.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        got = [(x["job_id"], x["status_code"], x["body"].get("detail", {}).get("code")) for x in r.json()["results"]]
        assert got[:2] == [("\\ud800x", 422, "INVALID_REQUEST"), ("a\\u0000b", 422, "INVALID_REQUEST")], got
        assert got[2][1:] == (404, "JOB_NOT_FOUND") and got[3] == (job["job_id"], 200, None), got
        bad = '{"items": [{"job_id": "ok", "request_id": "gate:\\udfff", "decision": {"action_id": "approve"}}]}'
        r = await c.post(URL, content=bad.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert [(p["loc"], p["type"]) for p in r.json()["detail"]["problems"]] == [("body.items.0.request_id",
                                                                                    "string_surrogate")]
    await h.wait_status(job["job_id"], JobStatus.completed)


async def test_the_batch_itself_is_bounded(h: Harness):
    """At most 100 items (more, or none: 422 INVALID_REQUEST naming ``body.items``, nothing
    decided); an unknown field is refused as in a single resume."""
    job = (await suspended_runs(h, 1))[0]
    async with h.client("alice") as c:
        for items, kind in (([item(job)] * 101, "too_long"), ([], "too_short")):
            r = await c.post(URL, json={"items": items})
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert detail["code"] == "INVALID_REQUEST"
            assert [(p["loc"], p["type"]) for p in detail["problems"]] == [("body.items", kind)], detail
        r = await c.post(URL, json={"items": [{**item(job), "extra": 1}]})
        assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST", r.text
    assert (await h.store.get_job(job["job_id"])).status == JobStatus.suspended


async def test_a_batch_runs_a_few_items_at_a_time(h: Harness, monkeypatch: pytest.MonkeyPatch):
    """SIGNOFF_RESUME_BATCH_CONCURRENCY items under way at once, never the whole batch."""
    jobs = await suspended_runs(h, 20)
    real, now, most = h.service.resume, [0], [0]

    async def counted(*args: Any, **kw: Any) -> Any:
        now[0] += 1
        most[0] = max(most[0], now[0])
        try:
            return await real(*args, **kw)
        finally:
            now[0] -= 1

    monkeypatch.setattr(h.service, "resume", counted)
    body = await batch(h, "alice", [item(j) for j in jobs])
    assert body["applied"] == 20
    assert 1 < most[0] <= h.settings.resume_batch_concurrency < 20, most


async def test_each_item_is_a_write_of_the_rate_budget(h: Harness, monkeypatch: pytest.MonkeyPatch):
    """A batch takes one write per item from SIGNOFF_WRITE_RATE's bucket: with a burst of 3 and a
    rate that refills one in 100 s, a batch of 6 applies its first 3 items (the request's own write
    and two more) and answers the rest 429 RATE_LIMITED with retry_after, leaving them waiting;
    a single resume after it is refused too."""
    jobs = await suspended_runs(h, 7)
    monkeypatch.setattr(h.app.state, "write_buckets", WriteBudget(0.01, 3))
    body = await batch(h, "alice", [item(j) for j in jobs[:6]])
    got = [(x["status_code"], x["body"].get("detail", {}).get("code")) for x in body["results"]]
    assert got == [(200, None)] * 3 + [(429, "RATE_LIMITED")] * 3, got
    assert all(x["body"]["detail"]["retry_after"] >= 1 for x in body["results"][3:])
    for j in jobs[3:6]:
        assert (await h.store.get_job(j["job_id"])).status == JobStatus.suspended
    r = await resume(h, "alice", jobs[6]["job_id"], "approve")
    assert r.status_code == 429 and r.json()["detail"]["code"] == "RATE_LIMITED", r.text
