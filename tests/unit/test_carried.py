"""The API's check carried to the worker (engine/carried.py), sealed with the deployment's key:
with the job the API read (issue 33), which the worker takes instead of reading it again; a job
too large to copy into the Update's input is left out (the worker reads it), and a token that is
not ours, or for another job, request or person, carries nothing."""

from __future__ import annotations

from datetime import timedelta

from cryptography.fernet import Fernet

from signoff.engine.carried import CARRY_JOB_BYTES, CARRY_MARGIN, Checked, open_checked, seal_checked
from signoff.engine.models import Job, JobStatus, Option, PendingRequest, utcnow
from signoff.engine.secrets import SecretBox


def job(**request) -> Job:
    now = utcnow()
    return Job(job_id="j1", flow_id="f1", flow_version=2, user_id="u1", session_id=None, status=JobStatus.suspended,
               request={"input_value": "refund 42", **request}, run_id="r1", created_at=now, updated_at=now,
               pending=PendingRequest(request_id="gate:j1", prompt="Refund?", paused_at=now,
                                      options=[Option(action_id="approve", label="Approve")],
                                      allowed_decisions=["approve"]))


def checked(j: Job | None) -> Checked:
    return Checked(job_id="j1", request_id="gate:j1", user_id="u1", name="alice", authority="owner",
                   checked_at=utcnow(), job=j)


def test_the_job_read_by_the_api_rides_sealed_with_its_check() -> None:
    box, read = SecretBox(Fernet.generate_key()), job()
    token = seal_checked(box, checked(read))
    assert "refund 42" not in token  # sealed: encrypted, not only signed
    got = open_checked(box, token, job_id="j1", request_id="gate:j1", user_id="u1")
    assert got is not None and got.job == read and got.job.updated_at == read.updated_at  # the stamp, exact
    assert got.access_since == ("u1", got.checked_at - CARRY_MARGIN)
    # for another job, request or person, or sealed with another key: nothing carried at all
    assert open_checked(box, token, job_id="j2", request_id="gate:j1", user_id="u1") is None
    assert open_checked(box, token, job_id="j1", request_id="gate:j1", user_id="u2") is None
    assert open_checked(SecretBox(Fernet.generate_key()), token, job_id="j1", request_id="gate:j1",
                        user_id="u1") is None


def test_a_job_too_large_to_carry_is_left_for_the_worker_to_read() -> None:
    box = SecretBox(Fernet.generate_key())
    big = job(tweaks={"t": "x" * CARRY_JOB_BYTES})
    got = open_checked(box, seal_checked(box, checked(big)), job_id="j1", request_id="gate:j1", user_id="u1")
    assert got is not None and got.job is None  # the check itself still carried
    other = job().model_copy(update={"job_id": "j2"})  # a job that is not the check's is never sealed with it
    got = open_checked(box, seal_checked(box, checked(other)), job_id="j1", request_id="gate:j1", user_id="u1")
    assert got is not None and got.job is None


def test_a_stale_token_carries_nothing() -> None:
    box = SecretBox(Fernet.generate_key())
    old = Checked(job_id="j1", request_id="gate:j1", user_id="u1", name="alice", authority="owner",
                  checked_at=utcnow() - timedelta(minutes=5), job=job())
    token = box._fernet.encrypt_at_time(box.open(seal_checked(box, old).encode()).encode(), 0).decode()
    assert open_checked(box, token, job_id="j1", request_id="gate:j1", user_id="u1") is None
