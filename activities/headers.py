"""A string carried in a Temporal header, as JSON text: written where a workflow's activation or
command is built (workflows/caller.py: who sent an Update or Signal; workflows/whose.py: whose
work an activity does), read by the handler or the activity. One encoding for both."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload

# the header of each activity the workflow starts that names the run's user (workflows/whose.py;
# read by activities/telemetry.py)
USER_HEADER = "signoff-user"


def text_payload(value: str) -> Payload:
    """``value`` as a header's payload."""
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


def header_text(headers: Any, name: str) -> str | None:
    """The string in the header ``name`` (None: no such header, or not a JSON string)."""
    payload = headers.get(name) if headers else None
    if payload is None:
        return None
    try:
        value = json.loads(payload.data)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


__all__ = ["USER_HEADER", "header_text", "text_payload"]
