"""Who sent a decision through Temporal (DESIGN §9): recorded beside the person it was made for.

The SDK tells a workflow an Update's id and name, not the identity of the client that sent it.
The worker hands it to the workflow from the activation (:mod:`signoff.workflows.caller`), which
passes it to the decision's activity (``client_identity``); an activity scheduled by an older
worker, without it, reads it from the workflow's history (the Update's accepted event, or the
Signal's event), by the Update's id. The decision's event (and a vote's) carries:

- ``via``: ``"api"`` when signoff's API sent it for the person it authenticated (it sets
  ``decided_by`` and no ``user``), ``"temporal"`` when a Temporal client sent it, naming the
  person (``user``) or not (the run's owner);
- ``client_identity``: the Temporal client's identity as Temporal recorded it (the API's own
  client for ``"api"``; ``temporal --identity ...``, an SDK client's ``identity``), None when it
  cannot be read (the history is unreachable: the decision is not held up for it).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest

from signoff.activities.types import RecordVoteInput, ResumeRunInput

log = logging.getLogger("signoff.activities")

_PAGE = 50  # events per page of the history read newest first


async def sender(job_id: str, inp: ResumeRunInput | RecordVoteInput) -> dict[str, Any]:
    """``{"via", "client_identity"}`` of a decision (or vote) being applied (module docstring)."""
    via = "api" if inp.decided_by and inp.user is None else "temporal"
    if inp.client_identity is not None:  # the workflow had it from the activation (workflows/caller.py)
        identity = inp.client_identity or None
    else:
        try:
            identity = await client_identity(job_id, inp)
        except Exception as err:  # noqa: BLE001 - the record is an aid; the decision goes on without it
            log.warning("the Temporal client identity of a decision on %s could not be read: %r", job_id, err)
            identity = None
    sent: dict[str, Any] = {"via": via, "client_identity": identity}
    if inp.update_id is not None:
        sent["update_id"] = inp.update_id  # the Update that carried it
    return sent


async def client_identity(job_id: str, inp: ResumeRunInput | RecordVoteInput) -> str | None:
    """The identity Temporal recorded with the Update ``inp.update_id``; without an Update id (a
    Signal), with the last Signal carrying this decision. The history is read newest first: the
    Update that scheduled this activity was accepted a few events ago, so one short page finds
    it however long the run's history has grown."""
    client = activity.client()
    info = activity.info()
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=job_id, run_id=info.workflow_run_id),
        maximum_page_size=_PAGE)
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(request)
        for event in page.history.events:
            if inp.update_id is not None:
                if event.HasField("workflow_execution_update_accepted_event_attributes"):
                    meta = event.workflow_execution_update_accepted_event_attributes.accepted_request.meta
                    if meta.update_id == inp.update_id:
                        return meta.identity or None
            elif event.HasField("workflow_execution_signaled_event_attributes"):
                signal = event.workflow_execution_signaled_event_attributes
                if _same_decision(signal.input, inp):  # the run's one Signal is ``resume``
                    return signal.identity or None
        if not page.next_page_token:
            return None
        request.next_page_token = page.next_page_token


def _same_decision(payloads: Payloads, inp: ResumeRunInput | RecordVoteInput) -> bool:
    try:
        sent = json.loads(payloads.payloads[0].data)
    except (IndexError, ValueError):
        return False
    if not isinstance(sent, dict) or not isinstance(sent.get("decision"), dict):
        return False
    return (sent.get("request_id") == inp.request_id and sent["decision"].get("action_id") == inp.decision.action_id
            and sent.get("user") == inp.user and sent.get("decided_by") == inp.decided_by)
