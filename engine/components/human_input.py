"""Human Input: pauses the run until a person picks one of the decisions (DESIGN §4)."""

from __future__ import annotations

from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.models import EXPIRED_ACTION, FALLBACK_ACTION, Option, PendingRequest

UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
DEFAULT_DECISIONS = ["Approve", "Reject"]


def action_id(label: str) -> str:
    return label.strip().lower().replace(" ", "_")


def timeout_seconds(value: Any) -> float:
    """``{"value": 3, "unit": "Days"}`` or a number of seconds; 0 / None waits forever."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise ValueError("timeout must be a number of seconds or {value, unit}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("timeout must not be negative")
        return float(value)
    if isinstance(value, dict):
        v = value.get("value", 0)
        unit = str(value.get("unit", "Seconds")).strip().lower()
        if unit not in UNITS:
            raise ValueError(f"timeout unit '{value.get('unit')}' is not one of Seconds, Minutes, Hours, Days")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError("timeout value must be a number >= 0")
        return float(v) * UNITS[unit]
    raise ValueError("timeout must be a number of seconds or {\"value\": 3, \"unit\": \"Days\"}")


@register
class HumanInput(Component):
    type_name = "HumanInput"
    display_name = "Human Input"
    description = "Waits for a person to choose; the chosen branch runs, the others stop."
    can_pause = True
    gate = True
    instant = True
    inputs = [InputDef("prompt")]
    params = [
        ParamDef("prompt", "str", description="What the person is asked (default: the input's text)."),
        ParamDef("decisions", "str_list", default=DEFAULT_DECISIONS),
        ParamDef("timeout", "any", default=0),
        ParamDef("enable_fallback", "bool", default=False),
    ]

    @classmethod
    def decisions(cls, params: dict[str, Any]) -> list[str]:
        d = params.get("decisions")
        if d is None:
            return list(DEFAULT_DECISIONS)
        return [x for x in d if isinstance(x, str)] if isinstance(d, list) else []

    @classmethod
    def output_defs(cls, params: dict[str, Any]) -> list[OutputDef]:
        outs = [OutputDef(f"branch_{action_id(label)}", label) for label in cls.decisions(params) if action_id(label)]
        if params.get("enable_fallback") is True:
            outs.append(OutputDef(f"branch_{FALLBACK_ACTION}", "Taken when the answer comes too late"))
        return outs

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        d = params.get("decisions")
        if d is not None and isinstance(d, list):
            if not d:
                problems.append("decisions: give at least one decision label")
            seen: set[str] = set()
            for label in d:
                if not isinstance(label, str):
                    continue
                aid = action_id(label)
                if not aid:
                    problems.append("decisions: a label is empty")
                elif aid in seen:
                    problems.append(f"decisions: two labels give the action id '{aid}'")
                elif aid in (FALLBACK_ACTION, EXPIRED_ACTION):
                    problems.append(f"decisions: '{label}' is reserved")
                seen.add(aid)
        try:
            timeout_seconds(params.get("timeout"))
        except ValueError as e:
            problems.append(f"param 'timeout': {e}")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        labels = self.decisions(self.params)
        branches = [f"branch_{action_id(label)}" for label in labels]
        if self.params.get("enable_fallback"):
            branches.append(f"branch_{FALLBACK_ACTION}")
        if not ctx.has_consumers:
            ctx.skip()  # nothing waits on the answer: do not block the run
            return {}
        incoming = ctx.inputs.get("prompt")
        if ctx.decision is None:
            prompt = self.params.get("prompt") or as_text(incoming) or "Please decide."
            request = PendingRequest(
                request_id=ctx.request_id(),
                kind="node_input",
                prompt=prompt,
                options=[Option(action_id=action_id(label), label=label) for label in labels],
                allowed_decisions=[action_id(label) for label in labels],
                timeout_seconds=timeout_seconds(self.params.get("timeout")),
                fallback_action=FALLBACK_ACTION if self.params.get("enable_fallback") else None,
                paused_at=ctx.now(),
            )
            raise ctx.pause(request)
        chosen = f"branch_{ctx.decision.action_id}"
        ctx.stop(*[b for b in branches if b != chosen])
        if chosen not in branches:  # __expired__: no branch runs
            return {}
        payload = incoming if incoming is not None else (self.params.get("prompt") or "")
        return {chosen: payload}
