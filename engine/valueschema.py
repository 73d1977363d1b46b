"""The validator of a decision's ``values`` (DESIGN §9): JSON Schema 2020-12 by the jsonschema
library, except ``pattern``, which runs on RE2. A flow is untrusted input: with Python's
backtracking ``re``, a pattern such as ``^(a+)+$`` and a long value would hold a worker (and
the API's pre-check) for hours; RE2 matches in time linear in the value. A pattern RE2 cannot
run (a backreference, a lookaround) is refused when the flow is saved."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the flow's problem, reported to its author


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


def pattern_problem(pattern: Any) -> str | None:
    """Why ``pattern`` cannot be a values pattern; None when it can."""
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


ValuesValidator = validators.extend(Draft202012Validator, {"pattern": _pattern})
