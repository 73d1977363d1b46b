"""``Job.waits_for``: the one rule "the job waits for this request" that the activities, the
service's catch-up, AG-UI and the pages ask (each wrote it out before, not all alike)."""

from __future__ import annotations

from signoff.engine.models import Job, JobStatus, PendingRequest, utcnow


def job(status: JobStatus, request_id: str | None) -> Job:
    now = utcnow()
    pending = PendingRequest(request_id=request_id, kind="node_input", allowed_decisions=["approve"],
                             paused_at=now) if request_id else None
    return Job(job_id="j", flow_id="f", flow_version=1, user_id="u", session_id=None, status=status, request={},
               pending=pending, run_id="r", created_at=now, updated_at=now)


def test_a_suspended_job_waits_for_its_pending_request_only():
    assert job(JobStatus.suspended, "gate:j").waits_for("gate:j")
    assert not job(JobStatus.suspended, "gate:j").waits_for("gate:other")
    assert not job(JobStatus.suspended, None).waits_for("gate:j")


def test_a_job_under_a_claim_or_ended_waits_for_nothing():
    # a decision's claim makes the job in_progress before the record clears its request
    for status in (JobStatus.in_progress, JobStatus.queued, JobStatus.completed, JobStatus.cancelled,
                   JobStatus.timed_out, JobStatus.failed):
        assert not job(status, "gate:j").waits_for("gate:j"), status
