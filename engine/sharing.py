"""What a user a flow is shared with may see of it and change in it (DESIGN §13). The owner may
do anything; a share holder may run the flow, but:

- reads it with its credentials masked (:func:`shared_view`): params a component declares
  ``secret`` (an HTTP Request's headers, an Agent's ``api_key``) show ``********`` for a
  literal value and only the name for a secret reference;
- tweaks only what the owner marked tweakable (:func:`untweakable`): a node's ``tweakable``
  list in the flow, else its component's default (a Chat Input's ``input_value`` and
  ``sender_name``, a Text Input's ``value``). So a share cannot redirect the owner's
  authenticated HTTP call to another server, or swap a prompt the owner reviewed;
- and never, whatever the owner marked: a credential param (it would choose what is sent), the
  destination (``url``, ``base_url``) of a node that carries a credential (it would choose
  where the owner's credential goes), or any value holding a secret reference (secrets resolve
  against the flow's owner: a share holder must not name them).
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from signoff.engine.components import get_component
from signoff.engine.langflow import tweak_names
from signoff.engine.secrets import MASK, secret_names

# Where a component sends what it carries: never a share holder's to choose on a node that
# carries a credential.
DESTINATIONS = frozenset({"url", "base_url"})


def shared_view(spec: dict[str, Any]) -> dict[str, Any]:
    """The flow as a share holder reads it: every credential masked, and so are the password and
    the query values of a destination URL (``https://user:pw@host/x?key=...``: where people put
    tokens they did not declare as headers)."""
    view = copy.deepcopy(spec)
    for node in view.get("nodes") or []:
        if not isinstance(node, dict) or not isinstance(node.get("params"), dict):
            continue
        cls = get_component(str(node.get("type")))
        if cls is not None:
            node["params"] = cls.masked_params(node["params"])
        for name in DESTINATIONS & node["params"].keys():
            if isinstance(node["params"][name], str):
                node["params"][name] = masked_url(node["params"][name])
    return view


def masked_url(url: str) -> str:
    """``url`` with its userinfo and its query values masked (names stay readable)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a URL anyone can use: nothing in it is shown
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{'[' + host + ']' if ':' in host else host}{port}"
    query = urlencode([(k, MASK) for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def tweakable(node: dict[str, Any]) -> set[str]:
    """The params of ``node`` (a spec node) a share holder may tweak."""
    own = node.get("tweakable")
    if isinstance(own, list):
        return {p for p in own if isinstance(p, str)}
    cls = get_component(str(node.get("type")))
    return set(cls.tweakable) if cls is not None else set()


def untweakable(spec: dict[str, Any], tweaks: dict[str, Any] | None) -> list[str]:
    """``node.param`` of every tweak a share holder may not make (unknown nodes are the spec's
    business: :func:`~signoff.engine.spec.apply_tweaks` names them)."""
    nodes = {n.get("id"): n for n in spec.get("nodes") or [] if isinstance(n, dict)}
    refused = []
    for node_id, params in (tweaks or {}).items():
        node = nodes.get(node_id)
        if node is None or not isinstance(params, dict):
            continue
        allowed = tweakable(node) - guarded(node)
        refused += [f"{node_id}.{name}" for name, value in tweak_names(str(node.get("type")), params).items()
                    if name not in allowed or secret_names(value)]
    return refused


def guarded(node: dict[str, Any]) -> set[str]:
    """The params of ``node`` no share holder may tweak, even when the owner marked them: its
    credentials, and its destinations when it carries one."""
    cls = get_component(str(node.get("type")))
    if cls is None:
        return set()
    secret = {p.name for p in cls.param_defs() if p.secret}
    params = node.get("params") if isinstance(node.get("params"), dict) else {}
    carries = any(params.get(name) for name in secret)
    return secret | (set(DESTINATIONS) if carries else set())
