"""The store on a PostgreSQL database whose default collation is not C (an ICU locale, as many
managed PostgreSQL services create them): keys are looked up by equality, never by a range over
text, whose order is the collation's. A hostile-review find: claim_decision once looked up a
decision's events by the range ``'{token}:' <= key < '{token};'``, which an ICU collation orders
otherwise, so a decision attempt run again saw nothing of what the lost one had recorded."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from signoff.engine.models import JobStatus
from signoff.engine.store import open_store
from tests.fixtures.db import PG_ADMIN_URL, PG_SERVER
from tests.store_conformance import suspended_job

pytestmark = pytest.mark.postgres


@pytest.fixture
def icu_url():
    name = f"signoff_icu_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
                      "LOCALE 'C.UTF-8'")
    yield f"{PG_SERVER}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_a_decision_attempt_run_again_sees_what_the_lost_one_recorded(icu_url):
    store = open_store(icu_url)
    await store.setup()
    try:
        job_id, request_id = await suspended_job(store)
        token = f"wf-{uuid.uuid4()}-d0"
        assert (await store.claim_decision(job_id, request_id, token)).won
        events = [("human_input_expired", {"rerouted_to": "reject"}, f"{token}:expired"),
                  ("human_input_decision", {"action_id": "reject"}, f"{token}:decision")]
        assert await store.record_decision(job_id, events, token=token, request_id=request_id, action_id="reject",
                                           participants=[]) == [1, 2]
        again = await store.claim_decision(job_id, request_id, token)
        assert again.won and again.job.status == JobStatus.in_progress
        assert {k: e.seq for k, e in again.recorded.items()} == {"expired": 1, "decision": 2}
    finally:
        await store.close()
