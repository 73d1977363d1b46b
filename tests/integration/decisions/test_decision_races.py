"""A decision event means a decision took effect (DESIGN §1, invariants 2 and 9), whatever races it:
a person's resume (``POST /resume``, or the ``resume`` Update sent through Temporal as the CLI
does) against the run owner's stop (``POST /stop``) or her new run in the same session (a
supersede), fired together, many times, on SQLite and PostgreSQL, on the example refund flow and
on a Langflow export with a Human Input (tests/fixtures/langflow.py), through the real app, a
real worker and the Temporal dev server.

For every race the resume's answer, the job's events and its end tell one story:

- the resume answered 200: exactly one ``human_input_decision``; the run completed by it, or it
  was stopped after it (the decision before ``run_cancelled``, the stop saying so);
- the resume refused (409 ``NOT_RESUMABLE``): no ``human_input_decision`` at all, and the run
  ended ``cancelled`` by the stop or the supersede (the decision never took effect);
- nothing else (no 5xx, no other refusal); seqs gap-free, nothing after ``run_cancelled``.

Before the fix, a stop that ended the job while the decision's local activity was under way could
leave a recorded decision whose resume was answered 409 (a hostile probe: 1 race in 20; here, on
main, 2 runs in 3 of the SQLite stop races over HTTP, and 3 of 4 stop races through Temporal).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from datetime import timedelta
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from signoff.engine.models import Decision, JobStatus
from signoff.workflows.types import ResumeInput, ResumeResult
from tests.fixtures.langflow import chat_input, chat_output, human_input, lf_edge, lf_flow
from tests.integration.api.conftest import Harness, harness
from tests.helpers import rounds

pytestmark = [pytest.mark.temporal, pytest.mark.both_stores]  # claims raced through the whole stack

RACES = 30  # races per flow, per end (stop, supersede), on PostgreSQL (half on SQLite: tests/helpers.rounds)
BATCH = 10  # races run side by side


def langflow_gate() -> dict[str, Any]:
    """A Langflow export: Chat Input → Human Input (Approve / Reject) → a Chat Output per branch."""
    ci = chat_input("ChatInput-rc001")
    gate = human_input("HumanInput-rc002", "", ["Approve", "Reject"])
    ok, no = chat_output("ChatOutput-rc003"), chat_output("ChatOutput-rc004")
    return lf_flow(f"Race approval {uuid.uuid4().hex[:6]}", [ci, gate, ok, no], [
        lf_edge(ci, "message", gate, "prompt"), lf_edge(gate, "branch_approve", ok, "input_value"),
        lf_edge(gate, "branch_reject", no, "input_value")])


@pytest_asyncio.fixture(scope="module")
async def races(store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("races"), temporal_client) as h:
        async with h.client("alice") as c:
            r = await c.post("/api/v1/flows", json=langflow_gate())
            assert r.status_code == 201, r.text
            h.flows["langflow"] = r.json()["id"]
        yield h


async def _submit(h: Harness, flow: str, session: str) -> tuple[str, str]:
    """alice's run, suspended at its gate: (job id, request id)."""
    async with h.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": h.flows[flow], "input_value": "refund 42",
                                                    "mode": "sync", "session_id": session})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "suspended", body
    return body["job_id"], body["human_request"]["request_id"]


async def _resume(h: Harness, job_id: str, request_id: str) -> tuple[int, dict[str, Any]]:
    async with h.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": request_id, "decision": {"action_id": "approve"}})
    return r.status_code, r.json()


async def _update(h: Harness, job_id: str, request_id: str) -> tuple[int, dict[str, Any]]:
    """The same decision through Temporal (the ``resume`` Update, as the CLI or a Temporal client
    sends it, for alice), answered as HTTP would be: 200, or 409 with the refusal's code (the
    workflow closed before it took the Update: ``NOT_RESUMABLE`` too)."""
    handle = h.service.client.get_workflow_handle(job_id)
    try:
        res = await handle.execute_update(
            "resume", ResumeInput(request_id=request_id, decision=Decision(action_id="approve"),
                                  user=h.users["alice"][0]),
            id=f"test-{uuid.uuid4()}", result_type=ResumeResult, rpc_timeout=timedelta(seconds=30))
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        code = cause.type if isinstance(cause, ApplicationError) else repr(cause)
        return 409, {"detail": {"code": code, "message": str(cause)}}
    except RPCError as err:  # the workflow closed before the Update was admitted
        return 409, {"detail": {"code": "NOT_RESUMABLE", "message": f"workflow closed: {err}"}}
    return 200, res.model_dump()


