"""The application layer between the HTTP API (and the pages) and the runtimes: submit, resume,
stop, supersede and the end of a run, each written once (:class:`RunService`), over one
:class:`RunBackend` interface with two implementations, Temporal and inline. The CLI and the
process wiring (``signoff dev``, ``signoff api``, ``signoff worker``) sit on top of it."""

from signoff.service.backend import RunBackend
from signoff.service.inline import InlineBackend
from signoff.service.runs import RunService
from signoff.service.temporal import TemporalBackend, connect_client, with_converter, with_tracing

__all__ = ["InlineBackend", "RunBackend", "RunService", "TemporalBackend", "connect_client", "with_converter",
           "with_tracing"]
