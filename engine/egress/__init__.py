"""Egress: what the server may dial on a flow's behalf.

A flow is untrusted input written by one user and run with the service's reach. Anything that
dials out for it (the HTTPRequest node, an Agent's model ``base_url``, a webhook URL, ...) goes
through an :class:`EgressPolicy` and :func:`egress_client`, so a flow cannot read the API, the
Temporal Web UI, a database or the cloud metadata service next to the worker. What is refused,
how ``SIGNOFF_EGRESS_ALLOW`` opens it, and how a caller wires it: docs/egress.md.

Modules: ``addresses`` (what an address really reaches), ``policy`` (the allow-list),
``resolve`` (names, bounded), ``transport`` (httpx and httpcore pinned to checked addresses),
``capped`` (bodies within a cap), ``errors``. This package imports neither Temporal nor FastAPI.
"""

from __future__ import annotations

from signoff.engine.egress.addresses import refusal_reason
from signoff.engine.egress.capped import CHUNK, read_capped
from signoff.engine.egress.errors import ENV_VAR, EgressDenied, EgressError, ResponseTooLarge
from signoff.engine.egress.policy import EgressPolicy
from signoff.engine.egress.resolve import Resolver, system_resolver
from signoff.engine.egress.transport import EgressNetworkBackend, EgressTransport, egress_client

__all__ = [
    "CHUNK",
    "ENV_VAR",
    "EgressDenied",
    "EgressError",
    "EgressNetworkBackend",
    "EgressPolicy",
    "EgressTransport",
    "Resolver",
    "ResponseTooLarge",
    "egress_client",
    "read_capped",
    "refusal_reason",
    "system_resolver",
]
