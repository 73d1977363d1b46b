"""What became of a request a decision lost (DESIGN §14: "the losers told who won"): the decision
that was made, named for the person whose own came too late, on every surface that goes through
RunService.resume (the HTTP API's 409, the page, a decision link, Slack, MCP, A2A, AG-UI).

Only someone asked learns anything (an approver who no longer sees the run gets the 404 they had),
and a winner whose claim on the request is taken but not yet recorded is waited for a moment
(:data:`WHO_WON_WAIT` at most), so a race's loser is told the winner's name, not "not waiting".
"""

from __future__ import annotations

import asyncio

from signoff.engine.errors import JobNotFound, NotResumable, SignoffError
from signoff.engine.models import User
from signoff.engine.store.base import Store
from signoff.service.access import asked_job, valid_id

# the most a decision that lost waits for the winner's decision to be recorded, to name it
WHO_WON_WAIT = 5.0
POLL_SECONDS = 0.1


async def who_won(store: Store, user: User, job_id: str, request_id: str, err: SignoffError) -> SignoffError:
    """``err`` again, or NOT_RESUMABLE naming the decision that was made: "Already decided by
    bob: approve (via slack)" with ``decided_by``, ``decided_action``, ``decided_via``. A
    winner whose claim on this request is taken and not yet recorded is waited for
    (:data:`WHO_WON_WAIT` at most); anything else is answered at once."""
    if not valid_id(job_id) or not isinstance(request_id, str) or len(request_id) > 200:
        return err
    if isinstance(err, JobNotFound):  # only someone asked learns anything (and no sooner or later)
        try:
            await asked_job(store, user, job_id, request_id)
        except JobNotFound:
            return err
    deadline = asyncio.get_running_loop().time() + WHO_WON_WAIT
    while True:
        job = await store.get_job(job_id)
        if job is None or job.waits_for(request_id):
            return err  # gone, or still waiting: not lost to another decision
        decided = [e for e in await store.read_events_named(job_id, "human_input_decision")
                   if e.data.get("request_id") == request_id]
        claimed = job.pending is not None and job.pending.request_id == request_id  # under a decision's claim
        if decided or not claimed or job.status.terminal or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    if not decided:
        return err
    data = decided[-1].data
    who = str(data.get("decided_by") or "")
    person = await store.get_user(who) if who else None
    name = person.name if person else ("the deadline" if data.get("timed_out") else who or "someone")
    via = str(data.get("via") or "api")
    return NotResumable(f"Already decided by {name}: {data.get('action_id')} (via {via})", job_id=job_id,
                        decided_by=name, decided_action=data.get("action_id"), decided_via=via)
