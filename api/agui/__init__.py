"""AG-UI 1.0 (DESIGN §12, docs/agui.md): a signoff flow as an AG-UI agent.

One ``POST /api/v1/agui/{flow_id}`` is one AG-UI run: a ``RunAgentInput`` in, an SSE stream of
AG-UI events out, every one built with the ``ag-ui-protocol`` package's models (built, so
validated) and written by its ``EventEncoder``. ``threadId`` is signoff's session.

- Without ``resume``, the last user message is the input of a new run of the flow (a submit
  like the HTTP API's: it supersedes the thread's suspended runs of the flow).
- With ``resume`` (one entry: signoff's runs wait for one decision at a time), the entry's
  ``interruptId`` is the ``request_id`` of the thread's waiting run, and its ``payload``
  (``{action_id, values?}``, or the action id alone) is the decision, sent through
  :meth:`RunService.resume` (the one decision path: the same checks, the same errors, the job
  untouched when refused). ``status: "cancelled"`` stops the waiting run. An approver deciding
  someone else's run gets the end of their decision, not the rest of the owner's run.

What the run does comes from what signoff already records, read from the store (so any API
replica can serve it): the job's event log, followed by :func:`~signoff.api.sse.follow_job`
(the one poller of a job's events), and the run's trace, whose spans are written by each layer
before the job's status moves on. Each component built is a ``STEP_STARTED`` / ``STEP_FINISHED``
pair (the span's times as timestamps), with, inside it, a Chat or Text Output's text as
``TEXT_MESSAGE_*`` and an Agent's tool calls as ``TOOL_CALL_*`` with their results. Every log
event also goes out as a ``CUSTOM`` event ``signoff.<event>``. The AG-UI run ends with the job:
``RUN_FINISHED`` (success with the HTTP API's response as ``result``; the interrupt outcome at a
gate, one interrupt whose id is the request id; the cancelled outcome for a stop or a supersede)
or ``RUN_ERROR`` (a failure, or any signoff error, with signoff's code).

Modules: ``translate`` (what a pending request, a payload, a log event and a span become: pure)
and ``run`` (:class:`AguiRun`: the submit or the decision, then the run followed until it
pauses or ends).
"""

from __future__ import annotations

from signoff.api.agui.run import AguiRun, encode
from signoff.api.agui.translate import (
    TEXT_FIELDS,
    AguiRunInput,
    decision_of,
    gate_vertex,
    interrupt_of,
    last_user_text,
    response_schema,
)

__all__ = ["TEXT_FIELDS", "AguiRun", "AguiRunInput", "decision_of", "encode", "gate_vertex", "interrupt_of",
           "last_user_text", "response_schema"]
