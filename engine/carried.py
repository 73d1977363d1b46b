"""The API's check of a decider, carried to the worker (issue 33: the cost of a decision).

The API checks a decision before it sends it (service/runs.py: who may decide, the request, the
values) and the worker's ``resume_run`` activity used to read it all again (the person, the flow,
their groups). Now the API seals what it found, who decides, by what authority and when, with the
deployment's key (Fernet: encrypted and authenticated, SIGNOFF_SECRET_KEY, which every API and
worker replica shares), and sends the token with the Update. The activity takes it instead of
reading the person and the flow again when it opens with that key, is young (``CARRY_TTL``), and
names this job, request and person; anything else (no token, a Temporal client's own, a stale or
forged one) is ignored and the decider checked from the store as before.

What could have changed since the check fails closed in the decision's own transaction
(Store.record_decision): the job must still wait for the request (the claim's WHERE, as before),
and no access note of the decider (a share revoked, a group membership removed, their keys or
account gone: ACCESS_NOTES) may have been written since ``checked_at - CARRY_MARGIN``; else
nothing is written (AccessChanged) and the activity checks the decider again from the store, then
applies or refuses the decision on what it reads. The margin covers a revoke whose transaction
began before the check and committed after it, and clocks a little apart; a false alarm costs
only the reads the carry saves.

The job the API read rides in the token too (``Checked.job``, when its JSON is at most
``CARRY_JOB_BYTES``): the activity takes it instead of reading the job again, and the decision's
write claims it only while its row still has the ``updated_at`` the API read
(Store.record_decision's ``stamp``; every change of a job's row sets it). A row changed since is
claimed first, on the job as it is then (engine/attempt.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from signoff.engine.models import Job, as_utc
from signoff.engine.secrets import SecretBox

__all__ = ["CARRY_JOB_BYTES", "CARRY_MARGIN", "CARRY_TTL", "Checked", "open_checked", "seal_checked"]

CARRY_TTL = 60  # seconds: an older token is ignored (the decider is read again)
CARRY_MARGIN = timedelta(seconds=10)
# the largest job (its JSON) a token carries: a larger one (a submit with large tweaks) is read
# again by the worker rather than copied into the Update's input, which the history keeps
CARRY_JOB_BYTES = 16 * 1024
_TOKEN_CHARS = 4 * CARRY_JOB_BYTES  # a longer token is none of ours


@dataclass(frozen=True)
class Checked:
    """Who the API found may decide ``request_id`` of ``job_id``: the person (``user_id``,
    ``name``), why (the receipt's ``authority``), and when it began to look (``checked_at``)."""

    job_id: str
    request_id: str
    user_id: str
    name: str
    authority: str
    checked_at: datetime
    # the job as the API read it for this check (None: not carried, the worker reads it)
    job: Job | None = None

    @property
    def access_since(self) -> tuple[str, datetime]:
        """What the decision's transaction checks (Store.record_decision's ``access_since``)."""
        return self.user_id, self.checked_at - CARRY_MARGIN


def seal_checked(box: SecretBox, checked: Checked) -> str:
    body = {"j": checked.job_id, "r": checked.request_id, "u": checked.user_id, "n": checked.name,
            "a": checked.authority, "t": as_utc(checked.checked_at).isoformat()}
    if checked.job is not None and checked.job.job_id == checked.job_id:
        job = checked.job.model_dump_json()
        if len(job) <= CARRY_JOB_BYTES:
            body["job"] = job
    return box.seal(json.dumps(body, separators=(",", ":"))).decode("ascii")


def open_checked(box: SecretBox, token: str | None, *, job_id: str, request_id: str,
                 user_id: str | None) -> Checked | None:
    """The check ``token`` carries, when it opens with the deployment's key, is at most CARRY_TTL
    old and is for this job, request and person; else None (the caller reads the decider)."""
    if not token or not isinstance(token, str) or len(token) > _TOKEN_CHARS or not user_id:
        return None
    try:
        body = json.loads(box.open(token.encode("ascii"), ttl=CARRY_TTL))
        checked = Checked(job_id=str(body["j"]), request_id=str(body["r"]), user_id=str(body["u"]),
                          name=str(body["n"]), authority=str(body["a"]),
                          checked_at=as_utc(datetime.fromisoformat(str(body["t"]))))
    except Exception:  # noqa: BLE001 - not ours, too old, malformed: not a carried check
        return None
    if (checked.job_id, checked.request_id, checked.user_id) != (job_id, request_id, user_id):
        return None
    try:
        job = Job.model_validate_json(body["job"]) if isinstance(body.get("job"), str) else None
    except ValueError:  # sealed by us, so never; read the job then
        job = None
    if job is not None and job.job_id == job_id:
        checked = replace(checked, job=job)
    return checked
