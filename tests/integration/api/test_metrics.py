"""``GET /metrics`` (issue 17): Prometheus' text format, what an operator graphs, through the app
with its worker on the session's Temporal dev server; the worker's own endpoint; the SDK's."""

from __future__ import annotations

import uuid

import httpx
from prometheus_client.parser import text_string_to_metric_families

from signoff.api.routes import metrics as route
from signoff.engine.metrics import MeteredStore, STORE_ERRORS, STORE_SECONDS
from signoff.engine.models import JobStatus
from signoff.engine.store.memory import MemoryStore
from tests.integration.api.conftest import Harness


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(api: Harness, **kw) -> httpx.Response:
    route._counted["at"] = 0.0  # the runs' counts afresh
    async with api.client() as c:  # no API key: a scraper
        return await c.get("/metrics", **kw)


async def test_metrics_count_runs_waiting_requests_and_decisions(api: Harness) -> None:
    r = await scrape(api)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    before = samples(r.text)
    async with api.client("alice") as c:
        r = await c.post("/api/v2/workflows", json={"flow_id": api.flows["refund"], "input_value": "metrics",
                                                    "mode": "sync", "session_id": f"m-{uuid.uuid4().hex[:6]}"})
        job_id = r.json()["job_id"]
        assert r.json()["status"] == "suspended", r.text
        waiting = samples((await scrape(api)).text)
        assert waiting[("signoff_waiting_requests", ())] >= 1
        assert waiting[("signoff_runs", (("status", "suspended"),))] == waiting[("signoff_waiting_requests", ())]
        r = await c.post(f"/api/v2/workflows/{job_id}/resume",
                         json={"request_id": f"gate:{job_id}", "decision": {"action_id": "approve"}})
        assert r.status_code == 200, r.text
    await api.wait_status(job_id, JobStatus.completed)
    after = samples((await scrape(api)).text)
    key = ("signoff_decisions_total", (("outcome", "decided"), ("via", "api")))
    assert after[key] == before.get(key, 0) + 1
    waited = ("signoff_time_to_decision_seconds_count", ())
    assert after[waited] == before.get(waited, 0) + 1
    assert after[("signoff_runs", (("status", "completed"),))] >= 1
    assert ("signoff_live_streams", ()) in after


async def test_metrics_with_a_token_need_it(api: Harness) -> None:
    api.settings.metrics_token = "scrape-me-0123456789"
    try:
        assert (await scrape(api)).status_code == 401
        assert (await scrape(api, headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await scrape(api, headers={"authorization": "Bearer scrape-me-0123456789"})).status_code == 200
    finally:
        api.settings.metrics_token = None


async def test_a_metered_store_times_each_call_and_counts_its_failures() -> None:
    store = MeteredStore(MemoryStore())
    count = STORE_SECONDS.labels("get_job")._sum.get()  # noqa: SLF001 - the histogram's running sum
    assert await store.get_job("nope") is None
    assert STORE_SECONDS.labels("get_job")._sum.get() > count
    errors = STORE_ERRORS.labels("get_job", "STORE_ERROR")._value.get()
    await store.inner.close()
    try:
        await store.get_job("nope")
    except Exception:
        pass
    assert STORE_ERRORS.labels("get_job", "STORE_ERROR")._value.get() == errors + 1


async def test_the_sql_store_counts_its_commits_reads_and_statements(tmp_path) -> None:
    """``signoff_store_transactions_total{kind}`` and ``signoff_store_statements_total`` (issue
    33): a write transaction is one commit, a read one read connection, each statement counted."""
    from signoff.engine.metrics import exposition
    from signoff.engine.store import open_store
    from signoff.engine.store.counters import tallying

    store = open_store(f"sqlite:///{tmp_path / 'counts.db'}")
    await store.setup()
    try:
        def now() -> tuple[float, float, float]:
            got = samples(exposition().decode())
            return (got[("signoff_store_transactions_total", (("kind", "commit"),))],
                    got[("signoff_store_transactions_total", (("kind", "read"),))],
                    got[("signoff_store_statements_total", ())])

        # the metric counts the process's work (the parallel suite's other tests too); the tally
        # counts this task's alone, exactly
        before = now()
        with tallying() as wrote:
            user = await store.create_user(f"counted-{uuid.uuid4()}")  # one write transaction
        assert wrote["commit"] == 1 and wrote["read"] == 0 and wrote["statements"] >= 1
        with tallying() as read:
            assert await store.get_user(user.id) is not None  # one read connection, one statement
        assert read == {"commit": 0, "read": 1, "statements": 1}
        after = now()
        assert all(a - b >= w + r for a, b, w, r in zip(after, before, (wrote["commit"], wrote["read"], wrote["statements"]),
                                                           (read["commit"], read["read"], read["statements"])))
    finally:
        await store.close()
