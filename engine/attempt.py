"""A decision attempt: the one procedure by which a decision takes effect on a paused run of the
job table (DESIGN §1, §9). The worker's ``resume_run`` activity calls it once per attempt; what
it does around it (who may decide, the values' check, the layers after the decision, webhook
deliveries, metrics) is the activity's.

    (the caller's job waits for the request: the pause's state read, the decision applied, then
     the claim and the records in ONE store write, whose WHERE checks the job still waits for it;
     refused, the store is looked at once: Recorded / NotClaimed / NotApplied as below)

    claim under the attempt's token ─┬─ an earlier attempt under that token recorded a decision → Recorded
                                     ├─ not won (another decision holds the run)                → NotClaimed
                                     ├─ won, the job ended meanwhile (a stop)                   → NotApplied
                                     └─ won: the paused state, the decision applied, the gate's
                                        span, the records in one store write                    → Applied
                                           └─ the write refused (a stop or a twin attempt got
                                              in first): looked at again → Recorded / NotApplied

Safe to run again under the same token (a retried activity, a lost workflow task's local
activity run again): the claim is the token's, each record's dedupe key is derived from it, and
a second run finds the first one's record (Recorded) instead of applying anything twice. Never
"applied" unless recorded: a decision the caller is told took effect is one in the store.

The in-process runner (engine/runner.py, ``signoff run``) has no job table: its run lives in one
process, its single flight is a per-run lock and it applies the decision with the same
:func:`~signoff.engine.decisions.apply_decision`; there is nothing for it to claim or to go on
from, so it does not go through this procedure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from datetime import datetime
from typing import Any, Literal

from signoff.engine import tracing
from signoff.engine.audit.keys import ReceiptKeys, SigningKey
from signoff.engine.audit.receipts import ReceiptDraft
from signoff.engine.decisions import apply_decision, decision_event, expired_event
from signoff.engine.errors import NotResumable
from signoff.engine.graph import Graph
from signoff.engine.models import AppliedDecision, Decision, DecisionClaim, Job, JobStatus, PendingRequest, Vote
from signoff.engine.state import RunState
from signoff.engine.store.base import DecisionReads, Store

PausedState = Callable[[Job], Awaitable[tuple[RunState, Graph]]]


@dataclass(frozen=True)
class DecisionAttempt:
    """One attempt at a decision: the job and request it is for, the claim ``token`` it runs
    under, the decision, who made it (``decided_by``: a user id; None for the deadline's), the
    votes of a quorum (``vote``: the one that completes it), how it was ``sent`` (the record's
    ``via``...), who took part, and whether the caller checked its values already."""

    job_id: str
    request_id: str
    token: str
    decision: Decision
    now: datetime
    decided_by: str | None = None
    votes: list[Vote] = field(default_factory=list)
    vote: Vote | None = None
    timed_out: bool = False
    sent: dict[str, Any] | None = None
    participants: list[str] = field(default_factory=list)
    values_checked: bool = False
    # the receipt's (docs/audit.md): the decider's name, and why they were allowed ("owner",
    # "approver", "group:<name>", "escalation", "standing:<rule id>"; None: "owner" for the
    # run's owner, else "approver"; the deadline's is always "timeout")
    decider_name: str | None = None
    authority: str | None = None
    # (user id, when): the decider was checked then by the API, not read again by the caller; the
    # records are written only while no access note of theirs came after (Store.record_decision)
    access_since: tuple[str, datetime] | None = None
    # what the caller's deliveries need, read in the decision's own write when it is written
    # (Store.record_decision's ``reads``; issue 33): no round trips of their own after it
    reads: DecisionReads | None = field(default=None, compare=False)
    # the job's ``updated_at`` as the caller's job was read (a job carried from the API's read,
    # engine/carried.py): the claim in the decision's write is taken only while the row has it
    stamp: datetime | None = None


@dataclass
class Attempted:
    """What an attempt came to (see the module's diagram). ``applied``: the decision, the state
    it made (``state``, from ``paused``), its graph and the records' (event, seq) (``written``).
    ``recorded``: an earlier attempt's record under the token (``claim`` holds it). ``not_claimed``:
    nothing was done. ``not_applied``: claimed, not recorded; the job (``job``) ended first."""

    outcome: Literal["applied", "recorded", "not_claimed", "not_applied"]
    job: Job | None = None
    claim: DecisionClaim | None = None
    paused: RunState | None = None
    state: RunState | None = None
    graph: Graph | None = None
    applied: AppliedDecision | None = None
    written: list[tuple[str, int]] = field(default_factory=list)


async def attempt_decision(store: Store, a: DecisionAttempt, paused_state: PausedState,
                           keys: ReceiptKeys | None = None, *, job: Job | None = None) -> Attempted:
    """Run the attempt ``a`` (module docstring). ``paused_state(job)``: the run's state at its
    pause and its graph (the checkpoint, or the caller's copy). ``job``: the job as the caller
    read it a moment ago; when it waits for the request, the claim is taken in the decision's
    own write (one commit: :func:`_claim_and_record`; with ``a.stamp``, only while the job's row is
    as that read saw it). ``keys``: the decision's signed receipt is
    written with its records (docs/audit.md); None: no receipt. Raises NotResumable for a job that is not
    there; store errors as they come (the caller retries under the same token)."""
    signing = await keys.signing() if keys is not None else None
    if job is not None and job.job_id == a.job_id and job.status == JobStatus.suspended and job.waits_for(a.request_id):
        done = await _claim_and_record(store, a, paused_state, job, signing)
        if done is not None:
            return done
    claim = await store.claim_decision(a.job_id, a.request_id, a.token)
    if claim.job is None:
        raise NotResumable(f"job {a.job_id} not found")
    job = claim.job
    if "decision" in claim.recorded:
        return Attempted("recorded", job, claim)
    if not claim.won:
        return Attempted("not_claimed", job, claim)
    if job.status.terminal:  # claimed under this token, then ended (a stop) before the decision
        return Attempted("not_applied", job, claim)
    paused, graph = await paused_state(job)
    state, applied = _apply(a, paused)
    written = await _record(store, job, paused, applied, a, signing)
    if written is None:
        # Not recorded: another run of this attempt recorded its own decision first (a lost
        # task's local activity still running beside the one that runs it again), or a stop
        # ended the job after the claim. Never go on from a decision not recorded.
        claim = await store.claim_decision(a.job_id, a.request_id, a.token, claim=False)
        if "decision" in claim.recorded and claim.job is not None:
            return Attempted("recorded", claim.job, claim)
        return Attempted("not_applied", claim.job or job, claim)
    trace_gate(job, graph, paused, applied)  # "Human In The Loop — {label}": once recorded
    return Attempted("applied", job, claim, paused=paused, state=state, graph=graph, applied=applied,
                     written=written)


async def _claim_and_record(store: Store, a: DecisionAttempt, paused_state: PausedState, job: Job,
                            signing: SigningKey | None = None) -> Attempted | None:
    """The attempt in one store write, for a ``job`` the caller read waiting for the request:
    the run's state at the pause read first (the checkpoint of that pause: nothing changes it
    while the job waits for it), the decision applied to it, then the claim and the records in
    one transaction (Store.record_decision with ``claim``), whose WHERE checks that the job
    still waits for that request: what was read is what the claim takes. None when this cannot
    be done so (the checkpoint is gone, or holds another pause: the job moved on since it was
    read), and the caller claims first as before. Not written (refused): looked at once, as a
    claim that was not won (another decision, or a stop, got in first) or an earlier attempt's
    record under the token (a twin of this one)."""
    try:
        paused, graph = await paused_state(job)
    except NotResumable:
        return None
    if paused.pending is None or paused.pending.request_id != a.request_id or paused.pending_vertex is None:
        return None
    state, applied = _apply(a, paused)
    written = await _record(store, job, paused, applied, a, signing, claim=True)
    if written is None:
        claim = await store.claim_decision(a.job_id, a.request_id, a.token, claim=False)
        if claim.job is None:
            raise NotResumable(f"job {a.job_id} not found")
        if "decision" in claim.recorded:
            return Attempted("recorded", claim.job, claim)
        if claim.won and claim.job.status.terminal:  # claimed under this token, then ended (a stop)
            return Attempted("not_applied", claim.job, claim)
        if claim.won:  # an earlier attempt's claim, nothing recorded under it: the claim first, as before
            return None
        if a.stamp is not None and claim.job.waits_for(a.request_id):
            # waiting still, its row changed since the caller's read (a claim let go of, ...): what
            # was read is not what waits now; the claim first, on the job as it is
            return None
        return Attempted("not_claimed", claim.job, claim)
    trace_gate(job, graph, paused, applied)  # "Human In The Loop — {label}": once recorded
    # the job as a claim reads it: running under this claim (its request, as read, for the caller)
    claimed = job.model_copy(update={"status": JobStatus.in_progress})
    return Attempted("applied", claimed, DecisionClaim(won=True, job=claimed, recorded={}), paused=paused,
                     state=state, graph=graph, applied=applied, written=written)


def _apply(a: DecisionAttempt, paused: RunState) -> tuple[RunState, AppliedDecision]:
    votes = [*a.votes, a.vote] if a.vote is not None else a.votes
    return apply_decision(paused, a.request_id, a.decision, a.now, a.decided_by, votes=votes,
                          timed_out=a.timed_out, values=not a.values_checked)


def trace_gate(job: Job, graph: Graph, paused: RunState, applied: AppliedDecision) -> None:
    """The gate's span, "Human In The Loop — {label}" (its id is the same each time: a decision
    applied again writes it again, not twice)."""
    assert paused.pending is not None and paused.pending_vertex is not None
    tracing.record_gate(run_id=paused.run_id, pending=paused.pending, applied=applied,
                        vertex_id=paused.pending_vertex, job_id=job.job_id, flow_id=paused.flow_id,
                        component_type=graph.vertices[paused.pending_vertex].type)


def vote_data(request_id: str, vote: Vote, n: int, required: int) -> dict[str, Any]:
    """The data of a ``human_input_vote`` event: the ``n``-th vote of ``required``."""
    return {"request_id": request_id, "user": vote.user, "action_id": vote.action_id, "values": vote.values,
            "at": vote.at.isoformat(), "votes": n, "required": required}


async def _record(store: Store, job: Job, paused: RunState, applied: AppliedDecision,
                  a: DecisionAttempt, signing: SigningKey | None = None, *,
                  claim: bool = False) -> list[tuple[str, int]] | None:
    """The decision's records in one store write under the claim (Store.record_decision): the
    vote that completed a quorum (``human_input_vote``, with the resolution),
    ``human_input_expired`` (when rerouted) then ``human_input_decision`` (with how it was
    ``sent``), the card stamped, the pending request cleared, the participants recorded, and,
    with a ``signing`` key, the decision's receipt chained to the run's last one. Returns
    each event's (name, seq); None when the claim is no longer the decision's, and nothing was
    written."""
    assert paused.pending is not None
    sent = a.sent or {}
    events: list[tuple[str, dict[str, Any], str]] = []
    if a.vote is not None:  # the same dedupe key as a recorded vote's: one event per person, retries included
        events.append(("human_input_vote", {
            **vote_data(a.request_id, a.vote, len(applied.votes), paused.pending.required_approvals), **sent},
            f"vote:{a.request_id}:{a.vote.user}"))
    if applied.rerouted:
        events.append(("human_input_expired", expired_event(applied), f"{a.token}:expired"))
    events.append(("human_input_decision", {**decision_event(applied), **sent}, f"{a.token}:decision"))
    maker = None
    if signing is not None:
        draft = decision_receipt(job, paused.pending, applied, a)
        maker = partial(draft.signed, key_id=signing.key_id, private=signing.private)
    seqs = await store.record_decision(job.job_id, events, token=a.token, request_id=applied.request_id,
                                       action_id=applied.action_id, participants=a.participants, claim=claim,
                                       receipt=maker, access_since=a.access_since, reads=a.reads,
                                       stamp=a.stamp if claim else None)
    return None if seqs is None else [(name, seq) for (name, _, _), seq in zip(events, seqs)]


def decision_receipt(job: Job, pending: PendingRequest, applied: AppliedDecision, a: DecisionAttempt) -> ReceiptDraft:
    """The receipt of the decision ``applied`` on ``pending`` by the attempt ``a`` (unsigned)."""
    person = {"id": a.decided_by, "name": a.decider_name or a.decided_by} if a.decided_by and not applied.timed_out \
        else None
    authority = a.authority or ("owner" if a.decided_by == job.user_id else "approver")
    return ReceiptDraft.of_decision(job_id=job.job_id, flow_id=job.flow_id, flow_version=job.flow_version,
                                    pending=pending, key=f"{a.token}:decision", applied=applied, decided_by=person,
                                    authority=authority, via=(a.sent or {}).get("via"))


__all__ = ["Attempted", "DecisionAttempt", "attempt_decision", "decision_receipt", "trace_gate", "vote_data"]
