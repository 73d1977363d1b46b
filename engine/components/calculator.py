"""Calculator: safe arithmetic with the ast module (no eval)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from signoff.engine.components import register
from signoff.engine.components.base import BuildContext, Component, InputDef, OutputDef, as_text
from signoff.engine.errors import ComponentError

_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UN = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION = 1000
MAX_POWER = 1000
MAX_MAGNITUDE = 10**100


class CalcError(ValueError):
    pass


def evaluate(expression: str) -> int | float:
    """Evaluate +, -, *, /, //, %, ** and parentheses over numbers."""
    expression = expression.strip()
    if not expression:
        raise CalcError("the expression is empty")
    if len(expression) > MAX_EXPRESSION:
        raise CalcError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise CalcError(f"'{expression}' is not an arithmetic expression") from None

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UN:
            return _UN[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_POWER:
                raise CalcError(f"exponent larger than {MAX_POWER}")
            try:
                result = _BIN[type(node.op)](left, right)
            except ZeroDivisionError:
                raise CalcError("division by zero") from None
            except OverflowError:
                raise CalcError("the result is too large") from None
            if isinstance(result, complex):
                raise CalcError("the result is not a real number")
            if isinstance(result, int) and abs(result) > MAX_MAGNITUDE:
                raise CalcError("the result is too large")
            if isinstance(result, float) and not math.isfinite(result):
                raise CalcError("the result is too large")
            return result
        raise CalcError(f"'{ast.unparse(node)}' is not allowed (only numbers and + - * / // % **)")

    try:
        return ev(tree)
    except RecursionError:
        raise CalcError("the expression is nested too deeply") from None


@register
class Calculator(Component):
    type_name = "Calculator"
    instant = True
    display_name = "Calculator"
    description = "Evaluates an arithmetic expression, e.g. 2 * (3 + 4)."
    tool_capable = True
    inputs = [InputDef("expression", required=True)]
    outputs = [OutputDef("result")]

    async def build(self, ctx: BuildContext) -> dict[str, Any]:
        expression = as_text(self.value(ctx, "expression", ""))
        try:
            return {"result": evaluate(expression)}
        except CalcError as e:
            raise ComponentError(f"Calculator: {e}", vertex_id=ctx.vertex_id) from None
