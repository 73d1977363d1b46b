"""Conditional Router (If-Else): two branches, by comparing the input with a text.

The operators are Langflow's If-Else operators: equals, not_equals, contains, starts_with,
ends_with, regex (found anywhere), regex_match (matches at the start, as Langflow's ``regex``),
and the numeric less_than, less_than_or_equal, greater_than, greater_than_or_equal (false when
either side is not a number). The routed value is the input, or ``true_case_message`` /
``false_case_message`` when set (an edge or a param), as Langflow's Case True / Case False.

The regex operators match with RE2 (linear in the text): a pattern is the flow's, the text is
what anyone running it types, and Python's backtracking ``re`` took 8 s on ``^(a+)+$`` against 29
characters (each one more doubles it). A pattern RE2 cannot run (backreferences, lookarounds) is
refused when the flow is saved; one that arrives on an edge matches nothing."""

from __future__ import annotations

import math
from typing import Any

import re2

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, ParamDef, as_text
from signoff.engine.valueschema import compiled, pattern_problem

NUMERIC = ("less_than", "less_than_or_equal", "greater_than", "greater_than_or_equal")
OPERATORS = ("equals", "not_equals", "contains", "regex", "regex_match", "starts_with", "ends_with", *NUMERIC)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def matches(op: str, text: str, match: str, case_sensitive: bool, *, cache: bool = True) -> bool:
    """Whether ``text`` passes ``op`` against ``match``. ``cache`` False: a pattern that came on an
    edge (anyone's text) is compiled for this match only, not kept."""
    if op in ("regex", "regex_match"):  # RE2 (re2.error when it cannot run the pattern)
        pattern = compiled(match, case_sensitive) if cache else compiled.__wrapped__(match, case_sensitive)
        found = pattern.match(text) if op == "regex_match" else pattern.search(text)
        return found is not None
    if op in NUMERIC:
        a, b = _number(text), _number(match)
        if a is None or b is None:
            return False
        return {"less_than": a < b, "less_than_or_equal": a <= b,
                "greater_than": a > b, "greater_than_or_equal": a >= b}[op]
    a, b = (text, match) if case_sensitive else (text.lower(), match.lower())
    if op == "equals":
        return a == b
    if op == "not_equals":
        return a != b
    if op == "contains":
        return b in a
    if op == "starts_with":
        return a.startswith(b)
    return a.endswith(b)


@register
class ConditionalRouter(Component):
    type_name = "ConditionalRouter"
    instant = True
    display_name = "If-Else"
    description = "Routes the input to true_result or false_result."
    inputs = [
        InputDef("input_text", required=True),
        InputDef("match_text", description="The text to compare with (an edge, else the param)."),
        InputDef("true_case_message", description="Sent on true_result instead of the input, when set."),
        InputDef("false_case_message", description="Sent on false_result instead of the input, when set."),
    ]
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
        if op in ("regex", "regex_match") and isinstance(params.get("match_text"), str):
            if problem := pattern_problem(params["match_text"]):
                problems.append(f"param 'match_text': {problem}")
        return problems

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        raw = self.value(ctx, "input_text", "")
        match = as_text(self.value(ctx, "match_text", ""))
        op = self.params.get("operator") or "equals"
        try:
            ok = matches(op, as_text(raw), match, bool(self.params.get("case_sensitive")),
                         cache=match == self.params.get("match_text"))
        except re2.error:  # a pattern that came in on an edge: no match, as Langflow's If-Else
            ok = False
        chosen, other = ("true_result", "false_result") if ok else ("false_result", "true_result")
        override = self.value(ctx, "true_case_message" if ok else "false_case_message")
        ctx.stop(other)
        return {chosen: override if override not in (None, "") and as_text(override) else raw}
