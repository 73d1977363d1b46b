"""The validator of a decision's ``values`` (DESIGN §9): JSON Schema 2020-12 by the jsonschema
library, except ``pattern``, which runs on RE2. A flow is untrusted input: with Python's
backtracking ``re``, a pattern such as ``^(a+)+$`` and a long value would hold a worker (and
the API's pre-check) for hours; RE2 matches in time linear in the value. A pattern RE2 cannot
run (a backreference, a lookaround) is refused when the flow is saved.

Every other keyword is checked in time linear in the values: ``uniqueItems`` by hashing each
item's canonical JSON (jsonschema compares pairs when items do not sort, quadratic: a 70 KB
decision held the API 30 s), ``multipleOf`` exactly on any integer (jsonschema's float division
overflows on a 400-digit one). Arrays are bounded by the caller (:func:`too_many_items`)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the flow's problem, reported to its author


_NOCASE = re2.Options()
_NOCASE.log_errors = False
_NOCASE.case_sensitive = False


@functools.lru_cache(maxsize=512)
def compiled(pattern: str, case_sensitive: bool = True) -> Any:
    """``pattern`` compiled by RE2 (re2.error when RE2 cannot run it). Every pattern a flow or a
    person gives is matched with this, never with Python's ``re``."""
    return re2.compile(pattern, _OPTIONS if case_sensitive else _NOCASE)


def pattern_problem(pattern: Any) -> str | None:
    """Why ``pattern`` cannot be a pattern signoff matches with; None when it can."""
    if not isinstance(pattern, str):
        return "a pattern is a string"
    try:
        compiled(pattern)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        return f"pattern {pattern!r} is not one signoff runs ({reason}; RE2 syntax: no backreferences or lookarounds)"
    return None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and compiled(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema's equality: 1 and 1.0 are one number,
    true is not 1, objects compare by their members whatever their order."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float, Decimal)):
        if isinstance(value, float) and not math.isfinite(value):
            return ("number", repr(value))
        return ("number", Fraction(value))  # exact: 2**53 + 1 is not 2.0**53
    if isinstance(value, dict):
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(canonical(v) for v in value))
    return ("other", json.dumps(value, default=repr, sort_keys=True))


def _unique_items(validator: Any, unique: bool, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = canonical(item)
        if key in seen:
            yield ValidationError(f"{instance!r:.200} has non-unique elements")
            return
        seen.add(key)


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    """jsonschema's ``multipleOf``, but a number too large for a float (a 400-digit integer) is
    checked exactly, as a fraction, instead of raising OverflowError."""
    if not validator.is_type(instance, "number") or not validator.is_type(divisor, "number") or not divisor:
        return
    if isinstance(instance, float) and not math.isfinite(instance):
        return
    try:
        if isinstance(divisor, float) or isinstance(instance, float):
            quotient = instance / divisor
            failed = int(quotient) != quotient
        else:
            failed = bool(instance % divisor)
    except OverflowError:
        failed = (Fraction(instance) / Fraction(divisor)).denominator != 1
    if failed:
        yield ValidationError(f"{str(instance):.100} is not a multiple of {divisor}")


def too_many_items(values: Any, max_items: int) -> list[dict[str, str]]:
    """What makes ``values`` too large to check: an array longer than ``max_items`` (whatever
    ``maxItems`` its schema gives: the keywords cost ~0.1 ms an item, and a schema's own larger
    bound would let a 2 MiB body hold the API for a minute), or more than ten times
    ``max_items`` values in all (SIGNOFF_MAX_VALUE_ITEMS), as problems ``{loc, message, type}``:
    one walk of the values, before any keyword runs on them."""
    problems: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[str, ...]]] = [(values, ("values",))]
    seen, budget = 0, 10 * max_items
    while stack:
        value, loc = stack.pop()
        seen += 1
        if seen > budget:
            return [{"loc": "values", "type": "maxItems", "message":
                     f"hold more than {budget} values in all; the limit is {budget} (10 x SIGNOFF_MAX_VALUE_ITEMS)"}]
        if isinstance(value, list):
            if len(value) > max_items:
                problems.append({"loc": ".".join(loc), "type": "maxItems", "message":
                                 f"has {len(value)} items; the limit is {max_items} (SIGNOFF_MAX_VALUE_ITEMS)"})
                continue
            stack.extend((v, (*loc, str(i))) for i, v in enumerate(value))
        elif isinstance(value, dict):
            stack.extend((v, (*loc, str(k))) for k, v in value.items())
    return problems


ValuesValidator = validators.extend(Draft202012Validator, {"pattern": _pattern, "uniqueItems": _unique_items,
                                                           "multipleOf": _multiple_of})
