"""A request's rules in words (api/pages/rules.py) over a real in-memory store: the line's parts,
its bound on the people it names (a group of thousands costs six reads, not thousands), and how
far ahead a time is said."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from signoff.api.pages import rules
from signoff.api.pages.views import Names
from signoff.engine.store.memory import MemoryStore
from signoff.engine.models import Job, JobStatus, Option, PendingRequest


def _job(owner: str, now: datetime) -> Job:
    return Job(job_id="j1", flow_id="f", flow_version=1, user_id=owner, session_id=None, status=JobStatus.completed,
               request={}, pending=None, run_id="j1", created_at=now, updated_at=now)


class CountingStore(MemoryStore):
    """A store that counts the users it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.user_reads = 0

    async def get_user(self, user_id: str):  # type: ignore[override]
        self.user_reads += 1
        return await super().get_user(user_id)


async def test_the_line_names_at_most_six_people_and_reads_no_more() -> None:
    store = CountingStore()
    await store.setup()
    owner = await store.create_user("owner")
    members = [await store.create_user(f"m{i:04d}") for i in range(60)]
    await store.create_group(owner.id, "everyone")
    await store.add_group_members(owner.id, "everyone", [m.id for m in members])
    now = datetime.now(timezone.utc)
    req = PendingRequest(request_id="g:j1", prompt="?", options=[Option(action_id="approve", label="Approve")],
                         allowed_decisions=["approve"], paused_at=now, approvers=["group:everyone"],
                         approver_refs=[f"group:{owner.id}/everyone"], required_approvals=3,
                         escalate_after_seconds=3 * 3600, escalate_to=["boss"])
    votes = [{"user": members[0].id, "user_name": "m0000", "action_id": "approve"}]
    store.user_reads = 0
    line = await rules.rules_line(Names(store), _job(owner.id, now), req, votes, now=now)
    assert line is not None
    parts = line.split(" · ")
    assert parts[0] == "1 of 3 approvals" and parts[1] == "m0000 approved"
    assert re.fullmatch(r"waiting on everyone \((m\d{4}, ){5}m\d{4} and 53 more\)", parts[2]), parts[2]
    assert "m0000" not in parts[2]  # who voted is not waited on
    assert parts[3] == "escalates to boss in 3 hours"
    assert store.user_reads <= 6
    later = await rules.rules_line(Names(store), _job(owner.id, now), req, votes, now=now + timedelta(hours=4))
    assert later is not None and later.endswith("escalated to boss")


async def test_a_plain_gate_has_no_line() -> None:
    store = MemoryStore()
    await store.setup()
    now = datetime.now(timezone.utc)
    req = PendingRequest(request_id="g:j1", prompt="?", options=[Option(action_id="ok", label="OK")],
                         allowed_decisions=["ok"], paused_at=now)
    assert await rules.rules_line(Names(store), _job("u", now), req, [], now=now) is None


def test_times_ahead_in_words() -> None:
    assert rules.in_time(30) == "in a moment"
    assert rules.in_time(5 * 60) == "in 5 min"
    assert rules.in_time(3600) == "in 1 hour"
    assert rules.in_time(47.9 * 3600) == "in 2 days"
    assert rules.in_time(30 * 3600) == "in 30 hours"
