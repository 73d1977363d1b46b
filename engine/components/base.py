"""The component contract.

A component declares its inputs (fed by an edge, or set as a param of the same name), its
outputs and its params, and has one ``async build(ctx)``. ``build`` returns a dict
``{output_name: value}``; values must be JSON-serialisable (they go into checkpoints). It can
also, through its :class:`BuildContext`:

- stop outputs (``ctx.stop("true_result")``): the branches behind them do not run;
- keep private state across pauses (``ctx.state``, a JSON dict saved in the checkpoint);
- pause (``raise ctx.pause(request)``, or return ``ctx.pause(request)``): the run yields
  with that pending request; on resume the component is built again and finds the decision in
  ``ctx.decision``. A component may pause any number of times in one run, each time with a new
  request id (``ctx.request_id(interrupt_id)``).

Ports can depend on params (Prompt variables, Human Input branches): override
``input_defs(params)`` / ``output_defs(params)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from signoff.engine.context import RunContext
from signoff.engine.models import AppliedDecision, PendingRequest
from signoff.engine.secrets import is_secret_ref, masked


@dataclass(frozen=True)
class InputDef:
    name: str
    required: bool = False
    many: bool = False  # accepts several edges (values arrive as a list)
    description: str = ""


@dataclass(frozen=True)
class OutputDef:
    name: str
    description: str = ""


# Param types: str, int, float, number (int|float), bool, list, dict, str_list, any
@dataclass(frozen=True)
class ParamDef:
    name: str
    type: str = "str"
    required: bool = False
    default: Any = None
    description: str = ""
    # A credential: its value may be a secret reference ({"$secret": "NAME"}; for an object,
    # each value may be one), and it is masked where anyone but the owner reads the flow.
    secret: bool = False


_TYPE_CHECKS: dict[str, Any] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
    "str_list": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "any": lambda v: True,
}

_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "number": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "an object",
    "str_list": "a list of strings",
}

TOOL_APPROVAL_ACTIONS = ("approve", "edit", "reject", "respond")

# Params every component takes besides its own and its inputs' values.
COMMON_PARAMS = frozenset({"display_name"})

# Params every tool-capable component accepts (DESIGN §4).
TOOL_PARAMS = [
    ParamDef("tool_name", "str", description="The tool's name as the model sees it."),
    ParamDef("tool_description", "str", description="What the tool does, for the model."),
    ParamDef("approval_actions", "str_list", default=[], description="Gate each call: approve, edit, reject, respond."),
]


class PauseRequested(Exception):
    """Raised (or returned) by a component to pause the run with ``request``. Never escapes
    :func:`engine.run.build_vertices`: it comes back in the layer result."""

    def __init__(self, request: PendingRequest, state: dict[str, Any] | None = None, outputs: dict[str, Any] | None = None):
        self.request = request
        self.state = state
        self.outputs = outputs or {}
        super().__init__(request.request_id)


class Component:
    """Base class. Subclasses set the class attributes and implement :meth:`build`."""

    type_name: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    inputs: ClassVar[list[InputDef]] = []
    outputs: ClassVar[list[OutputDef]] = []
    params: ClassVar[list[ParamDef]] = []
    # True for components that can be handed to an Agent as a tool (adds the `tool` output).
    tool_capable: ClassVar[bool] = False
    # True for components that end a flow (their output is what the API shows).
    terminal: ClassVar[bool] = False
    # True for components that can pause the run.
    can_pause: ClassVar[bool] = False
    # True for a gate: a component whose only job is to ask a person (Human Input). A flow
    # with a gate wired to a consumer always runs on Temporal; its trace shows the gate span
    # ("Human In The Loop — {label}") in place of the gate's builds (the pause and the rebuild).
    gate: ClassVar[bool] = False
    # True for components that do no external I/O (at most a store write with a deterministic
    # id): after a decision, layers made only of these are built inside the resume activity
    # (docs/temporal.md). Anything that dials out, calls a model or runs a flow is not instant.
    instant: ClassVar[bool] = False
    # What a terminal component's output is in the API's ``outputs`` (``message`` or ``text``).
    output_kind: ClassVar[str] = "text"
    # What a person is shown of this component's output, if anything: "message" (a chat message,
    # kept in the session's history) or "text" (AG-UI tells both as a text message).
    shows: ClassVar[str | None] = None
    # The params a user the flow is shared with may set by tweaks (the owner may set any); a
    # node's own ``tweakable`` list in the flow replaces this default.
    tweakable: ClassVar[tuple[str, ...]] = ()

    # ---- declared ports (may depend on params)
    @classmethod
    def input_defs(cls, params: dict[str, Any]) -> list[InputDef]:
        return list(cls.inputs)

    @classmethod
    def output_defs(cls, params: dict[str, Any]) -> list[OutputDef]:
        outs = list(cls.outputs)
        if cls.tool_capable:
            outs.append(OutputDef("tool", "This component as an Agent tool."))
        return outs

    @classmethod
    def param_defs(cls) -> list[ParamDef]:
        defs = list(cls.params)
        if cls.tool_capable:
            defs.extend(TOOL_PARAMS)
        return defs

    @classmethod
    def masked_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The params as anyone but the flow's owner may read them: credentials masked."""
        secret = {p.name for p in cls.param_defs() if p.secret}
        return {k: masked(v) if k in secret else v for k, v in params.items()}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        """Problems with the params (missing required, wrong type); [] when fine. Subclasses
        extend this for their own rules."""
        problems: list[str] = []
        input_names = {i.name for i in cls.input_defs(params)}
        known = {p.name for p in cls.param_defs()} | input_names | COMMON_PARAMS
        # a misspelt param (``aprovers``) must never run a gate unguarded: every param is one the
        # component knows, or the value of one of its inputs
        for name in sorted(set(params) - known):
            problems.append(f"unknown param '{name}' ({cls.type_name} takes: {', '.join(sorted(known))})")
        for p in cls.param_defs():
            if p.name not in params or params[p.name] is None:
                if p.required and p.name not in input_names:
                    problems.append(f"missing required param '{p.name}'")
                continue
            check = _TYPE_CHECKS.get(p.type, _TYPE_CHECKS["any"])
            value = params[p.name]
            if p.secret and is_secret_ref(value):
                continue
            if p.secret and p.type == "dict" and isinstance(value, dict):
                bad = [k for k, v in value.items() if not (isinstance(v, str) or is_secret_ref(v))]
                for k in bad:
                    problems.append(f"param '{p.name}': the value of {k!r} must be text or a secret "
                                    '({"$secret": "NAME"})')
                continue
            if not check(value):
                problems.append(
                    f"param '{p.name}' must be {_TYPE_WORDS.get(p.type, p.type)}, got {type(params[p.name]).__name__}"
                )
        if cls.tool_capable:
            for a in params.get("approval_actions") or []:
                if isinstance(a, str) and a not in TOOL_APPROVAL_ACTIONS:
                    problems.append(
                        f"approval_actions: unknown action '{a}' (use any of {', '.join(TOOL_APPROVAL_ACTIONS)})"
                    )
        return problems

    # ---- instance
    def __init__(self, vertex_id: str, params: dict[str, Any]) -> None:
        self.vertex_id = vertex_id
        defaults = {p.name: p.default for p in self.param_defs() if p.default is not None}
        self.params: dict[str, Any] = {**_copy(defaults), **params}

    async def build(self, ctx: "BuildContext") -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    async def build_outputs(self, ctx: "BuildContext", wanted: set[str]) -> dict[str, Any]:
        """Build, then add the ``tool`` descriptor when an edge consumes it. Called by the engine."""
        outputs: dict[str, Any] = {}
        if wanted - {"tool"} or not wanted:
            outputs = await self.build(ctx) or {}
        if "tool" in wanted and self.tool_capable:
            outputs["tool"] = self.tool_descriptor(ctx)
        return outputs

    def tool_descriptor(self, ctx: "BuildContext") -> dict[str, Any]:
        """A serialisable description of this component as an Agent tool; the Agent rebuilds the
        component from it (``get_component(type)(vertex_id, params)``) to call it."""
        return {
            "component_type": self.type_name,
            "vertex_id": self.vertex_id,
            "params": _copy(self.params),
            "tool_name": self.params.get("tool_name") or self.vertex_id,
            "tool_description": self.params.get("tool_description") or self.description,
            "approval_actions": list(self.params.get("approval_actions") or []),
        }

    # ---- helpers for subclasses
    def value(self, ctx: "BuildContext", name: str, default: Any = None) -> Any:
        """An input fed by an edge wins over a param of the same name."""
        if name in ctx.inputs and ctx.inputs[name] is not None:
            return ctx.inputs[name]
        v = self.params.get(name)
        return default if v is None else v


