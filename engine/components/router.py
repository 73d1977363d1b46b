"""Conditional Router: two branches, by equals / contains / regex."""

from __future__ import annotations

import re
from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text

OPERATORS = ("equals", "contains", "regex", "starts_with", "ends_with")


@register
class ConditionalRouter(Component):
    type_name = "ConditionalRouter"
    instant = True
    display_name = "If-Else"
    description = "Routes the input to true_result or false_result."
    inputs = [InputDef("input_text", required=True)]
    outputs = [OutputDef("true_result"), OutputDef("false_result")]
    params = [
        ParamDef("operator", "str", default="equals"),
        ParamDef("match_text", "str", default=""),
        ParamDef("case_sensitive", "bool", default=False),
    ]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> list[str]:
        problems = super().check_params(params)
        op = params.get("operator", "equals")
        if isinstance(op, str) and op not in OPERATORS:
            problems.append(f"param 'operator': '{op}' is not one of {', '.join(OPERATORS)}")
        if op == "regex" and isinstance(params.get("match_text"), str):
            try:
                re.compile(params["match_text"])
            except re.error as e:
                problems.append(f"param 'match_text': not a valid regex ({e})")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        raw = self.value(ctx, "input_text", "")
        text = as_text(raw)
        match = self.params.get("match_text") or ""
        case = bool(self.params.get("case_sensitive"))
        op = self.params.get("operator") or "equals"
        a, b = (text, match) if case else (text.lower(), match.lower())
        if op == "equals":
            ok = a == b
        elif op == "contains":
            ok = b in a
        elif op == "starts_with":
            ok = a.startswith(b)
        elif op == "ends_with":
            ok = a.endswith(b)
        else:
            ok = re.search(match, text, 0 if case else re.IGNORECASE) is not None
        if ok:
            ctx.stop("false_result")
            return {"true_result": raw}
        ctx.stop("true_result")
        return {"false_result": raw}
