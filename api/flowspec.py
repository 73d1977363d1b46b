"""Reading and validating uploaded flow specs (JSON or YAML) with the API's limits."""

from __future__ import annotations

import json
from typing import Any

import yaml

from signoff.engine.errors import FlowInvalid
from signoff.engine.settings import Settings

from signoff.api.errors import FlowTooLarge, InvalidRequest
from signoff.api.limits import ID_MAX_CHARS, string_problems


def parse_body(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """JSON, or YAML when the content type says so (or the body is not JSON)."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("The flow must be UTF-8 encoded JSON or YAML") from None
    if not text.strip():
        raise InvalidRequest("The request body is empty: send a flow as JSON or YAML")
    data: Any
    if "yaml" in ctype:
        data = _yaml(text)
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            if "json" in ctype:
                raise InvalidRequest(f"Malformed JSON: {e}") from None
            data = _yaml(text)
    if not isinstance(data, dict):
        raise InvalidRequest("A flow is an object with name, nodes and edges")
    return data


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidRequest(f"Malformed YAML: {str(e)[:300]}") from None
    except RecursionError:
        raise InvalidRequest("The YAML document is nested too deeply") from None


def validate_spec(spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Validate a flow spec; returns the spec to store. Raises FlowInvalid listing every
    problem, FlowTooLarge over settings.max_flow_nodes."""
    nodes = spec.get("nodes")
    if isinstance(nodes, list) and len(nodes) > settings.max_flow_nodes:
        raise FlowTooLarge(
            f"The flow has {len(nodes)} nodes; this deployment allows at most {settings.max_flow_nodes}"
            " (SIGNOFF_MAX_FLOW_NODES)"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > ID_MAX_CHARS:
        raise FlowInvalid([{"where": "name", "message": f"name must be a non-empty string of at most {ID_MAX_CHARS} characters"}])
    # every string: no NUL (PostgreSQL text cannot hold it), at most SIGNOFF_MAX_STRING_CHARS
    strings = string_problems(spec, settings.max_string_chars, ())
    if strings:
        raise FlowInvalid([{"where": p["loc"] or "flow", "message": f"{p['loc'] or 'flow'}: {p['message']}"}
                           for p in strings])
    from signoff.engine.validate import parse_and_validate

    try:
        parse_and_validate(spec)
    except FlowInvalid:
        raise
    except RecursionError:
        raise FlowInvalid([{"where": "flow", "message": "the flow is nested too deeply"}]) from None
    return spec
