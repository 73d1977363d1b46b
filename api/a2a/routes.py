"""A2A's routes (DESIGN §15): every flow the caller may run is an agent, its JSON-RPC endpoint at
``/a2a/{flow_id}`` (the ``a2a-sdk``'s dispatcher over :class:`SignoffA2A`, A2A 1.0 and the 0.3
method names) and its card at ``/a2a/{flow_id}/.well-known/agent-card.json``. Both need the API
key (:class:`~signoff.api.auth.AuthMiddleware`: 401 before the body is read, the body bounded);
the card of a flow the caller may not run is 404, as a flow is over HTTP."""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, APIKeySecurityScheme, SecurityRequirement,
    SecurityScheme, StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff.engine.errors import SignoffError
from signoff.engine.models import FlowRecord

from signoff.api.errors import STATUS_BY_CODE, error_response
from signoff.api.a2a.handler import SignoffA2A

PREFIX = "/a2a"
SCHEME = "apiKey"


class _Context(DefaultServerCallContextBuilder):
    """The call's state: the user the key names (the middleware found them), the service, the
    flow of the URL and the key (streams ask again whether it still sees the run)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        # the headers (the SDK reads A2A-Version from them) without the key: kept apart, never echoed
        context.state["headers"] = {k: v for k, v in context.state.get("headers", {}).items() if k != "x-api-key"}
        context.state.update(signoff_user=request.scope["state"]["user"], signoff_service=request.app.state.service,
                             signoff_flow_id=request.path_params["flow_id"],
                             signoff_key=request.headers.get("x-api-key", "").strip(),
                             signoff_writes=request.app.state.write_buckets)
        return context


def card_of(flow: FlowRecord, url: str) -> AgentCard:
    """The agent card of one flow, its JSON-RPC endpoint at ``url``."""
    description = str(flow.spec.get("description") or f"The signoff flow {flow.name!r}: it may stop at a human "
                      "gate (input-required) and waits for the decision")
    return AgentCard(
        name=flow.name, description=description, version=str(flow.version),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version=PROTOCOL_VERSION_1_0)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={SCHEME: SecurityScheme(api_key_security_scheme=APIKeySecurityScheme(
            location="header", name="x-api-key", description="API key from `signoff users create`"))},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="run", name=flow.name, description=description, tags=["signoff", "human-in-the-loop"],
                           input_modes=["text/plain", "application/json"],
                           output_modes=["text/plain", "application/json"])],
    )


async def agent_card(request: Request) -> Response:
    flow_id = request.path_params["flow_id"]
    try:
        flow = await request.app.state.service.flows.get(request.scope["state"]["user"], flow_id)
    except SignoffError as err:
        return error_response(STATUS_BY_CODE.get(err.code, 500), err.code, err.message)
    url = str(request.url_for("a2a_agent", flow_id=flow_id))
    public = request.app.state.settings.public_url  # behind a proxy: the origin people reach signoff at
    if public:
        url = public + url[len(str(request.base_url).rstrip("/")):]
    return JSONResponse(agent_card_to_dict(card_of(flow, url)))


def mount(app: Starlette) -> None:
    dispatcher = JsonRpcDispatcher(request_handler=SignoffA2A(), context_builder=_Context(), enable_v0_3_compat=True)
    app.router.add_route(PREFIX + "/{flow_id}" + AGENT_CARD_WELL_KNOWN_PATH, agent_card, methods=["GET"],
                         include_in_schema=False)
    app.router.add_route(PREFIX + "/{flow_id}", dispatcher.handle_requests, methods=["POST"], name="a2a_agent",
                         include_in_schema=False)