async def _end(h: Harness, end: str, flow: str, job_id: str, session: str) -> dict[str, Any]:
    async with h.client("alice") as c:
        if end == "stop":
            r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        else:
            r = await c.post("/api/v2/workflows", json={"flow_id": h.flows[flow], "input_value": "again",
                                                        "session_id": session, "mode": "background"})
    assert r.status_code == 200, r.text
    return r.json()


async def _later(delay: float, call: Any) -> Any:
    await asyncio.sleep(delay)
    return await call


def _show(events: list[Any]) -> str:
    return repr([(e.seq, e.event, e.data) for e in events])


async def _check(h: Harness, job_id: str, answer: tuple[int, dict[str, Any]], ended: dict[str, Any],
                 end: str, where: str) -> str:
    job = await h.wait_status(job_id, JobStatus.completed, JobStatus.cancelled)
    events = await h.store.read_events(job_id)
    where = f"{where}: resume answered {answer}, {end} answered {ended}, job {job.status.value}\n{_show(events)}"
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), f"seq not gap-free: {where}"
    names = [e.event for e in events]
    decisions = [e for e in events if e.event == "human_input_decision"]
    code, body = answer
    if code == 200:
        assert len(decisions) == 1, f"answered as applied, yet not recorded once: {where}"
        assert decisions[0].data["action_id"] == "approve", where
    else:
        assert code == 409 and body["detail"]["code"] == "NOT_RESUMABLE", f"an answer of neither kind: {where}"
        assert decisions == [], f"the resume was refused, yet its decision was recorded: {where}"
        assert job.status == JobStatus.cancelled, f"refused, yet the run went on: {where}"
    if job.status == JobStatus.completed:
        assert decisions and names[-1] == "end" and "run_cancelled" not in names, where
        if end == "supersede":
            await h.wait_status(ended["job_id"], JobStatus.suspended)  # the new run, left alone
        return f"{end}: completed"
    assert names.count("run_cancelled") == 1 and names[-1] == "run_cancelled" and "end" not in names, where
    if end == "stop":
        assert ended["status"] == "cancelled", where  # the stop says what the run is
    else:
        assert not decisions, f"a supersede ends a waiting run only: {where}"
        assert events[-1].data == {"reason": "superseded", "superseded_by": ended["job_id"]}, where
    return f"{end}: cancelled after the decision" if decisions else f"{end}: cancelled, resume refused"


@pytest.mark.parametrize(("surface", "end"), [("http", "stop"), ("http", "supersede"), ("temporal", "stop")])
@pytest.mark.parametrize("flow", ["refund", "langflow"])
async def test_a_resume_racing_an_end_is_applied_or_leaves_no_decision(races: Harness, flow: str, end: str,
                                                                       surface: str, store_backend: str) -> None:
    """A resume (``POST /resume``, or the ``resume`` Update sent through Temporal) and a stop (or a
    supersede) of the same suspended run, sent together or a moment apart either way: the
    resume's answer, the decision events and the run's end agree."""
    send = _resume if surface == "http" else _update
    h = races
    sem = asyncio.Semaphore(BATCH)
    took: list[float] = [0.05]  # how long the last resumes took to answer: the end is timed by them

    async def timed(call: Any) -> Any:
        started = time.monotonic()
        try:
            return await call
        finally:
            took.append(time.monotonic() - started)

    async def one(i: int) -> str:
        async with sem:
            session = f"race-{end}-{i}-{uuid.uuid4().hex[:6]}"
            job_id, request_id = await _submit(h, flow, session)
            rnd = random.Random(i)
            # the end leaves at once, or later, up to about as long as a resume takes (its Update,
            # its claim, its record, the layers after it): every window of the decision is hit
            recent = sorted(took[-8:])[len(took[-8:]) // 2]
            lead = rnd.uniform(0, 1.2) * recent if i % 4 else rnd.uniform(0, 0.02)
            resume = _later(0 if i % 4 else lead, timed(send(h, job_id, request_id)))
            stop = _later(lead if i % 4 else 0, _end(h, end, flow, job_id, session))
            answer, ended = await asyncio.gather(resume, stop)
            return await _check(h, job_id, answer, ended, end, f"{end} race {i} on {flow} ({surface}), job {job_id}")

    outcomes = Counter(await asyncio.gather(*(one(i) for i in range(rounds(store_backend, RACES)))))
    print(f"\nresume ({surface}) racing a {end} on {flow}: {dict(outcomes)}")
