"""The decision attempt (engine/attempt.py) on every store, without Temporal: applied once and
recorded in one write; run again under its token (a retried activity, a lost task's twin running
beside it) it finds its own record instead of applying twice; a rival token gets nothing; a stop
that ends the job after the claim leaves the decision not applied and nothing recorded."""

from __future__ import annotations

import asyncio

from signoff.engine.attempt import Attempted, DecisionAttempt, attempt_decision
from signoff.engine.graph import Graph
from signoff.engine.lifecycle import RunEnd, end_run
from signoff.engine.models import Decision, JobStatus, utcnow
from signoff.engine.runner import InProcessRunner
from signoff.engine.store import Store
from tests.helpers import gate_flow
from tests.store_conformance import new_job


async def paused_run(store: Store) -> tuple[str, str, object]:
    """A job paused at its gate, as the worker leaves one: the checkpoint and the pending request."""
    job_id = await new_job(store)
    outcome = await InProcessRunner(store, store).start(gate_flow(), run_id=job_id, job_id=job_id)
    assert outcome.status == "paused" and outcome.pending is not None
    assert await store.set_status(job_id, JobStatus.in_progress)
    assert await store.mark_suspended(job_id, outcome.pending)
    return job_id, outcome.pending.request_id, outcome.state


async def attempt(store: Store, job_id: str, request_id: str, state, token: str, action: str = "approve") -> Attempted:
    async def paused_state(job):
        return state, Graph.from_spec(state.flow)

    return await attempt_decision(store, DecisionAttempt(job_id, request_id, token, Decision(action_id=action),
                                                         utcnow(), sent={"via": "test"}), paused_state)


async def decisions(store: Store, job_id: str) -> list:
    return await store.read_events_named(job_id, "human_input_decision")


async def test_an_attempt_applies_once_and_its_rerun_goes_on_from_its_record(any_store: Store) -> None:
    job_id, request_id, state = await paused_run(any_store)
    first = await attempt(any_store, job_id, request_id, state, "t1")
    assert first.outcome == "applied" and first.applied.action_id == "approve"
    assert [name for name, _ in first.written] == ["human_input_decision"]
    assert first.state.pending is None and first.job.status == JobStatus.in_progress
    again = await attempt(any_store, job_id, request_id, state, "t1", action="reject")  # the same token once more
    assert again.outcome == "recorded" and again.claim.recorded["decision"].data["action_id"] == "approve"
    rival = await attempt(any_store, job_id, request_id, state, "t2")
    assert rival.outcome == "not_claimed"
    (decided,) = await decisions(any_store, job_id)
    assert decided.data["action_id"] == "approve" and decided.data["via"] == "test"
    assert (await any_store.get_job(job_id)).pending is None


async def test_twin_attempts_under_one_token_apply_one_decision(any_store: Store) -> None:
    """A lost workflow task's local activity still running beside the one that runs it again:
    both win the token's claim, both apply; one record is written, the other finds it."""
    for _ in range(5):
        job_id, request_id, state = await paused_run(any_store)
        outcomes = await asyncio.gather(*(attempt(any_store, job_id, request_id, state, "t") for _ in range(2)))
        assert sorted(o.outcome for o in outcomes) == ["applied", "recorded"], outcomes
        assert len(await decisions(any_store, job_id)) == 1


async def test_tokens_racing_apply_one_decision(any_store: Store) -> None:
    job_id, request_id, state = await paused_run(any_store)
    outcomes = await asyncio.gather(*(attempt(any_store, job_id, request_id, state, f"t{i}") for i in range(6)))
    assert sorted(o.outcome for o in outcomes) == ["applied"] + ["not_claimed"] * 5
    assert len(await decisions(any_store, job_id)) == 1


async def test_a_stop_after_the_claim_leaves_the_decision_not_applied(any_store: Store) -> None:
    job_id, request_id, state = await paused_run(any_store)
    assert (await any_store.claim_decision(job_id, request_id, "t1")).won  # the attempt's claim ...
    assert (await end_run(any_store, job_id, RunEnd(JobStatus.cancelled))).won  # ... then a stop ends the job
    out = await attempt(any_store, job_id, request_id, state, "t1")  # the attempt goes on under its claim
    assert out.outcome == "not_applied" and out.job.status == JobStatus.cancelled
    assert await decisions(any_store, job_id) == []
