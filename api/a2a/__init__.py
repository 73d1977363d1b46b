"""A2A (DESIGN §15, docs/protocols.md): each flow as an A2A agent, with the official ``a2a-sdk``.

Modules: ``translate`` (a run as a task, a message as an input or a decision: pure),
``handler`` (:class:`SignoffA2A`: the SDK's request handler over RunService) and ``routes``
(the JSON-RPC endpoint and the agent card under ``/a2a/{flow_id}``)."""

from __future__ import annotations

from signoff.api.a2a.handler import SignoffA2A

__all__ = ["SignoffA2A"]
