"""The activities' inputs and outputs (what the workflow sends them and gets back). One pydantic
model per call, named ``<Verb>Input``/``<Verb>Output``, so fields can be added without breaking
running workflows. Plain data only: the workflow sandbox passes it through."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from signoff.engine.models import Decision, PendingRequest, Vote


class StateRef(BaseModel):
    """Where a run's state (the engine's RunState) is: inline when its JSON is at most
    ``settings.inline_output_bytes``, else a store blob key (the payload stays small)."""

    inline: dict[str, Any] | None = None
    blob_key: str | None = None


class Delivery(BaseModel):
    """One event for one webhook: what the workflow hands to ``deliver_webhook``; or, with a
    ``channel``, one notification of the event to one person (``notify_person``)."""

    webhook_id: str = ""
    job_id: str
    seq: int
    channel: str | None = None  # "email", "slack": a notification (activities/notify.py)
    user_id: str | None = None  # the person it is for
    # the request a closing note is about, when its event does not name it (run_cancelled, run_timed_out)
    request_id: str | None = None


class EventDelivery(BaseModel):
    """One event for some webhooks (at most ``HOOKS_PER_DELIVERY``): what the workflow hands to
    ``deliver_event``, one activity where each webhook had one (issue 28: a pause reaching a
    user's 20 webhooks was 20 activity tasks, 60 events of the run's history)."""

    job_id: str
    seq: int
    webhook_ids: list[str]


HOOKS_PER_DELIVERY = 20  # the webhooks one deliver_event POSTs to at once (each within 10 s)


class RunLayerInput(BaseModel):
    job_id: str
    step: int
    state: StateRef | None = None  # None: the first layer (the activity creates the state)
    now: datetime
    # The round trips a run saves (docs/temporal.md, "Round trips per run"): build the layers that
    # follow while they are instant (``inline``), and on a pause persist it here (``persist``:
    # approvers, ``human_input_required``, ``suspended``). FlowRun sets both; a test may not.
    inline: bool = False
    persist: bool = False


class RunLayerOutput(BaseModel):
    step: int
    state: StateRef
    done: bool = False
    pending: PendingRequest | None = None
    built: list[str] = Field(default_factory=list)
    cancelled: bool = False  # the job had already ended (e.g. superseded before it started)
    status: str | None = None  # when done or cancelled: what the job really is
    persisted: bool = False  # the pause is persisted (``persist``): the job shows ``suspended``
    deliveries: list[Delivery] = Field(default_factory=list)  # webhooks to tell (human_input_required)


class ResumeRunInput(BaseModel):
    """One activity for a decision: claim (with the workflow's deterministic ``token``, so a retry
    finds its own claim), apply, then build the following layers inline while they are instant
    (no external I/O), up to the next pause or the end."""

    job_id: str
    token: str
    request_id: str
    decision: Decision
    decided_by: str | None = None
    user: str | None = None  # the person it is for (name or id), when sent through Temporal
    via: str | None = None  # the surface signoff's API took it from (ResumeInput.via)
    checked: str | None = None  # the API's check of the decider, sealed (ResumeInput.checked)
    now: datetime
    state: StateRef | None = None
    step: int = 0
    inline: bool = True
    persist: bool = False  # a pause reached after the decision is persisted here (RunLayerInput.persist)
    votes: list[Vote] = Field(default_factory=list)  # the quorum this decision completes
    timed_out: bool = False  # made by the deadline itself (on_timeout), nobody answered
    update_id: str | None = None  # the Update that sent it (None: a Signal, or the deadline)
    # the identity of the Temporal client that sent it, as Temporal recorded it (workflows/caller.py;
    # "" or None when it sent none)
    client_identity: str | None = None
    # the vote that completes the quorum (checked by record_vote with ``check_only``): recorded
    # (``human_input_vote``) with the resolution, under its claim, so a vote whose resolution
    # loses the claim (a stop, a supersede) leaves no trace
    vote: Vote | None = None
    # no decision of its own: go on from what an earlier attempt under ``token`` recorded, or let
    # go of a claim it took and left with nothing recorded (FlowRun's catch-up; ``decision`` unused)
    probe: bool = False


class ResumeRunOutput(BaseModel):
    claimed: bool
    # the decision applied: the Update that sent it (None: a Signal, the deadline), its action.
    # Not always the one asked: when the workflow task that applied another Update's decision (a
    # local activity) was lost, the workflow may take another Update first; the run goes on
    # from the decision the store recorded (activities/decision.py, DecisionActivities._go_on_from)
    update_id: str | None = None
    action_id: str | None = None
    # refused before anything was claimed (not an approver, no execute permission...): {code,
    # message, details}, answered to the Update without a rollback (activities/failures.py: refused)
    refused: dict[str, Any] | None = None
    out: RunLayerOutput | None = None  # where the run is afterwards (the workflow goes on from it)
    deliveries: list[Delivery] = Field(default_factory=list)
    # the run's result when this attempt completed it (at most activities/decision.py's
    # RESULT_BYTES of JSON): the Update's answer carries it, so the API reads nothing after it (issue 33)
    completed: dict[str, Any] | None = None


class RecordVoteInput(BaseModel):
    """One vote of a request that needs several approvers (``required_approvals``)."""

    job_id: str
    request_id: str
    decision: Decision
    decided_by: str | None = None
    user: str | None = None
    via: str | None = None  # the surface signoff's API took it from (ResumeInput.via)
    now: datetime
    update_id: str | None = None  # the Update that sent it (None: a Signal)
    client_identity: str | None = None  # as ResumeRunInput.client_identity
    check_only: bool = False  # the vote that completes the quorum: checked here, recorded by resume_run


class RecordVoteOutput(BaseModel):
    vote: Vote
    deliveries: list[Delivery] = Field(default_factory=list)


class GateTimerInput(BaseModel):
    """A timer of a waiting request fired: ``reminder`` (number ``n``), ``escalation`` (adds
    ``escalate_to`` to the approvers) or ``expired`` (on_timeout: fail, before the run ends)."""

    job_id: str
    request_id: str
    kind: str
    n: int = 0
    escalate_to: list[str] = Field(default_factory=list)
    now: datetime


class GateTimerOutput(BaseModel):
    written: bool  # False: the request no longer waits (decided, stopped): nothing was written
    approver_refs: list[str] = Field(default_factory=list)  # after an escalation
    deliveries: list[Delivery] = Field(default_factory=list)


class RollbackResumeInput(BaseModel):
    job_id: str
    claim_token: str


class FinishInput(BaseModel):
    job_id: str
    status: str  # completed | failed | cancelled | timed_out
    state: StateRef | None = None
    error: dict[str, Any] | None = None
    # timed_out by a gate's deadline (on_timeout: fail), not by the maximum suspension:
    # {"request_id", "timeout_seconds"}, what run_timed_out says
    deadline: dict[str, Any] | None = None
    # the request the run was waiting on when it was stopped, superseded or timed out: the people
    # told of it get a closing note (activities/notify.py)
    request_id: str | None = None


class FinishOutput(BaseModel):
    status: str  # what the job really is afterwards
    deliveries: list["Delivery"] = Field(default_factory=list)  # closing notes of the request it waited on


class RecordEventInput(BaseModel):
    job_id: str
    event: str
    data: dict[str, Any] = Field(default_factory=dict)
