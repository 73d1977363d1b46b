"""MCP (DESIGN §15, docs/protocols.md): signoff as an MCP server, with the official ``mcp`` SDK.

Modules: ``elicit`` (what a gate's elicitation asks and what its answer decides: pure),
``server`` (:class:`SignoffMcp`: the tools and the run resource over RunService), ``http``
(Streamable HTTP at ``/mcp``) and ``stdio`` (``signoff mcp``)."""

from __future__ import annotations

from signoff.api.mcp.server import SignoffMcp

__all__ = ["SignoffMcp"]
