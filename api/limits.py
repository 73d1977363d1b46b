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
- **No string may contain a lone UTF-16 surrogate** (``"\\ud800"`` in JSON): it is not text, it
  cannot be encoded as UTF-8, so no database, log or answer could hold it.
- **No number may be NaN or infinite** (Python's JSON reads ``NaN`` and ``1e400``): JSON cannot
  say them and the store refuses them.
- **Objects and lists nest at most** ``Settings.max_json_depth`` levels (``SIGNOFF_MAX_JSON_DEPTH``,
  32), the request body (or the flow spec) being level 1: deeper documents broke every
  serialiser downstream (pydantic gives up at 255 levels, ``json`` near 1,000).

Every check walks the value iteratively (a stack, no recursion), so any depth or size within
the body limit costs one pass. A violation is 422 ``INVALID_REQUEST`` (``FLOW_INVALID`` for a
flow) with ``problems: [{loc, message, type}]`` naming where, like any other validation error.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel

from signoff.engine.settings import Settings

from signoff.api.errors import SURROGATE_MESSAGE, InvalidRequest, printable

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


SURROGATE = re.compile("[\ud800-\udfff]")


def string_problems(value: Any, max_chars: int | None, loc: tuple[Any, ...], *, max_depth: int | None = None,
                    level: int = 1) -> list[dict[str, str]]:
    """Every problem of a JSON value (or a request model, walked field by field without dumping
    it): a string or object key with NUL or a lone surrogate, a string longer than ``max_chars``
    (None: no length check), a NaN or infinite number, an object or list nested deeper than
    ``max_depth`` (None: no depth check; ``value`` itself is at ``level``). As validation problems
    ``{loc, message, type}``, at most 20, in document order."""
    problems: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(value, loc, level)]
    while stack and len(problems) < 20:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                problems.append(_problem(where, NUL_MESSAGE, "string_nul"))
            if SURROGATE.search(item):
                problems.append(_problem(where, SURROGATE_MESSAGE, "string_surrogate"))
            if max_chars is not None and len(item) > max_chars:
                problems.append(_problem(
                    where, f"is {len(item)} characters long; the limit is {max_chars} (SIGNOFF_MAX_STRING_CHARS)",
                    "string_too_long"))
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                problems.append(_problem(where, "is not a JSON number (NaN or infinite)", "number_not_finite"))
            continue
        if isinstance(item, BaseModel):
            fields = type(item).model_fields
            item = {(f.alias or name): getattr(item, name) for name, f in fields.items()}
        if isinstance(item, dict):
            children: list[tuple[Any, Any]] = list(item.items())
            for key, _ in children:
                if isinstance(key, str) and NUL in key:
                    problems.append(_problem((*where, key), f"key {NUL_MESSAGE}", "string_nul"))
                if isinstance(key, str) and SURROGATE.search(key):
                    problems.append(_problem((*where, key), f"key {SURROGATE_MESSAGE}", "string_surrogate"))
        elif isinstance(item, (list, tuple)):
            children = list(enumerate(item))
        else:
            continue
        if max_depth is not None and depth > max_depth:
            problems.append(_problem(
                where, f"nests objects and lists more than {max_depth} levels deep; the limit is {max_depth}"
                       " (SIGNOFF_MAX_JSON_DEPTH)", "json_too_deep"))
            continue  # not a step further down
        stack.extend((sub, (*where, key), depth + 1) for key, sub in reversed(children))  # document order
    return problems


def _problem(loc: tuple[Any, ...], message: str, kind: str) -> dict[str, str]:
    return {"loc": ".".join(printable(str(p)) for p in loc), "message": message, "type": kind}


def check_body(body: BaseModel | dict[str, Any], settings: Settings, *, text: tuple[str, ...] = ()) -> None:
    """The limits every request body gets, in the route before anything else: raise 422
    INVALID_REQUEST listing NUL, lone surrogates, NaN/infinite numbers and nesting deeper than
    ``settings.max_json_depth`` anywhere, and strings longer than ``settings.max_string_chars``
    under the ``text`` fields (identifiers have their fixed limit in the request model). The
    model is walked as it is, never dumped (dumping a deep value is what used to fail)."""
    check_strings(body, settings.max_string_chars, text=text, max_depth=settings.max_json_depth)


def check_strings(body: BaseModel | dict[str, Any], max_chars: int, *, text: tuple[str, ...] = (),
                  max_depth: int | None = None) -> None:
    """Raise 422 INVALID_REQUEST listing the problems of a request body (see
    :func:`string_problems`): longer than ``max_chars`` only under the ``text`` fields. Prefer
    :func:`check_body`, which applies every limit from the settings."""
    if isinstance(body, BaseModel):
        body = {(f.alias or name): getattr(body, name) for name, f in type(body).model_fields.items()}
    problems: list[dict[str, str]] = []
    for key, value in body.items():
        # the body is level 1, so its fields' values are level 2
        problems += string_problems(value, max_chars if key in text else None, ("body", key), max_depth=max_depth,
                                    level=2)
    if problems:
        summary = "; ".join(f"{p['loc']}: {p['message']}" for p in problems[:5])
        raise InvalidRequest(f"Invalid request: {summary}", problems=problems)
