"""Reading and validating uploaded flow specs (JSON or YAML) with the API's limits.

The text is read by the engine's one parser (:func:`signoff.engine.spec.parse_text`: JSON, or
YAML 1.2 without anchors or aliases, nesting bounded), the same one ``signoff run`` and
``SIGNOFF_FLOWS_DIR`` use, so a file means the same everywhere."""

from __future__ import annotations

import asyncio
from typing import Any

from signoff.engine.errors import FlowInvalid
from signoff.engine.settings import Settings
from signoff.engine.spec import FlowSyntaxError, flow_document, parse_text
from signoff.engine.validate import parse_and_validate, too_many_nodes

from signoff.api.errors import FlowTooLarge, InvalidRequest
from signoff.api.limits import ID_MAX_CHARS, string_problems


def parse_body(raw: bytes, content_type: str | None, *, max_depth: int | None = None) -> dict[str, Any]:
    """JSON, or YAML when the content type says so (or the body is not JSON).

    Not a document (empty, not UTF-8, malformed, not an object): 422 INVALID_REQUEST. A document
    no flow may be (YAML anchors or aliases, nested deeper than ``max_depth``, default
    SIGNOFF_MAX_JSON_DEPTH, a value JSON cannot hold): 422 FLOW_INVALID naming where."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    syntax = "yaml" if "yaml" in ctype else "json" if "json" in ctype else None
    try:
        data = parse_text(raw, syntax=syntax, max_depth=max_depth)
    except FlowSyntaxError as e:
        raise InvalidRequest(f"Malformed flow: {e.message}; send a flow as JSON or YAML") from None
    if not isinstance(data, dict):
        raise InvalidRequest("A flow is an object with name, nodes and edges")
    return data


def validate_spec(spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Validate a flow spec; returns the spec to store. Raises FlowTooLarge over
    SIGNOFF_MAX_FLOW_NODES (checked first, the engine's rule), else FlowInvalid listing every
    problem: the strings (NUL, lone surrogates, SIGNOFF_MAX_STRING_CHARS), numbers (NaN, infinite)
    and nesting (SIGNOFF_MAX_JSON_DEPTH) of the whole spec, then the engine's validation. A Langflow
    export is converted first (every component or setting signoff cannot run is a FlowInvalid)."""
    spec = flow_document(spec)
    nodes = spec.get("nodes")
    too_many = too_many_nodes(len(nodes), settings.max_flow_nodes) if isinstance(nodes, list) else None
    if too_many:
        raise FlowTooLarge(too_many[:1].upper() + too_many[1:])
    # every string: no NUL (PostgreSQL text cannot hold it), no lone surrogate, at most
    # SIGNOFF_MAX_STRING_CHARS; no NaN; at most SIGNOFF_MAX_JSON_DEPTH deep: before anything else
    # reads the spec (the name check, the engine's recursive parts)
    problems = string_problems(spec, settings.max_string_chars, (), max_depth=settings.max_json_depth)
    if problems:
        raise FlowInvalid([{"where": p["loc"] or "flow", "message": f"{p['loc'] or 'flow'}: {p['message']}"}
                           for p in problems])
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > ID_MAX_CHARS:
        raise FlowInvalid([{"where": "name", "message": f"name must be a non-empty string of at most {ID_MAX_CHARS} characters"}])
    try:
        parse_and_validate(spec, max_nodes=settings.max_flow_nodes, min_remind_every=settings.min_remind_every_seconds)
    except FlowInvalid:
        raise
    except RecursionError:
        raise FlowInvalid([{"where": "flow", "message": "the flow is nested too deeply"}]) from None
    return spec


async def read_flow(raw: bytes, content_type: str | None, settings: Settings) -> dict[str, Any]:
    """An uploaded flow (the API's body, the flows page's file or pasted text) parsed and
    validated, off the event loop: parsing (YAML above all) takes time in proportion to the
    text, so one upload never stalls the others (or /health)."""
    return await asyncio.to_thread(lambda: validate_spec(parse_body(raw, content_type,
                                                                    max_depth=settings.max_json_depth), settings))