def _copy(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


@dataclass
class BuildContext:
    """What one vertex build sees: its resolved inputs, the run, its private state, the decision
    injected for it, and the switches to stop outputs or pause."""

    vertex_id: str
    component_type: str
    inputs: dict[str, Any]
    run: RunContext
    state: dict[str, Any] = field(default_factory=dict)
    decision: AppliedDecision | None = None
    decisions: list[AppliedDecision] = field(default_factory=list)  # all applied to this vertex, oldest first
    has_consumers: bool = True
    wanted_outputs: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    skipped: bool = False
    # A tool call: the inputs are what a model chose (an Agent's tool call), not the flow's edges.
    model_chosen: bool = False

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def now(self):
        return self.run.now()

    def stop(self, *outputs: str) -> None:
        self.stopped.update(outputs)

    def skip(self) -> None:
        """Mark the vertex as skipped (built, no outputs)."""
        self.skipped = True

    def request_id(self, interrupt_id: str | None = None) -> str:
        base = f"{self.vertex_id}:{self.run.run_id}"
        return base if interrupt_id is None else f"{base}:{interrupt_id}"

    def pause(self, request: PendingRequest, *, outputs: dict[str, Any] | None = None) -> PauseRequested:
        """Build the pause signal; ``raise`` or ``return`` it. ``ctx.state`` is saved with it."""
        return PauseRequested(request, state=self.state, outputs=outputs)


def as_text(value: Any) -> str:
    """The text of a value flowing on an edge: a message's text, a string, or JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "text" in value and isinstance(value["text"], str):
        return value["text"]
    if isinstance(value, list):
        return "\n".join(as_text(v) for v in value)
    if isinstance(value, (int, float, bool)):
        return json.dumps(value) if isinstance(value, bool) else str(value)
    return json.dumps(value, default=str)
