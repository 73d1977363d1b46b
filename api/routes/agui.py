"""AG-UI 1.0 (DESIGN §12): ``POST /api/v1/agui/{flow_id}``, a ``RunAgentInput`` in, AG-UI events
out as Server-Sent Events. The run itself is :class:`signoff.api.agui.AguiRun`."""

from __future__ import annotations

from typing import Any

from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from signoff.api.agui import TEXT_FIELDS, AguiRun, AguiRunInput, encode
from signoff.api.deps import CurrentUser, ServiceDep, SettingsDep, StoreDep
from signoff.api.limits import check_body
from signoff.api.models import error_responses
from signoff.api.sse import key_still_sees, sse_response

router = APIRouter(prefix="/api/v1/agui", tags=["agui"])

AGUI_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Event: `data: {AG-UI event}` (JSON, AG-UI 1.0, camelCase); comments "
                   "(`: keep-alive`) are not events.",
    "properties": {
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string", "description": "RUN_STARTED, STEP_STARTED, STEP_FINISHED, "
                                        "TEXT_MESSAGE_START/CONTENT/END, TOOL_CALL_START/ARGS/END/RESULT, CUSTOM, "
                                        "RUN_FINISHED (outcome success, interrupt or cancelled), RUN_ERROR"}},
            },
        },
    },
    "required": ["data"],
}


@router.post(
    "/{flow_id}",
    response_class=StreamingResponse,
    responses={
        200: {"description": "The AG-UI run as Server-Sent Events: `RUN_STARTED` ... `RUN_FINISHED` or `RUN_ERROR`. "
                             "Once the input is valid every answer is a stream: a flow you may not run, a refused "
                             "resume (`NOT_RESUMABLE`, `INVALID_DECISION`, `INVALID_VALUES`, `FORBIDDEN`, "
                             "`NOT_AN_APPROVER`, `JOB_NOT_FOUND`...) is `RUN_ERROR` with signoff's `code`",
              "content": {"text/event-stream": {"schema": AGUI_EVENT_SCHEMA}}},
        **error_responses({422: "`INVALID_REQUEST`: not a `RunAgentInput` (with `problems`)",
                           429: "`TOO_MANY_STREAMS`: the user holds SIGNOFF_MAX_STREAMS_PER_USER live streams",
                           503: "`UNAVAILABLE`: Temporal is not reachable"}, body=True),
    },
)
async def run_agent(flow_id: str, body: AguiRunInput, request: Request, store: StoreDep, service: ServiceDep,
                    settings: SettingsDep, user: CurrentUser) -> StreamingResponse:
    """Run the flow as an AG-UI agent (AG-UI 1.0). `threadId` is the session. Without `resume`, the
    last user message is the input of a new run (which supersedes the thread's suspended runs of
    the flow). With `resume` (one entry), the thread's waiting run gets the decision
    (`payload`: `{action_id, values?}`) through the same checks as the HTTP resume, or is stopped
    (`status: "cancelled"`). A gate ends the AG-UI run with the interrupt outcome: the interrupt's
    id is the request id."""
    check_body(body, settings, text=TEXT_FIELDS)
    service.feed.check(user.id)  # 429 TOO_MANY_STREAMS before anything runs
    run = AguiRun(store=store, service=service, user=user, flow_id=flow_id, inp=body)
    encoder = EventEncoder(accept=request.headers.get("accept"))
    allowed = key_still_sees(store, request.headers.get("x-api-key", "").strip(), user, None)
    return sse_response(encode(run.events(), encoder), allowed, settings=settings, feed=service.feed, user_id=user.id,
                        media_type=encoder.get_content_type())
