"""The data of the workflow's own surface: its input, the ``resume`` Update/Signal and their
answer, the queries' names and the search attributes. One pydantic model per call, named
``<Verb>Input``/``<Verb>Output``, so fields can be added without breaking running workflows.
Plain data only (the sandbox passes it through). The activities' inputs and outputs are in
:mod:`signoff.activities.types`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio.common import SearchAttributeKey

from signoff.engine.models import Decision

WORKFLOW_TYPE = "FlowRun"
RESUME = "resume"
PENDING_QUERY = "pending"
REJECTED_QUERY = "rejected_signals"  # rejected resume Signals per pending request id (FlowRun)
# Update: the store may be ahead of the workflow (a decision recorded in a workflow task that was
# lost with its Update); go on from what the store recorded. Sent by the API when it sees the run
# lag behind its job, or by an operator (docs/temporal.md).
CATCH_UP = "catch_up"

# The search attributes of DESIGN §7, all Keyword (so that `SignoffStatus = "suspended"` works):
# set at the start (flow, session, user, status) and by the workflow (status, request id).
SA_FLOW = SearchAttributeKey.for_keyword("SignoffFlowId")
SA_SESSION = SearchAttributeKey.for_keyword("SignoffSessionId")
SA_USER = SearchAttributeKey.for_keyword("SignoffUserId")
SA_STATUS = SearchAttributeKey.for_keyword("SignoffStatus")
SA_REQUEST = SearchAttributeKey.for_keyword("SignoffRequestId")
SEARCH_ATTRIBUTES: tuple[str, ...] = tuple(k.name for k in (SA_FLOW, SA_SESSION, SA_USER, SA_STATUS, SA_REQUEST))


class FlowRunInput(BaseModel):
    job_id: str
    flow_id: str
    flow_name: str = ""
    user_id: str
    session_id: str | None = None
    max_suspend_seconds: int = 0  # 0 = wait forever
    max_reminders: int = 24  # reminders one request sends at most (SIGNOFF_MAX_REMINDERS, its default)
    layer_timeout_seconds: float = 3600.0


class ResumeInput(BaseModel):
    """The JSON of the HTTP resume, also accepted by the Update and the Signal ``resume``.
    Through Temporal, ``user`` names the person the decision is made for (a user name or id;
    default the run's owner): it passes the same checks as that person's HTTP resume. The API
    sets ``decided_by`` (the caller's id)."""

    model_config = ConfigDict(extra="ignore")

    request_id: str
    decision: Decision
    decided_by: str | None = None
    user: str | None = None
    # the surface or protocol signoff's API took it from for ``decided_by`` (activities/sender.py:
    # VIAS): page, agui, email, slack, mcp, a2a; None: the HTTP API itself
    via: str | None = None
    # the API's check of the decider, sealed with the deployment's key (engine/carried.py): the
    # worker takes it instead of reading the person and the flow again; ignored unless it opens
    checked: str | None = None


class ResumeResult(BaseModel):
    job_id: str
    status: str = "resuming"  # or "vote_recorded": one vote of a quorum that is not complete
    request_id: str
    action_id: str
    votes: int = 0
    required: int = 1
    # the run's result when the decision's own step completed the run (and the result is small):
    # the API answers the run as completed from it, with no read after the Update (issue 33).
    # None: the run goes on (or ended otherwise, or an older worker answered): the API reads it
    completed: dict[str, Any] | None = None
