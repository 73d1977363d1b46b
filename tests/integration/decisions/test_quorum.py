"""Quorum decisions (DESIGN §9, ``required_approvals``) against the real parts: the app over
HTTP, the ``temporal`` CLI binary and the Temporal client sending the ``resume`` Update, a
worker (in this process, or a real separate process killed with SIGKILL), on SQLite and
PostgreSQL.

What a quorum must guarantee, whoever votes through whichever surface and however the votes
race each other, a stop or a supersede:

- each approver's vote counts once (``human_input_vote``, ``votes`` 1, 2, ...); a second vote of
  the same person is 409 ``ALREADY_VOTED`` and counts for nothing;
- the request resolves once (one ``human_input_decision`` carrying every vote); a vote that comes
  after it is 409 ``NOT_RESUMABLE`` and counts for nothing;
- any other decision (reject) by one approver resolves at once;
- an answer tells the truth: a vote answered 200 is recorded, a vote answered 409 is not; a run
  that ends ``cancelled`` has no resolution after its ``run_cancelled``; event seqs are gap-free;
- a worker killed between two votes loses neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from signoff.api.app import create_app
from signoff.devserver import temporal_binary
from signoff.engine.secrets import deployment_key
from signoff.engine.models import Decision, JobStatus
from signoff.service import RunService
from signoff.workflows.types import ResumeInput, ResumeResult
from tests.helpers import gate_flow, rounds, scaled
from tests.integration.api.conftest import Harness, harness

ROOT = Path(__file__).resolve().parents[3]
RACES = 100  # runs of the 2-of-3 race on PostgreSQL (half on SQLite: tests/helpers.rounds)
BATCH = 25  # runs raced side by side
STOP_RACES = 24  # runs of votes racing a stop, and as many racing a supersede, per backend (tests/helpers.scaled)


def quorum_flow(approvers: list[str], required: int = 2) -> dict[str, Any]:
    return gate_flow("Two of three", approvers=approvers, required_approvals=required)


@dataclass
class Quorum:
    """The harness (alice owns the flow; bob, carol and dave are its approvers) and the address of
    the session's Temporal dev server, for the ``temporal`` CLI."""

    h: Harness
    address: str
    names: dict[str, str] = field(default_factory=dict)  # bob -> "bob-1a2b3c" (the user's name)
    last_run: dict[str, Any] = field(default_factory=dict)  # the `run` of the last HTTP resume answered 200

    @property
    def flow(self) -> str:
        return self.h.flows["quorum"]

    def uid(self, who: str) -> str:
        return self.h.users[who][0]

    async def submit(self, session_id: str | None = None, flow: str | None = None) -> str:
        """alice's run of the quorum flow, suspended at the gate; its job id."""
        async with self.h.client("alice") as c:
            r = await c.post("/api/v2/workflows", json={"flow_id": flow or self.flow, "input_value": "refund 42",
                                                        "mode": "sync",
                                                        "session_id": session_id or f"s-{uuid.uuid4().hex[:8]}"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "suspended", body
        return body["job_id"]

    # ---- the three ways a vote is sent ------------------------------------------------------

    async def http(self, who: str, job_id: str, action: str = "approve") -> tuple[int, dict[str, Any]]:
        """``POST /resume`` as ``who``: (status code, body)."""
        async with self.h.client(who) as c:
            r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": f"gate:{job_id}", "decision": {"action_id": action}})
        body = r.json()
        if r.status_code == 200:  # where the run is now, beside what the CLI and the client answer
            self.last_run = body.pop("run")
        return r.status_code, body

    async def cli(self, who: str, job_id: str, action: str = "approve", *, by: str = "name"
                  ) -> tuple[int, dict[str, Any]]:
        """The Update ``resume`` through the real ``temporal`` CLI, for the person ``who`` (named by
        user name, or by id with ``by="id"``): (0, the ResumeResult) or (1, {"code", "message"})."""
        person = self.names[who] if by == "name" else self.uid(who)
        body = json.dumps({"request_id": f"gate:{job_id}", "decision": {"action_id": action}, "user": person})
        proc = await asyncio.create_subprocess_exec(
            temporal_binary(), "workflow", "update", "execute", "--workflow-id", job_id, "--name", "resume",
            "--input", body, "--address", self.address, "--namespace", "default", "-o", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        if proc.returncode == 0:
            return 0, json.loads(out)["result"]
        return 1, {"code": _cli_code(err.decode()), "message": err.decode()}

    async def client(self, who: str, job_id: str, action: str = "approve", *, by: str = "name"
                     ) -> tuple[int, dict[str, Any]]:
        """The Update ``resume`` through the Temporal client: (0, the ResumeResult) or (1, {"code"})."""
        person = self.names[who] if by == "name" else self.uid(who)
        handle = self.h.service.client.get_workflow_handle(job_id)
        try:
            res = await handle.execute_update(
                "resume", ResumeInput(request_id=f"gate:{job_id}", decision=Decision(action_id=action), user=person),
                id=f"test-{uuid.uuid4()}", result_type=ResumeResult, rpc_timeout=timedelta(seconds=30))
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            return 1, {"code": cause.type if isinstance(cause, ApplicationError) else repr(cause),
                       "message": str(cause)}
        except RPCError as err:  # the workflow closed before the Update was admitted
            return 1, {"code": "WORKFLOW_CLOSED", "message": str(err)}
        return 0, res.model_dump()

    async def events(self, job_id: str) -> list[Any]:
        events = await self.h.store.read_events(job_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), f"seq not gap-free: {_show(events)}"
        return events


def refused(answer: tuple[int, dict[str, Any]]) -> str:
    """The code of a refused vote (HTTP 4xx, or a failed Update), else what it was answered."""
    code, body = answer
    if code in (404, 409):
        return body["detail"]["code"]
    if code == 1:
        return body["code"]
    return f"answered {code}: {body}"


# What a vote that comes once the request is resolved (or the run ended) gets: 409 NOT_RESUMABLE,
# through Temporal the same refusal or, the workflow closed, no Update at all. Over HTTP an
# approver who is not the run's owner may get 404 JOB_NOT_FOUND instead: they see a run only while
# its waiting request names them (service/access.py visible_job; DESIGN §6: what a caller may not
# see is not found), so the answer depends on whether the resolution has cleared the request yet.
LATE = ("NOT_RESUMABLE", "WORKFLOW_CLOSED", "JOB_NOT_FOUND")


def _cli_code(stderr: str) -> str:
    """The refusal's code in the CLI's error (the ApplicationError's type), else the text."""
    for code in ("NOT_RESUMABLE", "ALREADY_VOTED", "NOT_AN_APPROVER", "INVALID_DECISION"):
        if code in stderr:
            return code
    text = stderr.lower()
    # closed, or closing as the Update came (Temporal aborts an Update the closing workflow did not take)
    if any(closed in text for closed in ("workflow execution already completed", "not found",
                                          "update was aborted by closing workflow")):
        return "WORKFLOW_CLOSED"
    return stderr.strip()[:300]


async def later(delay: float, call: Any) -> Any:
    await asyncio.sleep(delay)
    return await call


def _show(events: list[Any]) -> str:
    return repr([(e.seq, e.event, e.data) for e in events])


@contextlib.asynccontextmanager
async def quorum_world(backend: str, tmp: Path, temporal_client, address: str, **settings: Any
                       ) -> AsyncIterator[Quorum]:
    async with harness(backend, tmp, temporal_client, **settings) as h:
        q = Quorum(h, address)
        for name in ("carol", "dave"):
            user = await h.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            h.users[name] = (user.id, await h.store.create_api_key(user.id))
        for name in ("alice", "bob", "carol", "dave"):
            q.names[name] = (await h.store.get_user(h.users[name][0])).name
        async with h.client("alice") as c:
            r = await c.post("/api/v1/flows", json=quorum_flow([q.names[n] for n in ("bob", "carol", "dave")]))
            assert r.status_code == 201, r.text
            h.flows["quorum"] = r.json()["id"]
        yield q


@pytest_asyncio.fixture(scope="module")
async def quorum(store_backend, tmp_path_factory, temporal_client, temporal_server) -> AsyncIterator[Quorum]:
    async with quorum_world(store_backend, tmp_path_factory.mktemp("quorum"), temporal_client,
                            temporal_server.address) as q:
        yield q


def assert_resolved(q: Quorum, events: list[Any], voters: list[str], action: str = "approve") -> dict[str, Any]:
    """The events of a run resolved by ``voters`` (in the order they were counted): one
    ``human_input_vote`` each (``votes`` 1, 2, ...), then one ``human_input_decision`` carrying
    them all; returns the decision's data."""
    where = _show(events)
    votes = [e for e in events if e.event == "human_input_vote"]
    assert [v.data["user"] for v in votes] == [q.uid(w) for w in voters], where
    assert [v.data["votes"] for v in votes] == list(range(1, len(voters) + 1)), where
    assert all(v.data["required"] == 2 and v.data["action_id"] == "approve" for v in votes), where
    decisions = [e for e in events if e.event == "human_input_decision"]
    assert len(decisions) == 1, where
    decision = decisions[0].data
    assert decision["action_id"] == action, where
    assert [v["user"] for v in decision.get("votes", [])] == [q.uid(w) for w in voters], where
    assert max(v.seq for v in votes) < decisions[0].seq if votes else True, where
    return decision


# ---- 1. two of three, the votes racing ----------------------------------------------------------


@pytest.mark.both_stores  # raced (or killed) through the whole stack
async def test_two_of_three_votes_at_once_count_two_and_resolve_once(quorum: Quorum, store_backend: str) -> None:
    """100 runs (50 on SQLite): bob votes over HTTP, carol through the ``temporal`` CLI (naming herself with
    ``user``) and dave, racing them, over HTTP or through the Temporal client, all at once.
    Exactly two votes count (1, then 2), the request resolves once with both, the run completes on
    the approve branch; the first counted vote answered ``vote_recorded`` 1 of 2, the second
    ``resuming``, the third 409 ``NOT_RESUMABLE`` and it is nowhere.

    First each of the three is the late one once, in turn (the orders a race falls into, made
    certain: the CLI's vote late, and early). The races after them check the same story whatever
    the mix: which vote comes late depends on the box (the CLI's process start is ~10 ms on a quiet
    one and seconds under 25 at once on a loaded one, where the landing-check CI saw carol late in
    all 12), so the others leave within about as long as the recent CLI votes took."""
    q = quorum
    started = time.monotonic()
    sem = asyncio.Semaphore(BATCH)
    vote = {"bob": q.http, "carol": q.cli, "dave": q.client}
    cli_took: list[float] = []  # how long the CLI's votes took to answer: the others are timed by them

    async def timed_cli(job_id: str) -> Any:
        began = time.monotonic()
        try:
            return await q.cli("carol", job_id)
        finally:
            cli_took.append(time.monotonic() - began)

    for late in ("bob", "carol", "dave"):
        job_id = await q.submit()
        answers = {}
        for who in [w for w in vote if w != late] + [late]:
            answers[who] = await (timed_cli(job_id) if who == "carol" else vote[who](who, job_id))
        assert (await _check_race(q, job_id, answers, -1))[f"{late}:late"] == 1, answers

    async def one(i: int) -> Counter:
        async with sem:
            job_id = await q.submit()
            third = q.http if i % 2 == 0 else q.client
            rnd = random.Random(i)
            window = 1.2 * sorted(cli_took[-8:])[len(cli_took[-8:]) // 2]
            answers = await asyncio.gather(later(rnd.uniform(0, window), q.http("bob", job_id)), timed_cli(job_id),
                                           later(rnd.uniform(0, window), third("dave", job_id)))
            return await _check_race(q, job_id, dict(zip(("bob", "carol", "dave"), answers)), i)

    races = rounds(store_backend, RACES)
    tally = sum(await asyncio.gather(*(one(i) for i in range(races))), Counter())
    elapsed = time.monotonic() - started
    assert sum(tally[f"{who}:late"] for who in vote) == races, tally
    print(f"\n{races} races in {elapsed:.1f} s: {dict(tally)}")


async def _check_race(q: Quorum, job_id: str, answers: dict[str, tuple[int, dict[str, Any]]], i: int) -> Counter:
    job = await q.h.wait_status(job_id, JobStatus.completed)
    events = await q.events(job_id)
    where = f"race {i} job {job_id}: answers {answers}\nevents {_show(events)}"
    assert job.result["output"]["text"] == "Refund sent", where
    voters = [next(w for w in answers if q.uid(w) == e.data["user"]) for e in events if e.event == "human_input_vote"]
    assert len(voters) == 2 and len(set(voters)) == 2, where
    decision = assert_resolved(q, events, voters)
    assert decision["decided_by"] == q.uid(voters[1]), where
    assert [e.event for e in events] == ["human_input_required", "human_input_vote", "human_input_vote",
                                         "human_input_decision", "end"], where
    late = next(w for w in answers if w not in voters)
    first, second = answers[voters[0]], answers[voters[1]]
    if first[0] in (200, 0):
        assert first[1]["status"] == "vote_recorded" and first[1]["votes"] == 1 and first[1]["required"] == 2, where
    else:
        raise AssertionError(f"the first vote counted but was answered {first}: {where}")
    assert second[0] in (200, 0) and second[1]["status"] == "resuming", where
    assert refused(answers[late]) in LATE, where
    return Counter({f"{late}:late": 1, f"late:{refused(answers[late])}": 1})


# ---- 2. a second vote of the same person ----------------------------------------------------------


async def test_a_second_vote_of_the_same_person_is_already_voted_and_counts_once(quorum: Quorum) -> None:
    q = quorum
    job_id = await q.submit()
    first = await q.http("bob", job_id)
    assert first == (200, {"job_id": job_id, "status": "vote_recorded", "votes": 1, "required": 2}), first
    assert q.last_run["status"] == "suspended" and q.last_run["human_request"]["request_id"] == f"gate:{job_id}"
    # again, one at a time, through every surface and however bob is named
    assert refused(await q.http("bob", job_id)) == "ALREADY_VOTED"
    assert refused(await q.cli("bob", job_id)) == "ALREADY_VOTED"
    assert refused(await q.cli("bob", job_id, by="id")) == "ALREADY_VOTED"
    assert refused(await q.client("bob", job_id)) == "ALREADY_VOTED"
    assert refused(await q.client("bob", job_id, by="id")) == "ALREADY_VOTED"
    # a reject is a second vote too: bob may not change his mind into a resolution
    assert refused(await q.http("bob", job_id, "reject")) == "ALREADY_VOTED"
    # and all at once
    again = await asyncio.gather(*(q.http("bob", job_id) for _ in range(4)), q.cli("bob", job_id),
                                 q.client("bob", job_id), q.client("bob", job_id, by="id"))
    assert [refused(a) for a in again] == ["ALREADY_VOTED"] * len(again), again
    assert (await q.h.store.get_job(job_id)).status == JobStatus.suspended
    votes = [e for e in await q.events(job_id) if e.event == "human_input_vote"]
    assert [(v.data["user"], v.data["votes"]) for v in votes] == [(q.uid("bob"), 1)]

    second = await q.cli("carol", job_id)
    assert second[0] == 0 and second[1]["status"] == "resuming", second
    job = await q.h.wait_status(job_id, JobStatus.completed)
    assert job.result["output"]["text"] == "Refund sent"
    events = await q.events(job_id)
    assert_resolved(q, events, ["bob", "carol"])
    assert refused(await q.http("dave", job_id)) in LATE
    assert refused(await q.client("dave", job_id)) in LATE
    assert [e.event for e in await q.events(job_id)].count("human_input_vote") == 2


async def test_one_persons_votes_racing_count_once(quorum: Quorum) -> None:
    """bob's vote sent eight times at once (HTTP, the CLI by name, the client by name and by id),
    on 10 runs: exactly one counts; the others are ALREADY_VOTED (they came after it) and the run
    still waits for a second approver."""

    async def one() -> None:
        job_id = await q.submit()
        answers = await asyncio.gather(*(q.http("bob", job_id) for _ in range(3)), q.cli("bob", job_id),
                                       q.cli("bob", job_id, by="id"), q.client("bob", job_id),
                                       q.client("bob", job_id, by="id"), q.client("bob", job_id))
        counted = [a for a in answers if a[0] in (0, 200)]
        assert len(counted) == 1 and counted[0][1]["status"] == "vote_recorded" and counted[0][1]["votes"] == 1, answers
        assert sorted(refused(a) for a in answers if a not in counted) == ["ALREADY_VOTED"] * 7, answers
        assert (await q.h.store.get_job(job_id)).status == JobStatus.suspended
        votes = [e for e in await q.events(job_id) if e.event == "human_input_vote"]
        assert [(v.data["user"], v.data["votes"]) for v in votes] == [(q.uid("bob"), 1)], answers
        status, body = await q.http("dave", job_id)
        assert status == 200 and body["status"] == "resuming", body
        await q.h.wait_status(job_id, JobStatus.completed)
        assert_resolved(q, await q.events(job_id), ["bob", "dave"])

    q = quorum
    await asyncio.gather(*(one() for _ in range(10)))


# ---- 3. any other decision by one approver resolves at once ------------------------------------------


@pytest.mark.parametrize("surface", ["http", "cli"])
async def test_a_reject_by_one_approver_resolves_at_once(quorum: Quorum, surface: str) -> None:
    q = quorum
    send = q.http if surface == "http" else q.cli
    job_id = await q.submit()
    code, body = await send("carol", job_id, "reject")
    assert code in (0, 200) and body["status"] == "resuming", body
    job = await q.h.wait_status(job_id, JobStatus.completed)
    assert job.result["output"]["text"] == "Refund refused"
    events = await q.events(job_id)
    assert [e.event for e in events] == ["human_input_required", "human_input_decision", "end"], _show(events)
    decision = events[1].data
    assert decision["action_id"] == "reject" and decision["decided_by"] == q.uid("carol"), decision
    assert not decision.get("votes"), decision
    assert refused(await q.http("bob", job_id)) in LATE
    assert refused(await q.cli("bob", job_id)) in LATE
    assert "human_input_vote" not in [e.event for e in await q.events(job_id)]


async def test_a_reject_after_one_approval_resolves_at_once_with_the_vote(quorum: Quorum) -> None:
    q = quorum
    job_id = await q.submit()
    assert (await q.http("dave", job_id))[1]["status"] == "vote_recorded"
    code, body = await q.cli("bob", job_id, "reject")
    assert code == 0 and body["status"] == "resuming", body
    job = await q.h.wait_status(job_id, JobStatus.completed)
    assert job.result["output"]["text"] == "Refund refused"
    events = await q.events(job_id)
    assert [e.event for e in events] == ["human_input_required", "human_input_vote", "human_input_decision", "end"]
    decision = events[2].data
    assert decision["action_id"] == "reject" and decision["decided_by"] == q.uid("bob"), decision
    assert [(v["user"], v["action_id"]) for v in decision["votes"]] == [(q.uid("dave"), "approve")], decision
    assert refused(await q.http("carol", job_id)) in LATE
    assert refused(await q.cli("carol", job_id)) in LATE
    assert [e.event for e in await q.events(job_id)].count("human_input_vote") == 1


# ---- 4. votes racing a stop and a supersede ------------------------------------------------------------


@pytest.mark.both_stores  # raced (or killed) through the whole stack
async def test_votes_racing_a_stop_or_a_supersede_stay_consistent(quorum: Quorum) -> None:
    """Runs where two approvers' votes race alice's stop (``POST /stop``) or her new run in the
    same session (a supersede): both votes and the end at once, or the completing vote alone
    against it. Whatever wins, the run tells one story: a vote answered 200 is recorded once, a
    vote answered 409 is nowhere; a resolution means the run completed (or was stopped after it,
    a stop that says so); a cancelled run has no vote, decision nor end after its
    ``run_cancelled``; seqs are gap-free.

    Each end also meets the two orders a race falls between, each once and in turn: the end
    answered before the votes leave (the run cancelled, both votes refused), and the run
    completed by the votes before the end leaves (the end changes nothing). The races in between
    run at the suite's scale (tests/helpers.scaled; all of them in `make test-deep`): which
    outcome each meets depends on the box's speed (a loaded CI saw every race of a quarter's
    count complete, a quiet one every race cancel), so they check the story, not the mix."""
    q = quorum
    sem = asyncio.Semaphore(BATCH)

    took: list[float] = [0.1]  # how long the last votes took to answer: the end is timed by them

    async def timed(call: Any) -> Any:
        started = time.monotonic()
        try:
            return await call
        finally:
            took.append(time.monotonic() - started)

    async def in_order(end: str, end_first: bool) -> str:
        session = f"order-{end}-{uuid.uuid4().hex[:6]}"
        job_id = await q.submit(session)
        answers: dict[str, tuple[int, dict[str, Any]]] = {}
        ended = await _end(q, end, job_id, session) if end_first else None
        answers["bob"] = await q.http("bob", job_id)
        answers["carol"] = await q.cli("carol", job_id)
        if not end_first:
            assert [a[0] for a in answers.values()] == [200, 0], answers
            await q.h.wait_status(job_id, JobStatus.completed)
            ended = await _end(q, end, job_id, session)
        outcome = await _check_end_race(q, job_id, answers, ended or {}, end, -1)
        assert outcome == (f"{end}:cancelled" if end_first else f"{end}:completed"), (outcome, answers)
        return outcome

    async def one(i: int, end: str) -> str:
        async with sem:
            session = f"race-{end}-{i}-{uuid.uuid4().hex[:6]}"
            job_id = await q.submit(session)
            answers: dict[str, tuple[int, dict[str, Any]]] = {}
            if i % 2:  # bob first; then carol's vote, which completes the quorum, races the end
                answers["bob"] = await timed(q.http("bob", job_id))
                assert answers["bob"][0] == 200, answers
            rnd = random.Random(i)
            carol = q.cli if i % 4 < 2 else q.client
            calls = [timed(carol("carol", job_id))]
            if "bob" not in answers:
                calls.append(later(rnd.uniform(0, 0.02), timed(q.http("bob", job_id))))
            # the end leaves at once, or later, up to about as long as a vote takes (the votes went
            # through an Update and an activity each before the stop can lose to them)
            recent = sorted(took[-8:])[len(took[-8:]) // 2]
            calls.append(later(rnd.uniform(0, 1.2) * recent, _end(q, end, job_id, session)))
            got = await asyncio.gather(*calls)
            answers["carol"] = got[0]
            if len(got) == 3:
                answers["bob"] = got[1]
            return await _check_end_race(q, job_id, answers, got[-1], end, i)

    ordered = await asyncio.gather(*(in_order(end, end_first) for end in ("stop", "supersede")
                                     for end_first in (True, False)))
    outcomes = Counter(await asyncio.gather(*(one(i, end) for i in range(scaled(STOP_RACES))
                                              for end in ("stop", "supersede"))))
    print(f"\nvotes racing an end: {dict(outcomes)} (and in order: {ordered})")


async def _end(q: Quorum, end: str, job_id: str, session: str) -> dict[str, Any]:
    async with q.h.client("alice") as c:
        if end == "stop":
            r = await c.post("/api/v2/workflows/stop", json={"job_id": job_id})
        else:
            r = await c.post("/api/v2/workflows", json={"flow_id": q.flow, "input_value": "again",
                                                        "session_id": session, "mode": "background"})
    assert r.status_code == 200, r.text
    return r.json()


async def _check_end_race(q: Quorum, job_id: str, answers: dict[str, tuple[int, dict[str, Any]]],
                          ended: dict[str, Any], end: str, i: int) -> str:
    job = await q.h.wait_status(job_id, JobStatus.completed, JobStatus.cancelled)
    events = await q.events(job_id)
    where = f"{end} race {i} job {job_id}: answers {answers}, {end} answered {ended}\nevents {_show(events)}"
    names = [e.event for e in events]
    votes = [e for e in events if e.event == "human_input_vote"]
    decisions = [e for e in events if e.event == "human_input_decision"]
    # each vote answered 200 is recorded once, a vote refused is nowhere
    for who, (code, body) in answers.items():
        mine = [v for v in votes if v.data["user"] == q.uid(who)]
        if code in (0, 200):
            assert len(mine) == 1, (who, where)
        else:
            assert refused((code, body)) in LATE, (who, where)
            assert mine == [], f"{who}'s vote was refused ({refused((code, body))}) yet recorded: {where}"
    assert [v.data["votes"] for v in votes] == list(range(1, len(votes) + 1)), where
    assert len({v.data["user"] for v in votes}) == len(votes), where
    assert len(decisions) <= 1, where
    if decisions:
        assert len(votes) == 2, where
        assert [v["user"] for v in decisions[0].data["votes"]] == [v.data["user"] for v in votes], where
        assert decisions[0].seq > votes[-1].seq, where
    else:
        assert len(votes) < 2, f"the quorum was reached yet nothing resolved: {where}"
    if end == "stop":
        assert ended["status"] == job.status.value, where  # the stop says what the run is
    if job.status == JobStatus.completed:
        assert decisions and "run_cancelled" not in names and names[-1] == "end", where
        assert job.result["output"]["text"] == "Refund sent", where
        if end == "supersede":
            await q.h.wait_status(ended["job_id"], JobStatus.suspended)  # the new run, left alone
        return f"{end}:completed"
    assert names.count("run_cancelled") == 1 and names[-1] == "run_cancelled" and "end" not in names, where
    if end == "supersede":
        assert not decisions, where  # a supersede ends a waiting run only
        assert events[-1].data == {"reason": "superseded", "superseded_by": ended["job_id"]}, where
        return "supersede:cancelled"
    assert events[-1].data == {"reason": "stopped"}, where
    return f"stop:{'cancelled after the decision' if decisions else 'cancelled'}"


# ---- 5. a worker killed between two votes ------------------------------------------------------------


class WorkerProcess:
    """``signoff worker`` as a real process (its own process group, killed with SIGKILL)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", "worker"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.log.close()


@pytest.mark.both_stores  # raced (or killed) through the whole stack
async def test_a_worker_killed_between_two_votes_loses_neither(quorum: Quorum, tmp_path: Path) -> None:
    """The runs' worker is a real process: vote 1 (bob, HTTP) is recorded, the worker is killed
    with SIGKILL, a new worker process starts, vote 2 (carol, the CLI) resolves the request with
    both votes, each recorded once. Three runs, so the new worker also replays runs it never saw."""
    q = quorum
    h = q.h
    settings = h.settings.model_copy(update={"task_queue": f"proc-{uuid.uuid4()}", "temporal_address": q.address})
    service = RunService(settings, h.store, h.service.client)
    app = create_app(settings, store=h.store, service=service)
    procs = Harness(settings, h.store, service, app, users=h.users, flows=h.flows, egress=h.egress)
    env = {**os.environ, "SIGNOFF_TEMPORAL_ADDRESS": q.address, "SIGNOFF_DATABASE_URL": settings.resolved_database_url,
           "SIGNOFF_EGRESS_ALLOW": settings.egress_allow or "", "SIGNOFF_TASK_QUEUE": settings.task_queue,
           "SIGNOFF_HOME": str(tmp_path / "home"),
           # the deployment's key, as every replica shares it: the worker signs receipts with a key
           # sealed by it (docs/audit.md), which the in-process worker may have made first
           "SIGNOFF_SECRET_KEY": deployment_key(h.settings).decode()}
    workers: list[WorkerProcess] = []
    try:
        workers.append(WorkerProcess(env, tmp_path / "worker0.log"))
        async with app.router.lifespan_context(app):
            pq = Quorum(procs, q.address, q.names)
            jobs = [await pq.submit() for _ in range(3)]
            for job_id in jobs:
                assert await pq.http("bob", job_id) == (200, {"job_id": job_id, "status": "vote_recorded", "votes": 1,
                                                              "required": 2})
            workers[0].kill()
            workers.append(WorkerProcess(env, tmp_path / "worker1.log"))
            answers = await asyncio.gather(*(pq.cli("carol", job_id) for job_id in jobs))
            for job_id, (code, body) in zip(jobs, answers):
                assert code == 0 and body["status"] == "resuming" and body["votes"] == 2, (body, await h.diagnose(job_id))
                job = await procs.wait_status(job_id, JobStatus.completed, timeout=60)
                assert job.result["output"]["text"] == "Refund sent"
                events = await pq.events(job_id)
                assert [e.event for e in events] == ["human_input_required", "human_input_vote", "human_input_vote",
                                                     "human_input_decision", "end"], _show(events)
                assert_resolved(pq, events, ["bob", "carol"])
    finally:
        for w in workers:
            w.close()
