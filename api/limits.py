"""The limits on what a request may carry, in one place (README, *Configuration*; docs/api.md).

- **Identifiers and names** (flow, job and session ids, idempotency keys, request and action
  ids, user and flow names): at most ``ID_MAX_CHARS`` characters, fixed — they are keys, not
  content. ``request_id`` (``{node_id}:{run_id}:{interrupt_id}``) may be ``REQUEST_ID_MAX_CHARS``.
- **Text** (``input_value``, every string inside ``tweaks`` and decision ``values``, every
  string of an uploaded flow spec): at most ``Settings.max_string_chars``
  (``SIGNOFF_MAX_STRING_CHARS``), the one knob for content size; the body as a whole is bounded
  by ``SIGNOFF_MAX_BODY_BYTES`` (413).
- **No string may contain NUL** (``\\u0000``), on either backend: PostgreSQL cannot store it in a
  text column (ids, names, chat messages), and a request must mean the same on SQLite.

A violation is 422 ``INVALID_REQUEST`` with ``problems: [{loc, message, type}]``, like any other
validation error.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from signoff.api.errors import InvalidRequest

ID_MAX_CHARS = 200
REQUEST_ID_MAX_CHARS = 1000
NUL = "\x00"
NUL_MESSAGE = "must not contain the NUL character (\\u0000)"


def _no_nul(value: str) -> str:
    if NUL in value:
        raise ValueError(NUL_MESSAGE)
    return value


NoNul = AfterValidator(_no_nul)
"""For pydantic fields and query parameters: ``Annotated[str, Field(...), NoNul]``."""

IdStr = Annotated[str, NoNul]


def string_problems(value: Any, max_chars: int | None, loc: tuple[Any, ...]) -> list[dict[str, str]]:
    """Every string (and object key) in a JSON value that contains NUL or is longer than
    ``max_chars`` (None: NUL only); as validation problems ``{loc, message, type}``."""
    problems: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, loc)]
    while stack and len(problems) < 20:
        item, where = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                problems.append(_problem(where, NUL_MESSAGE, "string_nul"))
            if max_chars is not None and len(item) > max_chars:
                problems.append(_problem(
                    where, f"is {len(item)} characters long; the limit is {max_chars} (SIGNOFF_MAX_STRING_CHARS)",
                    "string_too_long"))
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and NUL in key:
                    problems.append(_problem((*where, key), f"key {NUL_MESSAGE}", "string_nul"))
            stack.extend((sub, (*where, key)) for key, sub in reversed(item.items()))  # document order
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, (*where, i)) for i, sub in reversed(list(enumerate(item))))
    return problems


def _problem(loc: tuple[Any, ...], message: str, kind: str) -> dict[str, str]:
    return {"loc": ".".join(str(p).replace(NUL, "\\u0000") for p in loc), "message": message, "type": kind}


def check_strings(body: dict[str, Any], max_chars: int, *, text: tuple[str, ...] = ()) -> None:
    """Raise 422 INVALID_REQUEST listing the strings of a request body that break the limits:
    NUL anywhere; longer than ``max_chars`` under the ``text`` fields (identifiers have their
    fixed limit in the request model)."""
    problems = []
    for key, value in body.items():
        problems += string_problems(value, max_chars if key in text else None, ("body", key))
    if problems:
        summary = "; ".join(f"{p['loc']}: {p['message']}" for p in problems[:5])
        raise InvalidRequest(f"Invalid request: {summary}", problems=problems)
