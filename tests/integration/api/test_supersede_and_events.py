"""Supersede-by-session, resume racing supersede, and SSE replay/reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid

import httpx
import pytest

from signoff.engine.models import JobStatus, NewJob

from tests.helpers import eventually, rounds
from tests.integration.api.conftest import BlockingHTTP, Harness, read_frame, sse_frames, submit_suspended

# the events tail is LISTEN/NOTIFY on PostgreSQL and polling on SQLite; supersede races a resume
pytestmark = pytest.mark.both_stores


async def test_new_run_supersedes_the_same_session_only(api: Harness) -> None:
    old = (await submit_suspended(api, session_id="sup-a"))["job_id"]
    other_session = (await submit_suspended(api, session_id="sup-b"))["job_id"]
    bobs = None
    async with api.client("alice") as c:
        r = await c.post(f"/api/v1/flows/{api.flows['refund']}/shares", json={"user": api.users["bob"][0]})
        assert r.status_code == 201
    bobs = (await submit_suspended(api, "bob", session_id="sup-a"))["job_id"]

    new = (await submit_suspended(api, session_id="sup-a"))["job_id"]

    assert (await api.store.get_job(old)).status == JobStatus.cancelled
    assert (await api.store.get_job(other_session)).status == JobStatus.suspended
    assert (await api.store.get_job(bobs)).status == JobStatus.suspended
    assert (await api.store.get_job(new)).status == JobStatus.suspended
    async with api.client("alice") as c:
        frames = sse_frames((await c.get(f"/api/v2/workflows/{old}/events")).text)
        cancelled = [f for f in frames if f["event"] == "run_cancelled"]
        assert cancelled and cancelled[0]["data"] == {"reason": "superseded", "superseded_by": new}
        r = await c.get(f"/api/v2/workflows/{old}/pending")
        assert r.status_code == 404
        history = (await c.get("/api/v1/monitor/messages", params={"session_id": "sup-a"})).json()
        old_cards = [m for m in history if m["kind"] == "card" and m["job_id"] == old]
        assert old_cards and all(m["card"].get("superseded") for m in old_cards)
        assert all(m["job_id"] != bobs for m in history)  # bob's messages stay bob's
        r = await c.post(f"/api/v2/workflows/{old}/resume",
                         json={"request_id": f"gate:{old}", "decision": {"action_id": "approve"}})
        assert r.status_code == 409


RACE_CHAINS, RACE_ROUNDS = 4, 50  # 200 races; independent sessions race side by side


async def test_resume_racing_supersede_exactly_one_wins(api: Harness, store_backend: str) -> None:
    """200 times (100 on SQLite, tests/helpers.rounds): a resume and a new run of the same session (which supersedes) race on one
    suspended job; exactly one wins and the loser leaves no trace. The 200 races run as four
    chains in four sessions at once (supersede never crosses sessions), so the wall time is not
    four times the orchestration latency of one chain."""
    n = rounds(store_backend, RACE_ROUNDS)
    outcomes = await asyncio.gather(*(_race_chain(api, f"race-{k}", n) for k in range(RACE_CHAINS)))
    assert sum(len(o) for o in outcomes) == RACE_CHAINS * n


async def _race_chain(api: Harness, session: str, rounds: int) -> list[str]:
    flow = api.flows["refund"]
    winners = []
    async with api.client("alice") as c:
        job_id = (await submit_suspended(api, session_id=session))["job_id"]
        for i in range(rounds):
            resume = c.post(f"/api/v2/workflows/{job_id}/resume",
                            json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
            supersede = c.post("/api/v2/workflows", json={"flow_id": flow, "input_value": "again",
                                                          "session_id": session, "mode": "background"})
            r_resume, r_new = await asyncio.gather(resume, supersede)
            assert r_new.status_code == 200, r_new.text
            new_id = r_new.json()["job_id"]
            if r_resume.status_code == 200:
                # resume won: the run goes on to its end, supersede left it completely alone
                job = await api.wait_status(job_id, JobStatus.completed)
                expected, stamp = ["human_input_required", "human_input_decision", "end"], ("submitted_action", "approve")
            else:
                assert r_resume.status_code == 409 and r_resume.json()["detail"]["code"] == "NOT_RESUMABLE", r_resume.text
                job = await api.store.get_job(job_id)
                assert job.status == JobStatus.cancelled and job.pending is None, (session, i, job)
                expected, stamp = ["human_input_required", "run_cancelled"], ("superseded", True)
            events = await api.store.read_events(job_id)
            where = f"{session} round {i} job {job_id}: {[(e.seq, e.event, e.data) for e in events]}"
            assert [e.event for e in events] == expected, where
            if expected[-1] == "run_cancelled":
                assert events[-1].data == {"reason": "superseded", "superseded_by": new_id}, where
            cards = [m.card for m in await api.store.list_messages(session) if m.job_id == job_id and m.kind == "card"]
            assert len(cards) == 1 and cards[0].get(stamp[0]) == stamp[1], (where, cards)
            assert ({"submitted_action", "superseded"} - {stamp[0]}).isdisjoint(k for k, v in cards[0].items() if v), (where, cards)
            winners.append("resume" if r_resume.status_code == 200 else "supersede")
            job_id = new_id
            await api.wait_status(job_id, JobStatus.suspended)
    return winners


async def test_sse_replay_and_reconnect_with_last_event_id(api: Harness) -> None:
    job_id = (await submit_suspended(api, session_id="sse"))["job_id"]
    async with api.client("alice") as c:
        first = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events")).text)
        assert first[-1]["event"] == "human_input_required"  # closes at the pause
        last = first[-1]["seq"]
        tail = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events", headers={"Last-Event-ID": str(last)})).text)
        assert tail == []
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
        await api.wait_status(job_id, JobStatus.completed)  # the ASGI test client reads whole streams
        after = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events", headers={"Last-Event-ID": str(last)})).text)
        assert after[0]["seq"] == last + 1 and after[-1]["event"] == "end"
        assert "human_input_decision" in [f["event"] for f in after]
        assert all(f["seq"] > last for f in after)
        same = sse_frames((await c.get(f"/api/v2/workflows/{job_id}/events", params={"after": last})).text)
        assert same == after


async def test_stream_mode_ends_at_the_pause(api: Harness) -> None:
    async with api.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "s",
                                                    "session_id": "stream", "mode": "stream"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = sse_frames(r.text)
        assert frames[-1]["event"] == "human_input_required"


def _slow_flow(server_url: str) -> dict:
    """ask → fetch (HTTP, blocks on /block/first) → gate → ship (HTTP, blocks on /block/second) → ok."""
    http = {"method": "POST", "timeout": 120}
    return {
        "name": "Slow refund",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "fetch", "type": "HTTPRequest", "params": {**http, "url": f"{server_url}/block/first"}},
            {"id": "gate", "type": "HumanInput", "params": {"decisions": ["Approve", "Reject"]}},
            {"id": "ship", "type": "HTTPRequest", "params": {**http, "url": f"{server_url}/block/second"}},
            {"id": "ok", "type": "ChatOutput"},
            {"id": "no", "type": "ChatOutput", "params": {"text": "refused"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "fetch.body"},
            {"from": "fetch.response", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "ship.body"},
            {"from": "ship.response", "to": "ok.input_value"},
            {"from": "gate.branch_reject", "to": "no.input_value"},
        ],
    }


async def test_sse_tails_a_running_job_over_real_http(api: Harness, live: str) -> None:
    """Against a real uvicorn server: a stream opened while the job is in progress receives the
    pause as it happens and closes there; a client reconnecting after the resume (Last-Event-ID)
    gets only the new frames, live, while the run is still going, then `end`."""
    blocking = BlockingHTTP()
    api.egress.add(blocking)
    headers = {"x-api-key": api.users["alice"][1]}
    try:
        async with httpx.AsyncClient(base_url=live, headers=headers, timeout=httpx.Timeout(120)) as c:
            r = await c.post("/api/v1/flows", json=_slow_flow(blocking.url))
            assert r.status_code == 201, r.text
            r = await c.post("/api/v2/workflows", json={"flow_id": r.json()["id"], "input_value": "refund 7",
                                                        "session_id": "live", "mode": "background"})
            job_id = r.json()["job_id"]
            await eventually(lambda: "first" in blocking.seen, what="the run to call /block/first")
            assert (await api.store.get_job(job_id)).status == JobStatus.in_progress
            assert await api.store.read_events(job_id) == []  # nothing to replay: what comes is tailed

            async with c.stream("GET", f"/api/v2/workflows/{job_id}/events") as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.aiter_lines()
                blocking.release("first")  # only now can the run reach its pause
                paused = await read_frame(lines)
                assert paused["event"] == "human_input_required"
                assert paused["data"]["prompt"] == "answer from first"
                assert await read_frame(lines) is None  # the stream closes at the pause
            last = paused["seq"]

            r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                             json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
            assert r.status_code == 200, r.text
            await eventually(lambda: "second" in blocking.seen, what="the run to call /block/second")

            async with c.stream("GET", f"/api/v2/workflows/{job_id}/events",
                                headers={"Last-Event-ID": str(last)}) as stream:
                lines = stream.aiter_lines()
                decision = await read_frame(lines)
                assert decision["seq"] == last + 1 and decision["event"] == "human_input_decision"
                # that frame came while the run is still held by /block/second: the stream is tailing
                assert (await api.store.get_job(job_id)).status == JobStatus.in_progress
                blocking.release("second")
                end = await read_frame(lines)
                assert end["seq"] == last + 2 and end["event"] == "end"
                assert await read_frame(lines) is None
        job = await api.store.get_job(job_id)
        assert job.status == JobStatus.completed
    finally:
        blocking.close()


async def queued_job(api: Harness, user_id: str):
    """A job row with no workflow: it stays ``queued``, and its stream tails it."""
    job, _ = await api.store.create_job(NewJob(job_id=str(uuid.uuid4()), flow_id=api.flows["refund"], flow_version=1,
                                               user_id=user_id, request={"input_value": "q"}))
    return job


async def test_sse_tails_a_queued_job_over_real_http(api: Harness, live: str) -> None:
    """A job still `queued` (no worker has taken it: here a job row with no workflow) is tailed
    too: frames appended by another writer arrive as they are written, and the stream ends with
    the terminal event."""
    user_id, key = api.users["alice"]
    job = await queued_job(api, user_id)
    async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60)) as c:
        async with c.stream("GET", f"/api/v2/workflows/{job.job_id}/events") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            await api.store.append_event(job.job_id, "progress", {"n": 1})
            assert (await read_frame(lines)) == {"event": "progress", "data": {"n": 1}, "seq": 1}
            assert (await api.store.get_job(job.job_id)).status == JobStatus.queued  # still tailing
            await api.store.append_event(job.job_id, "progress", {"n": 2})
            assert (await read_frame(lines))["seq"] == 2
            assert await api.store.set_status(job.job_id, JobStatus.cancelled,
                                              event=("run_cancelled", {"reason": "stopped"}))
            assert (await read_frame(lines))["event"] == "run_cancelled"
            assert await read_frame(lines) is None


async def test_idle_streams_do_not_poll_the_store_and_an_event_wakes_only_its_own(api: Harness, live: str,
                                                                                  monkeypatch) -> None:
    """Thirty idle `/events` streams (queued jobs nobody runs) over real HTTP: while nothing
    happens the store is not read for them (each used to read its job ten times a second); an
    event on one job reaches its stream at once and reads only that job; one tail of the store
    serves them all (service/feed.py). (Each stream's access re-check reads the store every
    SIGNOFF_STREAM_RECHECK_SECONDS on its own, and before each frame: set out of the way here.)"""
    monkeypatch.setattr(api.settings, "stream_recheck_seconds", 3600.0)
    user_id, key = api.users["alice"]
    jobs = []
    for _ in range(30):
        jobs.append((await queued_job(api, user_id)).job_id)
    reads: dict[str, int] = {}
    real_read, real_get = api.store.read_events, api.store.get_job

    async def read_events(job_id, **kw):
        reads[job_id] = reads.get(job_id, 0) + 1
        return await real_read(job_id, **kw)

    async def get_job(job_id):
        reads[job_id] = reads.get(job_id, 0) + 1
        return await real_get(job_id)

    api.store.read_events, api.store.get_job = read_events, get_job  # type: ignore[method-assign]
    tails = api.service.feed.tails
    try:
        async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60),
                                     limits=httpx.Limits(max_connections=40)) as c:
            async with contextlib.AsyncExitStack() as stack:
                streams = [await stack.enter_async_context(c.stream("GET", f"/api/v2/workflows/{j}/events"))
                           for j in jobs]
                assert all(s.status_code == 200 for s in streams)
                await eventually(lambda: all(reads.get(j, 0) >= 2 for j in jobs), what="each stream's first read")
                assert api.service.feed.streams_of(user_id) == 30
                reads.clear()
                await asyncio.sleep(1.0)
                assert sum(reads.values()) < len(jobs), reads  # polling would be ~600 reads
                reads.clear()
                await api.store.append_event(jobs[7], "progress", {"n": 1})
                frame = await asyncio.wait_for(read_frame(streams[7].aiter_lines()), 10)
                assert frame == {"event": "progress", "data": {"n": 1}, "seq": 1}
                assert set(reads) <= {jobs[7]}, reads  # the others slept on
                assert api.service.feed.tails - tails <= 1  # one tail for all of them (a first one started)
        await eventually(lambda: api.service.feed.streams_of(user_id) == 0, what="the streams to give their places back")
    finally:
        api.store.read_events, api.store.get_job = real_read, real_get  # type: ignore[method-assign]


async def test_a_stream_whose_key_is_revoked_closes_before_its_next_event(api: Harness, live: str,
                                                                        monkeypatch) -> None:
    """An open /events stream asks before every frame with data whether its reader may still see
    it: once the key that opened it is revoked (in another process: the store only), the next
    event is not delivered and the stream ends, however long its periodic check is."""
    monkeypatch.setattr(api.settings, "stream_recheck_seconds", 3600.0)
    user_id, _ = api.users["alice"]
    key = await api.store.create_api_key(user_id)
    job = await queued_job(api, user_id)
    async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60)) as c:
        async with c.stream("GET", f"/api/v2/workflows/{job.job_id}/events") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            await api.store.append_event(job.job_id, "progress", {"n": 1})
            assert (await read_frame(lines))["seq"] == 1  # allowed: delivered
            assert await api.store.revoke_api_key(key)
            await api.store.append_event(job.job_id, "progress", {"n": 2, "secret": "after revocation"})
            assert await asyncio.wait_for(read_frame(lines), 10) is None  # closed, the event not sent
    await eventually(lambda: api.service.feed.streams_of(user_id) == 0, what="the stream to give its place back")


@pytest.mark.parametrize("revoke", ["key", "keys", "user"])
async def test_a_stream_whose_key_is_revoked_in_another_process_ends_at_once(api: Harness, live: str,
                                                                             monkeypatch, revoke: str) -> None:
    """A revoke in another process (the CLI: a store of its own on the same database) ends an idle
    stream at once, not at its next keep-alive, event or periodic check (issue 28: ~40 s, then
    SIGNOFF_STREAM_RECHECK_SECONDS): the revoke's access note reaches this process's feed through
    the store's tail (PostgreSQL's NOTIFY, SQLite's table), which tells the user's streams to
    ask again now. The periodic check is an hour here, so only the note can end it."""
    from signoff.engine.store import open_store

    monkeypatch.setattr(api.settings, "stream_recheck_seconds", 3600.0)
    user = await api.store.create_user(f"frank-{uuid.uuid4().hex[:6]}")
    key = await api.store.create_api_key(user.id)
    job = await queued_job(api, user.id)
    elsewhere = open_store(api.settings.resolved_database_url)
    await elsewhere.setup()
    try:
        async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60)) as c:
            async with c.stream("GET", f"/api/v2/workflows/{job.job_id}/events") as stream:
                lines = stream.aiter_lines()
                await api.store.append_event(job.job_id, "progress", {"n": 1})
                assert (await read_frame(lines))["seq"] == 1
                if revoke == "key":
                    assert await elsewhere.revoke_api_key(key)
                elif revoke == "keys":
                    assert await elsewhere.revoke_api_keys(user.id) == 1
                else:
                    assert await elsewhere.delete_user(user.id)
                assert await asyncio.wait_for(read_frame(lines), 30) is None  # ended with no event to send
    finally:
        await elsewhere.close()
    user_id = user.id
    await eventually(lambda: api.service.feed.streams_of(user_id) == 0, what="the stream to give its place back")


@pytest.mark.parametrize("how", ["sign-out", "revoke"])
async def test_a_signed_out_inbox_stream_ends_at_once_and_a_revoked_one_gets_no_new_request(
        api: Harness, live: str, monkeypatch, how: str) -> None:
    """The pages' inbox stream (issue 28: a revoked person's open inbox received a new request 0.1 s
    after the revoke and stayed open ~40 s). A sign-out in this process tells the feed, which ends
    that person's streams at once; a revoke in another process (`signoff users revoke-key`:
    the store only) lets no new request through: the stream ends before the frame."""
    from signoff.commands.users import _revoke
    from tests.integration.api.test_trust import signed_in

    monkeypatch.setattr(api.settings, "stream_recheck_seconds", 3600.0)  # neither waits for the timer
    monkeypatch.setenv("SIGNOFF_HOME", str(api.settings.home))
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", api.settings.resolved_database_url)
    name = f"erin-{uuid.uuid4().hex[:6]}"
    erin = await api.store.create_user(name)
    key = await api.store.create_api_key(erin.id)
    async with httpx.AsyncClient(base_url=live, timeout=httpx.Timeout(60)) as page:
        await signed_in(page, key)
        async with page.stream("GET", "/inbox/live") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert (await read_event(lines))[0] == "snapshot"
            if how == "sign-out":
                csrf = re.search(r'name="csrf" value="([^"]+)"', (await page.get("/flows")).text).group(1)
                assert (await page.post("/sign-out", data={"csrf": csrf})).status_code == 303
            else:
                assert await _revoke(name, None) == 1
                flow = await api.store.get_flow(api.flows["refund"])
                await api.store.grant_share(flow.id, erin.id, ["execute"])
                job, _ = await api.service.submit(erin, flow, input_value="after the revoke", session_id=None,
                                                  tweaks=None, idempotency_key=None, mode="background")
                await api.wait_status(job.job_id, JobStatus.suspended)
            assert await asyncio.wait_for(read_event(lines), 30) is None, how  # ended, nothing more sent
    await eventually(lambda: api.service.feed.streams_of(erin.id) == 0, what="the stream to give its place back")


async def read_event(lines) -> tuple[str, str] | None:
    """The next named SSE event of a page stream (``event:``, ``data:``), None when it ended."""
    name = None
    async for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name is not None:
            return name, line[6:]
    return None


async def test_every_event_stream_keeps_alive_the_same_way(api: Harness, live: str, monkeypatch) -> None:
    """A run's events (API), a run page's and the inbox's live streams (pages) all answer
    through api/sse.sse_response: a quiet stream gets a keep-alive comment every
    KEEPALIVE_SECONDS, from that one place (the pages' streams and the API's each counted idle
    time themselves, every 15 s)."""
    from signoff.api import sse
    from tests.integration.api.test_trust import signed_in

    monkeypatch.setattr(sse, "KEEPALIVE_SECONDS", 0.05)
    user_id, key = api.users["alice"]
    job = await queued_job(api, user_id)  # nothing happens to it: its streams stay quiet

    async def keeps_alive(c: httpx.AsyncClient, path: str) -> httpx.Headers:
        async with c.stream("GET", path) as stream:
            assert stream.status_code == 200, path
            async def comment() -> None:
                async for line in stream.aiter_lines():
                    if line == ": keep-alive":
                        return
                raise AssertionError(f"{path} ended without a keep-alive")
            await asyncio.wait_for(comment(), 30)
            return stream.headers

    async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60)) as c:
        headers = await keeps_alive(c, f"/api/v2/workflows/{job.job_id}/events")
        assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    async with httpx.AsyncClient(base_url=live, timeout=httpx.Timeout(60)) as page:
        await signed_in(page, key)
        for path in (f"/runs/{job.job_id}/live", "/inbox/live"):
            headers = await keeps_alive(page, path)
            assert headers["cache-control"] == "no-store" and headers["x-accel-buffering"] == "no"
    await eventually(lambda: api.service.feed.streams_of(user_id) == 0, what="the streams to give their places back")


async def test_a_revoked_key_ends_a_stream_mode_submit_within_the_recheck(api: Harness, live: str,
                                                                         monkeypatch) -> None:
    """A stream-mode submit goes through the same re-check as /events (api/sse.py: while_allowed):
    its key revoked in another process (the store only) while the run is still working, the
    stream ends within SIGNOFF_STREAM_RECHECK_SECONDS and shows nothing of the run after it."""
    monkeypatch.setattr(api.settings, "stream_recheck_seconds", 0.05)
    blocking = BlockingHTTP()
    api.egress.add(blocking)
    user_id, _ = api.users["alice"]
    key = await api.store.create_api_key(user_id)
    try:
        async with httpx.AsyncClient(base_url=live, headers={"x-api-key": key}, timeout=httpx.Timeout(60)) as c:
            r = await c.post("/api/v1/flows", json=_slow_flow(blocking.url))
            assert r.status_code == 201, r.text
            body = {"flow_id": r.json()["id"], "input_value": "refund 7", "mode": "stream"}
            async with c.stream("POST", "/api/v2/workflows", json=body) as stream:
                assert stream.status_code == 200
                lines = stream.aiter_lines()
                await eventually(lambda: "first" in blocking.seen, what="the run to make its first call")
                assert await api.store.revoke_api_key(key)

                async def rest() -> list[dict]:
                    frames = []
                    while (frame := await read_frame(lines)) is not None:
                        frames.append(frame)
                    return frames

                after = await asyncio.wait_for(rest(), 10)  # ended while the call still waits
                assert not blocking.gate("first").is_set()
                assert "human_input_required" not in [f["event"] for f in after]
    finally:
        blocking.close()
    await eventually(lambda: api.service.feed.streams_of(user_id) == 0, what="the stream to give its place back")
