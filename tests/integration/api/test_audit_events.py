"""A run's event log with its hash chain through the API and the CLI (docs/audit.md), and the
oversight metrics after real decisions, with the worker on the session's Temporal dev server,
on SQLite and PostgreSQL: a clean run verifies offline; an event edited in the database is
named by `signoff audit verify-events`, which exits 3."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from signoff.cli import main as cli
from signoff.engine.audit.events import verify_chain
from signoff.engine.models import JobStatus
from tests.integration.api.conftest import Harness, submit_suspended
from tests.integration.api.test_metrics import samples, scrape

pytestmark = pytest.mark.both_stores


async def _decided(api: Harness, action: str = "approve") -> str:
    resp = await submit_suspended(api, session_id=f"chain-{uuid.uuid4().hex[:6]}")
    job_id = resp["job_id"]
    async with api.client("alice") as c:
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": action}})
        assert r.status_code == 200, r.text
    await api.wait_status(job_id, JobStatus.completed)
    return job_id


async def _verify_cli(api: Harness, live: str, job_id: str, user: str = "alice") -> int:
    key = api.users[user][1]
    return await asyncio.to_thread(cli, ["audit", "verify-events", "--run", job_id, "--api-url", live,
                                         "--api-key", key])


async def test_the_events_api_gives_the_chain_a_page_at_a_time(api: Harness) -> None:
    job_id = await _decided(api)
    events = await api.store.read_events(job_id)
    async with api.client("alice") as c:
        r = await c.get(f"/api/v1/runs/{job_id}/events", params={"limit": 2})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["last_seq"] == len(events) and page["next_after"] == 2
        assert [(e["seq"], e["sha256"], e["prev_sha256"]) for e in page["events"]] == [
            (e.seq, e.sha256, e.prev_sha256) for e in events[:2]]
        got = page["events"]
        while page["next_after"] is not None:
            page = (await c.get(f"/api/v1/runs/{job_id}/events", params={"after": page["next_after"],
                                                                            "limit": 2})).json()
            got += page["events"]
        assert verify_chain(got, job_id=job_id, last_seq=len(events)).checked == len(events) >= 3
        for bad in ({"limit": 0}, {"limit": 1001}, {"after": -1}, {"after": "x"}):
            r = await c.get(f"/api/v1/runs/{job_id}/events", params=bad)
            assert r.status_code == 422 and r.json()["detail"]["code"] == "INVALID_REQUEST", (bad, r.text)
        r = await c.get(f"/api/v1/runs/{'x' * 5000}/events")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "JOB_NOT_FOUND"
    async with api.client("bob") as c:  # not his run
        r = await c.get(f"/api/v1/runs/{job_id}/events")
        assert r.status_code == 404 and r.json()["detail"]["code"] == "JOB_NOT_FOUND"
    async with api.client() as c:
        assert (await c.get(f"/api/v1/runs/{job_id}/events")).status_code == 401


async def test_verify_events_passes_a_clean_run_and_names_an_event_edited_in_the_database(
        api: Harness, live: str, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = await _decided(api)
    assert await _verify_cli(api, live, job_id) == 0
    out = capsys.readouterr().out
    assert f"run {job_id}: " in out and "events verified" in out
    decision = (await api.store.read_events_named(job_id, "human_input_decision"))[0]
    async with api.store._tx(write=True) as tx:  # type: ignore[attr-defined]  # approve -> reject, quietly
        await tx.execute("UPDATE events SET data = ? WHERE job_id = ? AND seq = ?",
                         (api.store._enc_json({**decision.data, "action_id": "reject"}),  # type: ignore[attr-defined]
                          job_id, decision.seq))
    assert await _verify_cli(api, live, job_id) == 3
    out = capsys.readouterr().out
    assert f"broken at seq {decision.seq} (changed)" in out, out
    async with api.store._tx(write=True) as tx:  # type: ignore[attr-defined]
        await tx.execute("DELETE FROM events WHERE job_id = ? AND seq = ?", (job_id, decision.seq))
    assert await _verify_cli(api, live, job_id) == 3
    assert f"broken at seq {decision.seq} (removed)" in capsys.readouterr().out
    assert await _verify_cli(api, live, job_id, user="bob") == 1  # not his: JOB_NOT_FOUND
    assert "JOB_NOT_FOUND" in capsys.readouterr().err


async def test_oversight_metrics_move_after_real_decisions(api: Harness) -> None:
    flow = api.flows["refund"]
    before = samples((await scrape(api)).text)
    waiting = await submit_suspended(api, session_id=f"chain-{uuid.uuid4().hex[:6]}")
    now = samples((await scrape(api)).text)
    inf = ("signoff_pending_age_seconds_bucket", (("flow", flow), ("le", "+Inf")))
    assert now[inf] >= 1 and now[("signoff_pending_oldest_age_seconds", (("flow", flow),))] >= 0
    await _decided(api, "approve")
    await _decided(api, "reject")
    after = samples((await scrape(api)).text)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("signoff_flow_decisions_total", flow=flow, outcome="approved") == 1
    assert moved("signoff_flow_decisions_total", flow=flow, outcome="rejected") == 1
    assert moved("signoff_flow_decisions_total", flow=flow, outcome="edited") == 0
    assert moved("signoff_flow_time_to_decision_seconds_count", flow=flow) == 2
    async with api.client("alice") as c:  # the one left waiting ends: it no longer counts
        job_id = waiting["job_id"]
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    await api.wait_status(job_id, JobStatus.completed)
    last = samples((await scrape(api)).text)
    assert last.get(inf, 0) == now[inf] - 1
