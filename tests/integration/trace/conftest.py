"""The trace tests' world: the shared per-test world (tests/fixtures/world.py) whose worker runs
on a client carrying Temporal's tracing interceptor, and a real OTLP/HTTP receiver on 127.0.0.1 (protobuf at /v1/traces)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from signoff.engine.models import SpanRecord
from signoff.service import with_converter
from signoff.service import with_tracing
from tests.fixtures.world import (  # noqa: F401 - fixtures
    database_url,
    make_flow,
    service,
    settings,
    store,
    user,
    worker,
)
from tests.helpers import LocalHTTPServer, eventually, wait_status  # noqa: F401 - used by the tests


def gate_flow(decisions: list[str] | None = None) -> dict[str, Any]:
    """Chat Input → Prompt → gate → (Approve: Prompt → Chat Output | Reject: Chat Output |
    Request Changes: Chat Output)."""
    return {
        "name": "Refund approval",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "p", "type": "Prompt", "params": {"template": "Refund {q}?"}},
            {"id": "gate", "type": "HumanInput",
             "params": {"decisions": decisions or ["Approve", "Reject", "Request Changes"]}},
            {"id": "note", "type": "Prompt", "params": {"template": "Approved: {x}", "display_name": "Approval note"}},
            {"id": "ok", "type": "ChatOutput", "params": {"display_name": "Sent"}},
            {"id": "no", "type": "ChatOutput", "params": {"text": "Refund refused", "display_name": "Refused"}},
            {"id": "ch", "type": "ChatOutput", "params": {"text": "Please change it", "display_name": "Changes"}},
        ],
        "edges": [
            {"from": "ask.message", "to": "p.q"},
            {"from": "p.prompt", "to": "gate.prompt"},
            {"from": "gate.branch_approve", "to": "note.x"},
            {"from": "note.prompt", "to": "ok.input_value"},
            {"from": "gate.branch_reject", "to": "no.input_value"},
            {"from": "gate.branch_request_changes", "to": "ch.input_value"},
        ],
    }


# the spans expected after each decision, in order (component and gate spans under the root)
EXPECTED = {
    "approve": ["Chat Input", "Prompt", "Human In The Loop — Approve", "Approval note", "Sent"],
    "reject": ["Chat Input", "Prompt", "Human In The Loop — Reject", "Refused"],
    "request_changes": ["Chat Input", "Prompt", "Human In The Loop — Request Changes", "Changes"],
}


def story(spans: list[SpanRecord]) -> list[str]:
    """The names of the root's children in start order; asserts there is exactly one root."""
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1, [(s.name, s.span_id) for s in roots]
    (root,) = roots
    children = [s for s in spans if s.parent_id == root.span_id]
    assert len(children) == len(spans) - 1, "every span hangs under the run's root"
    return [s.name for s in sorted(children, key=lambda s: (s.start_time, s.span_id))]


class OTLPReceiver(LocalHTTPServer):
    """A real OTLP/HTTP endpoint: POST /v1/traces with an ExportTraceServiceRequest (protobuf,
    gzip or not). Keeps every span as a dict."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                got = []
                for rs in req.resource_spans:
                    service_name = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            attrs = {a.key: _any_value(a.value) for a in sp.attributes}
                            got.append({
                                "trace_id": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                                "parent_id": sp.parent_span_id.hex() or None, "name": sp.name,
                                "scope": ss.scope.name, "service": service_name, "status": sp.status.code,
                                "attributes": attrs,
                            })
                with outer.lock:
                    outer.spans.extend(got)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)
        self.endpoint = self.url

    def of_trace(self, trace_hex: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_hex]

    def close(self) -> None:
        super().close()


def _any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@pytest.fixture
def otlp() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver()
    yield r
    r.close()


@pytest_asyncio.fixture
async def client(temporal_client):
    return with_tracing(with_converter(temporal_client))
