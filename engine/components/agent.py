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
     "log": [...]}             # what happened to each tool call (ran / rejected / responded / error;
                               # ``authority: standing:<id>`` when a standing approval approved it)
"""

from __future__ import annotations

import json
import re
from typing import Any

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
from signoff.engine.components._model import (
    DEFAULT_MODEL,
    ENDPOINT_PARAMS,
    RETRY_PARAMS,
    chat_client,
    check_model_params,
)
from signoff.engine.components.message_history import earlier_messages
from signoff.engine.audit.receipts import check_args
from signoff.engine.decisions import tool_args
from signoff.engine.errors import ComponentError, SignoffError
from signoff.engine.llm import ChatClient
from signoff.engine.models import Option, PendingRequest

__all__ = ["DEFAULT_MODEL", "MAX_TOOL_CALLS", "Agent", "tool_specs"]
ACTION_LABELS = {"approve": "Approve", "edit": "Edit", "reject": "Reject", "respond": "Respond"}
REJECTED_DEFAULT = "A person rejected this tool call; it did not run."
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
# A flow is untrusted input: an agent's loop is bounded (model calls, retries of each, tool calls
# answered per model message), so one flow cannot hold a worker or bill without end.
LIMITS = {"max_iterations": (1, 100), "max_retries": (0, 10), "n_messages": (0, 1000)}
MAX_TOOL_CALLS = 16
# (flag, component, tool name, description) of the tools an agent brings itself
BUILTIN_TOOLS = (
    ("add_current_date_tool", "CurrentDate", "get_current_date",
     "The current date and time; the argument timezone is an IANA name such as Europe/Paris (default UTC)."),
    ("add_calculator_tool", "Calculator", "evaluate_expression",
     "Evaluates an arithmetic expression with + - * / // % ** and parentheses, e.g. 2 * (3 + 4)."),
)


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
        InputDef("system_prompt", description="The system message (an edge, else the param)."),
    ]
    outputs = [OutputDef("response", "The model's final answer.")]
    params = [
        *ENDPOINT_PARAMS,
        ParamDef("system_prompt", "str", default="",
                 description="The system message; {current_date} and {model_name} are filled in."),
        ParamDef("max_iterations", "int", default=10, description="Most model calls in one run."),
        *RETRY_PARAMS,
        ParamDef("n_messages", "int", default=0,
                 description="Earlier messages of the session the model sees before the task (0: none)."),
        ParamDef("add_current_date_tool", "bool", default=False, description="Give the model a current-date tool."),
        ParamDef("add_calculator_tool", "bool", default=False, description="Give the model a calculator tool."),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        return super().check_params(params) + check_model_params(params, LIMITS)

    # ---- the loop --------------------------------------------------------------------------

    async def _client(self, ctx: BuildContext) -> ChatClient:
        """The model endpoint and its key, by the operator-key rule (``_model.chat_client``)."""
        return await chat_client(ctx, self.params, who=f"Agent '{ctx.vertex_id}'")

    def _builtin_tools(self, ctx: BuildContext) -> list[dict[str, Any]]:
        """The tools the agent brings itself (``add_current_date_tool``, ``add_calculator_tool``)."""
        found = []
        for flag, component, name, description in BUILTIN_TOOLS:
            if self.params.get(flag):
                found.append({"component_type": component, "vertex_id": f"{ctx.vertex_id}.{name}", "params": {},
                              "tool_name": name, "tool_description": description, "approval_actions": []})
        return found

    def _system_prompt(self, ctx: BuildContext) -> str:
        prompt = as_text(self.value(ctx, "system_prompt", ""))
        settings = ctx.run.settings
        model = self.params.get("model") or (settings.openai_model if settings else None) or DEFAULT_MODEL
        return (prompt.replace("{current_date}", ctx.now().strftime("%Y-%m-%d %H:%M:%S UTC"))
                .replace("{model_name}", str(model)))

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        tools = tool_specs([*(ctx.inputs.get("tools") or []), *self._builtin_tools(ctx)])
        st = ctx.state
        if "messages" not in st:
            messages: list[dict[str, Any]] = []
            system = self._system_prompt(ctx)
            if system:
                messages.append({"role": "system", "content": system})
            n = int(self.params.get("n_messages") or 0)
            for msg in await earlier_messages(ctx, n) if n > 0 else []:
                messages.append({"role": "user" if msg.sender == "User" else "assistant", "content": msg.text})
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
            with ctx.run.model_call(model=client.model, number=st["model_calls"] + 1, endpoint=client.shown_url,
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
            # a standing approval in force (DESIGN §17, engine/standing.py) approves the call
            # without a pause, recorded as an approve by its maker; else a person is asked
            standing = await ctx.run.standing(request) if ctx.run.standing is not None else None
            if standing is not None:
                await self._run(ctx, tool, call, call["args"], "approved", authority=standing.get("authority"))
                return
            st["awaiting"] = {"request_id": request.request_id, "call_id": call["id"]}
            raise ctx.pause(request)
        await self._run(ctx, tool, call, call["args"], "ran")

    async def _apply_decision(self, ctx: BuildContext, tools: dict[str, dict[str, Any]], decision: Any) -> None:
        st = ctx.state
        call = st["queue"][0]
        values = decision.values or {}
        action = decision.action_id
        # the arguments the decision's receipt approved (docs/audit.md): _run compares them with
        # what it is about to send, right before the side effect
        approved = getattr(decision, "executed_sha256", None)
        if action == "approve":
            await self._run(ctx, tools[call["name"]], call, call["args"], "approved", approved=approved)
        elif action == "edit":
            args = tool_args(values.get("args")) or {}
            await self._run(ctx, tools[call["name"]], call, args, "edited", approved=approved)
        elif action == "reject":
            message = values.get("message")
            self._answer(st, call, message if isinstance(message, str) and message.strip() else REJECTED_DEFAULT, "rejected")
        elif action == "respond":
            self._answer(st, call, str(values.get("message") or ""), "responded")
        else:  # not reachable: apply_decision checks allowed_decisions
            raise ComponentError(f"Agent '{ctx.vertex_id}': unknown decision '{action}'", vertex_id=ctx.vertex_id)

    async def _run(self, ctx: BuildContext, tool: dict[str, Any], call: dict[str, Any], args: dict[str, Any], how: str,
                   *, authority: str | None = None, approved: str | None = None) -> None:
        """Build the tool's component with the arguments as its inputs, under a vertex id that
        names this call (so an HTTP tool's Idempotency-Key is per call and stable on retry).
        ``approved``: the sha256 of the arguments a person's decision approved (its receipt's
        ``executed_args``): other arguments are refused (ArgsMismatch ends the run), never run.
        ``authority``: a standing approval's, on the call's log entry."""
        st = ctx.state
        desc = tool["descriptor"]
        cls = get_component(str(desc["component_type"]))
        st["tool_runs"] += 1
        call_vertex = f"{desc.get('vertex_id')}#{ctx.vertex_id}.{st['tool_runs']}"
        component = cls(call_vertex, dict(desc.get("params") or {}))
        first = cls.output_defs(component.params)[0].name
        known = {i.name for i in cls.input_defs(component.params)}
        check_args(args, approved, tool=call["name"])  # the last step before the side effect
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
            self._answer(st, call, f"Error: {e.message}", "error", args, authority=authority)
            return
        except SignoffError:  # NestedGateError and the like end the run
            raise
        except Exception as e:
            self._answer(st, call, f"Error: {e.__class__.__name__}: {e}", "error", args, authority=authority)
            return
        self._answer(st, call, as_text((outputs or {}).get(first)), how, args, authority=authority)

    @staticmethod
    def _answer(st: dict[str, Any], call: dict[str, Any], content: str, how: str, args: dict[str, Any] | None = None,
                *, authority: str | None = None) -> None:
        st["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": content})
        entry = {"call_id": call["id"], "name": call["name"], "args": args if args is not None else call["args"],
                 "outcome": how, "result": content[:2000]}
        if authority is not None:  # approved by a standing approval, not by a person at this call
            entry["authority"] = authority
        st["log"].append(entry)
        st["queue"].pop(0)
