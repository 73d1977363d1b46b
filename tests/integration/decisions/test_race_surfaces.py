"""One request answered at once from every surface (DESIGN §14: one decision path, exactly once,
whoever is first), through the real parts: the decision card's POST (carol, signed in to the
pages), a decision link's POST (bob), a Slack button press signed as Slack signs it (dave, the
app decides it in the background and updates the message), the HTTP resume (alice, the run's
owner) and the real ``temporal`` CLI's Update (erin), 50 rounds (25 on SQLite, tests/helpers.rounds)
run a few at a time. Each round: exactly one decision, by whoever was first, and every loser is
told who won (the page, the link, the API's 409 and the Slack message say "by <winner>"; the
CLI, which talks to the workflow and not to signoff, is refused: the request no longer waits or
the workflow is over).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio

from signoff.devserver import temporal_binary
from signoff.engine import links, slack
from signoff.engine.models import JobStatus, utcnow
from tests.helpers import eventually, rounds
from tests.integration.api.conftest import Harness, harness
from tests.integration.decisions.conftest import (
    SECRET,
    TOKEN,
    FakeSlack,
    gate_flow,
    run_suspended,
    signed,
    upload,
    user_name,
)

PEOPLE = ("carol", "dave", "erin")
CSRF = re.compile(r'name="csrf" value="([^"]*)"')
BATCH = 5  # rounds at once (5 decisions each)


@pytest_asyncio.fixture(scope="module")
async def h(store_backend, tmp_path_factory, temporal_client, fake) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp("race"), temporal_client,
                       slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=f"{fake.url}/api/",
                       notify_timeout_seconds=2, public_url="https://signoff.example.com") as hx:
        for name in PEOPLE:
            user = await hx.store.create_user(f"{name}-{uuid.uuid4().hex[:6]}")
            hx.users[name] = (user.id, await hx.store.create_api_key(user.id))
        await hx.store.set_contacts(hx.users["dave"][0], {"slack": "U" + uuid.uuid4().hex[:10].upper()},
                                    verified=True)
        yield hx


async def _page_client(h: Harness, who: str) -> httpx.AsyncClient:
    page = httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app), base_url="https://signoff.example.com")
    token = re.search(r'name="token" value="([^"]+)"', (await page.get("/sign-in")).text).group(1)  # type: ignore[union-attr]
    r = await page.post("/sign-in", data={"token": token, "next": "/", "api_key": h.users[who][1]})
    assert r.status_code == 303, r.text
    return page


async def _cli(server: Any, job_id: str, person: str) -> tuple[int, str]:
    body = json.dumps({"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}, "user": person})
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(), "workflow", "update", "execute", "--workflow-id", job_id, "--name", "resume",
        "--input", body, "--address", server.address, "--namespace", "default", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, (out + err).decode()


@pytest.mark.both_stores  # claims raced through the whole stack
async def test_every_surface_at_once_decides_exactly_once_and_the_losers_are_told_who_won(
        h: Harness, fake: FakeSlack, temporal_server, store_backend: str) -> None:
    names = {who: await user_name(h, who) for who in ("alice", "bob", "carol", "dave", "erin")}
    flow_id = await upload(h, gate_flow({"approvers": list(names.values()), "notify": []}, name="race"))
    dave_slack = (await h.store.get_user(h.users["dave"][0])).slack  # type: ignore[union-attr]
    page = await _page_client(h, "carol")
    won: dict[str, int] = {}
    via_of = {"page": "carol", "email": "bob", "slack": "dave", "api": "alice", "temporal": "erin"}

    async def one_round(n: int) -> None:
        job_id = (await run_suspended(h, flow_id))["job_id"]
        request_id = f"gate:{job_id}"
        job = await h.store.get_job(job_id)
        assert job is not None and job.pending is not None
        token = await links.mint(h.store, job_id=job_id, pending=job.pending, user_id=h.users["bob"][0],
                                 channel="email", now=utcnow(), ttl_seconds=600)
        async with h.client() as c:
            link_csrf = CSRF.search((await c.get(f"/d/{token}")).text).group(1)  # type: ignore[union-attr]
        card = f"/runs/{job_id}/requests/{request_id}"
        card_csrf = CSRF.search((await page.get(card)).text).group(1)  # type: ignore[union-attr]
        ts = f"{time.time():.6f}{n}"
        press = urlencode({"payload": json.dumps({
            "type": "block_actions", "user": {"id": dave_slack},
            "container": {"type": "message", "channel_id": dave_slack, "message_ts": ts},
            "actions": [{"action_id": "signoff:approve", "block_id": "b", "type": "button",
                         "value": slack.button_value(job_id, request_id, "approve", h.users["dave"][0])}]})})

        async def by_page() -> tuple[int, str]:
            r = await page.post(card, data={"csrf": card_csrf, "action_id": "approve"})
            return r.status_code, r.text

        async def by_link() -> tuple[int, str]:
            async with h.client() as c:
                r = await c.post(f"/d/{token}", data={"csrf": link_csrf, "action_id": "approve"})
            return r.status_code, r.text

        async def by_slack() -> tuple[int, str]:
            async with h.client() as c:
                r = await c.post("/api/v1/slack/interactions", content=press, headers=signed(press))
            return r.status_code, r.text

        async def by_api() -> tuple[int, str]:
            async with h.client("alice") as c:
                r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                                 json={"request_id": request_id, "decision": {"action_id": "approve"}})
            return r.status_code, r.text

        answers = dict(zip(("page", "email", "slack", "api", "temporal"), await asyncio.gather(
            by_page(), by_link(), by_slack(), by_api(), _cli(temporal_server, job_id, names["erin"]))))
        await h.wait_status(job_id, JobStatus.completed)
        decided = [e.data for e in await h.store.read_events(job_id) if e.event == "human_input_decision"]
        assert len(decided) == 1, (answers, decided)
        via = decided[0]["via"]
        winner = names[via_of[via]]
        assert decided[0]["decided_by"] == h.users[via_of[via]][0]
        won[via] = won.get(via, 0) + 1
        # the winner was answered as such
        status, body = answers[via]
        assert (status == 0 if via == "temporal" else status in (200, 303)), (via, status, body[:500])
        # each loser is told who won
        for surface, (status, body) in answers.items():
            if surface == via:
                continue
            if surface in ("page", "email"):
                assert status == 409 and winner in body, (surface, status, body[-2000:])
            elif surface == "api":
                assert status == 409, body
                detail = json.loads(body)["detail"]
                assert detail["code"] == "NOT_RESUMABLE" and detail["decided_by"] == winner, detail
                assert f"Already decided by {winner}" in detail["message"]
            elif surface == "temporal":
                said = body.lower()  # refused by the run, or the workflow closed before or while it came
                assert status != 0 and ("NOT_RESUMABLE" in body or "already completed" in said
                                        or "not found" in said or "aborted by closing workflow" in said), body
        # Slack's answer is the message, updated once the press's decision (in the background) is through
        assert answers["slack"][0] == 200
        expected = f"approve by {names['dave']}" if via == "slack" else f"Already answered: approve by {winner}"
        await eventually(lambda: any(expected in u["text"] for u in fake.sent("chat.update", dave_slack)
                                     if u.get("ts") == ts), what=f"the Slack message to say {expected!r}")

    n = rounds(store_backend, 50)
    try:
        for first in range(0, n, BATCH):
            await asyncio.gather(*(one_round(i) for i in range(first, min(n, first + BATCH))))
    finally:
        await page.aclose()
    assert sum(won.values()) == n, won
