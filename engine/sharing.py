"""What a user a flow is shared with may see of it and change in it (DESIGN §13). The owner may
do anything; a share holder may run the flow, but:

- reads it with its credentials masked (:func:`shared_view`): params a component declares
  ``secret`` (an HTTP Request's headers, an Agent's ``api_key``) show ``********`` for a
  literal value and only the name for a secret reference;
- tweaks only what the owner marked tweakable (:func:`untweakable`): a node's ``tweakable``
  list in the flow, else its component's default (a Chat Input's ``input_value`` and
  ``sender_name``, a Text Input's ``value``). So a share cannot redirect the owner's
  authenticated HTTP call to another server, or swap a prompt the owner reviewed.
"""

from __future__ import annotations

import copy
from typing import Any

from signoff.engine.components import get_component


def shared_view(spec: dict[str, Any]) -> dict[str, Any]:
    """The flow as a share holder reads it: every credential masked."""
    view = copy.deepcopy(spec)
    for node in view.get("nodes") or []:
        if not isinstance(node, dict) or not isinstance(node.get("params"), dict):
            continue
        cls = get_component(str(node.get("type")))
        if cls is not None:
            node["params"] = cls.masked_params(node["params"])
    return view


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
        allowed = tweakable(node)
        refused += [f"{node_id}.{name}" for name in params if name not in allowed]
    return refused
