"""Agent: a tool-calling loop over an OpenAI-compatible chat-completions endpoint, whose tools
are the tool-capable components wired into its ``tools`` input, each call of a tool with
``approval_actions`` waiting for a person (docs/agent.md).

The conversation lives in the agent's private state (``ctx.state``), which the engine saves in
the checkpoint at each pause. On resume the agent continues from it: a model call made before
the pause is never sent again and a tool that ran before the pause never runs again.

State (JSON)::

    {"messages": [...],        # the conversation so far, OpenAI format
     "queue": [call, ...],     # tool calls of the last assistant message not answered yet
     "model_calls": n,         # model requests answered (bounded by max_iterations)
     "tool_runs": n,           # tools actually run (numbers each call: "{tool}#{agent}.{n}")
     "approvals": n,           # approvals asked (the interrupt id of the next one is n + 1)
     "awaiting": {...} | null, # the call the pending approval is about
     "log": [...]}             # what happened to each tool call (ran / rejected / responded / error)
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from signoff.engine.components import get_component, register
from signoff.engine.components.base import (
    TOOL_APPROVAL_ACTIONS,
    BuildContext,
    Component,
    InputDef,
    OutputDef,
    ParamDef,
    PauseRequested,
    as_text,
)
from signoff.engine.decisions import tool_args
from signoff.engine.errors import ComponentError, SignoffError
from signoff.engine.llm import DEFAULT_BASE_URL, MAX_BACKOFF, ChatClient
from signoff.engine.models import Option, PendingRequest

DEFAULT_MODEL = "gpt-4o-mini"
ACTION_LABELS = {"approve": "Approve", "edit": "Edit", "reject": "Reject", "respond": "Respond"}
REJECTED_DEFAULT = "A person rejected this tool call; it did not run."
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
# A flow is untrusted input: an agent's loop is bounded (model calls, retries of each, tool calls
# answered per model message), so one flow cannot hold a worker or bill without end.
LIMITS = {"max_iterations": (1, 100), "max_retries": (0, 10)}
MAX_TOOL_CALLS = 16


def _same_endpoint(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def _host_port(url: str) -> str:
    """``host:port`` of a URL, as SIGNOFF_EGRESS_ALLOW writes it (IPv6 in brackets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tool_specs(descriptors: list[Any]) -> dict[str, dict[str, Any]]:
    """The tools by the name the model sees: ``{name: {descriptor, schema, required, inputs}}``.
    Names are made OpenAI-safe (``[A-Za-z0-9_-]{1,64}``) and unique."""
    tools: dict[str, dict[str, Any]] = {}
    for desc in descriptors:
        if not isinstance(desc, dict) or "component_type" not in desc:
            continue
        cls = get_component(str(desc["component_type"]))
        if cls is None:
            continue
        params = desc.get("params") or {}
        name = _NAME_OK.sub("_", str(desc.get("tool_name") or desc.get("vertex_id") or cls.type_name))[:64] or "tool"
        base, n = name, 2
        while name in tools:
            suffix = f"_{n}"
            name, n = base[: 64 - len(suffix)] + suffix, n + 1
        props: dict[str, Any] = {}
        required: list[str] = []
        for idef in cls.input_defs(params):
            if params.get(idef.name) is not None:
                continue  # fixed by the flow: the model does not choose it
            props[idef.name] = {"type": "string", "description": idef.description or idef.name}
            if idef.required:
                required.append(idef.name)
        tools[name] = {
            "descriptor": desc,
            "required": required,
            "inputs": list(props),
            "schema": {
                "type": "function",
                "function": {
                    "name": name,
                    "description": str(desc.get("tool_description") or cls.description or name),
                    "parameters": {"type": "object", "properties": props, "required": required},
                },
            },
        }
    return tools


@register
class Agent(Component):
    type_name = "Agent"
    display_name = "Agent"
    description = "Answers with a chat model that can call the tools wired into it, asking a person where a tool says so."
    can_pause = True
    inputs = [
        InputDef("input_value", description="The task (default: the run's input)."),
        InputDef("tools", many=True, description="Tool-capable components (their `tool` output)."),
    ]
    outputs = [OutputDef("response", "The model's final answer.")]
    params = [
        ParamDef("model", "str", description="Model name (default: settings openai_model)."),
        ParamDef("base_url", "str", description="OpenAI-compatible base URL, e.g. http://localhost:11434/v1."),
        ParamDef("api_key", "str", secret=True,
                 description='API key, or a secret: {"$secret": "NAME"} (default: the operator\'s key, for the '
                             "operator's model URL only)."),
        ParamDef("system_prompt", "str", default="", description="The system message."),
        ParamDef("max_iterations", "int", default=10, description="Most model calls in one run."),
        ParamDef("temperature", "number", description="Sampling temperature (left to the server when unset)."),
        ParamDef("timeout", "number", default=60, description="Seconds to wait for one model answer."),
        ParamDef("max_retries", "int", default=3, description="Retries of a model call on timeouts, 429 and 5xx."),
        ParamDef("retry_backoff", "number", default=0.5, description="First retry delay in seconds (doubles)."),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        for name, (low, high) in LIMITS.items():
            v = params.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high:
                problems.append(f"param '{name}' must be between {low} and {high}")
        for name in ("timeout", "retry_backoff"):
            v = params.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (v < 0 or (name == "timeout" and v == 0)):
                problems.append(f"param '{name}' must be > 0" if name == "timeout" else f"param '{name}' must be >= 0")
            elif name == "retry_backoff" and isinstance(v, (int, float)) and v > MAX_BACKOFF:
                problems.append(f"param 'retry_backoff' must be at most {MAX_BACKOFF:g} seconds")
        url = params.get("base_url")
        if isinstance(url, str) and url and not url.startswith(("http://", "https://")):
            problems.append("param 'base_url' must start with http:// or https://")
        return problems

    # ---- the loop --------------------------------------------------------------------------

    async def _client(self, ctx: BuildContext) -> ChatClient:
        """The model endpoint and its key. The operator's key (SIGNOFF_OPENAI_API_KEY) goes only
        to the operator's model URL (SIGNOFF_OPENAI_BASE_URL, else OpenAI's): an agent with a
        base_url of its own uses its own api_key or none. The operator's URL is let through the
        egress policy for this call only; an agent's own URL obeys SIGNOFF_EGRESS_ALLOW."""
        settings = ctx.run.settings
        operator_url = (settings.openai_base_url if settings else None) or DEFAULT_BASE_URL
        base_url = self.params.get("base_url") or (settings.openai_base_url if settings else None)
        operators = _same_endpoint(base_url or DEFAULT_BASE_URL, operator_url)
        api_key = await ctx.run.reveal(self.params.get("api_key"), vertex_id=ctx.vertex_id)
        if not api_key and operators and settings is not None:
            api_key = settings.openai_api_key
        allow = [_host_port(operator_url)] if operators and settings is not None and settings.openai_base_url else []
        if not base_url and not api_key:
            raise ComponentError(
                f"Agent '{ctx.vertex_id}': no model endpoint: set the agent's base_url (any OpenAI-compatible server, "
                "e.g. http://localhost:11434/v1) or an API key for OpenAI (param api_key, or SIGNOFF_OPENAI_BASE_URL / "
                "SIGNOFF_OPENAI_API_KEY, or OPENAI_BASE_URL / OPENAI_API_KEY for the process)",
                vertex_id=ctx.vertex_id,
            )
        extra: dict[str, Any] = {}
        if self.params.get("temperature") is not None:
            extra["temperature"] = self.params["temperature"]
        return ChatClient(
            model=self.params.get("model") or (settings.openai_model if settings else None) or DEFAULT_MODEL,
            base_url=base_url,
            api_key=api_key,
            timeout=ctx.run.capped_timeout(float(self.params.get("timeout") or 60)),
            max_retries=int(self.params.get("max_retries") if self.params.get("max_retries") is not None else 3),
            backoff=float(self.params.get("retry_backoff") if self.params.get("retry_backoff") is not None else 0.5),
            http_client_factory=lambda: ctx.run.http_client(allow=allow),
            extra_body=extra,
            who=f"Agent '{ctx.vertex_id}'",
        )

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        tools = tool_specs(ctx.inputs.get("tools") or [])
        st = ctx.state
        if "messages" not in st:
            messages: list[dict[str, Any]] = []
            if self.params.get("system_prompt"):
                messages.append({"role": "system", "content": str(self.params["system_prompt"])})
            task = ctx.inputs.get("input_value")
            if task is None:
                task = self.params.get("input_value", ctx.run.input_value)
            messages.append({"role": "user", "content": as_text(task)})
            st.update(messages=messages, queue=[], model_calls=0, tool_runs=0, approvals=0, awaiting=None, log=[])

        if st.get("awaiting") is not None:
            decision = ctx.decision
            awaiting = st["awaiting"]
            if decision is None or decision.request_id != awaiting["request_id"]:
                raise ComponentError(
                    f"Agent '{ctx.vertex_id}': resumed without the decision for {awaiting['request_id']}",
                    vertex_id=ctx.vertex_id,
                )
            st["awaiting"] = None
            await self._apply_decision(ctx, tools, decision)

        client: ChatClient | None = None
        max_iterations = int(self.params.get("max_iterations") or 10)
        while True:
            while st["queue"]:
                await self._next_call(ctx, tools)  # may pause
            if st["model_calls"] >= max_iterations:
                raise ComponentError(
                    f"Agent '{ctx.vertex_id}': no final answer after max_iterations={max_iterations} model calls "
                    "(the model kept calling tools); raise max_iterations or check the tools' results",
                    vertex_id=ctx.vertex_id,
                )
            client = client or await self._client(ctx)
            # a child span of this vertex's span (type llm): model, token usage, error status
            with ctx.run.model_call(model=client.model, number=st["model_calls"] + 1, endpoint=client.url,
                                    messages=st["messages"], tools=list(tools)) as span:
                result = await client.chat(st["messages"], [t["schema"] for t in tools.values()] or None)
                span.model_result(result)
            st["model_calls"] += 1
            st["messages"].append(result.message)
            if not result.tool_calls:
                return {"response": result.content}
            st["queue"] = [
                {"id": c.id, "name": c.name, "args": c.arguments, "raw": c.raw_arguments,
                 "error": c.error if i < MAX_TOOL_CALLS else
                 f"not run: at most {MAX_TOOL_CALLS} tool calls are answered per model message; call again"}
                for i, c in enumerate(result.tool_calls)
            ]

    async def _next_call(self, ctx: BuildContext, tools: dict[str, dict[str, Any]]) -> None:
        """Answer the first queued tool call: a malformed call gets an error the model can fix,
        a gated call pauses, any other runs."""
        st = ctx.state
        call = st["queue"][0]
        problem = call.get("error")
        tool = tools.get(call["name"])
        if problem is None and tool is None:
            problem = f"there is no tool '{call['name']}' (tools: {', '.join(tools) or 'none'})"
        if problem is None:
            missing = [n for n in tool["required"] if call["args"].get(n) in (None, "")]
            if missing:
                problem = f"missing required argument(s): {', '.join(missing)}"
        if problem is not None:
            self._answer(st, call, f"Error: {problem}. Call the tool again with valid arguments.", "error")
            return
        actions = [a for a in tool["descriptor"].get("approval_actions") or [] if a in TOOL_APPROVAL_ACTIONS]
        if actions:
            st["approvals"] += 1
            request = PendingRequest(
                request_id=ctx.request_id(str(st["approvals"])),
                kind="tool_approval",
                prompt=f"The agent wants to call {call['name']} with {json.dumps(call['args'], ensure_ascii=False)}",
                options=[Option(action_id=a, label=ACTION_LABELS[a]) for a in actions],
                allowed_decisions=actions,
                paused_at=ctx.now(),
                tool={
                    "name": call["name"],
                    "args": call["args"],
                    "call_id": call["id"],
                    "vertex_id": tool["descriptor"].get("vertex_id"),
                    "component_type": tool["descriptor"].get("component_type"),
                    "description": tool["schema"]["function"]["description"],
                },
            )
            st["awaiting"] = {"request_id": request.request_id, "call_id": call["id"]}
            raise ctx.pause(request)
        await self._run(ctx, tool, call, call["args"], "ran")

    async def _apply_decision(self, ctx: BuildContext, tools: dict[str, dict[str, Any]], decision: Any) -> None:
        st = ctx.state
        call = st["queue"][0]
        values = decision.values or {}
        action = decision.action_id
        if action == "approve":
            await self._run(ctx, tools[call["name"]], call, call["args"], "approved")
        elif action == "edit":
            args = tool_args(values.get("args")) or {}
            await self._run(ctx, tools[call["name"]], call, args, "edited")
        elif action == "reject":
            message = values.get("message")
            self._answer(st, call, message if isinstance(message, str) and message.strip() else REJECTED_DEFAULT, "rejected")
        elif action == "respond":
            self._answer(st, call, str(values.get("message") or ""), "responded")
        else:  # not reachable: apply_decision checks allowed_decisions
            raise ComponentError(f"Agent '{ctx.vertex_id}': unknown decision '{action}'", vertex_id=ctx.vertex_id)

    async def _run(self, ctx: BuildContext, tool: dict[str, Any], call: dict[str, Any], args: dict[str, Any], how: str) -> None:
        """Build the tool's component with the arguments as its inputs, under a vertex id that
        names this call (so an HTTP tool's Idempotency-Key is per call and stable on retry)."""
        st = ctx.state
        desc = tool["descriptor"]
        cls = get_component(str(desc["component_type"]))
        st["tool_runs"] += 1
        call_vertex = f"{desc.get('vertex_id')}#{ctx.vertex_id}.{st['tool_runs']}"
        component = cls(call_vertex, dict(desc.get("params") or {}))
        first = cls.output_defs(component.params)[0].name
        known = {i.name for i in cls.input_defs(component.params)}
        tctx = BuildContext(
            vertex_id=call_vertex,
            component_type=cls.type_name,
            inputs={k: v for k, v in args.items() if k in known},
            run=ctx.run,
            wanted_outputs={first},
            model_chosen=True,
        )
        try:
            # a child span of this vertex's span (type tool): name, arguments (truncated), result
            with ctx.run.tool_call(name=call["name"], args=args, number=st["tool_runs"], component_type=cls.type_name,
                                   call_id=call["id"], outcome=how) as span:
                outputs = await component.build(tctx)
                span.outputs({first: (outputs or {}).get(first)})
        except PauseRequested:
            raise ComponentError(
                f"Agent '{ctx.vertex_id}': tool '{call['name']}' tried to pause; only the agent asks for approval",
                vertex_id=ctx.vertex_id,
            ) from None
        except ComponentError as e:  # the model sees the failure and may try something else
            self._answer(st, call, f"Error: {e.message}", "error", args)
            return
        except SignoffError:  # NestedGateError and the like end the run
            raise
        except Exception as e:
            self._answer(st, call, f"Error: {e.__class__.__name__}: {e}", "error", args)
            return
        self._answer(st, call, as_text((outputs or {}).get(first)), how, args)

    @staticmethod
    def _answer(st: dict[str, Any], call: dict[str, Any], content: str, how: str, args: dict[str, Any] | None = None) -> None:
        st["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": content})
        st["log"].append({"call_id": call["id"], "name": call["name"], "args": args if args is not None else call["args"],
                          "outcome": how, "result": content[:2000]})
        st["queue"].pop(0)
