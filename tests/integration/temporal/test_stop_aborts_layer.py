"""A stop cancels the layer in flight: the run_layer activity blocked in an HTTPRequest learns of
the cancellation from its heartbeat (within one heartbeat interval, about 4 s, after the stop)
and its request is aborted; the job ends ``cancelled`` with one ``run_cancelled``. A local HTTP
server that records whether the client went away is the probe. SQLite and PostgreSQL, real
Temporal, with a replay of the history."""

from __future__ import annotations

import select
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from signoff.engine.models import JobStatus
from tests.helpers import LocalHTTPServer, eventually
from tests.integration.temporal.test_replay import held_http_flow
from tests.integration.temporal.test_stop_races import replayer

# ---- 4. a stop cancels the layer in flight ----------------------------------------------------


class AbortProbe(LocalHTTPServer):
    """A local HTTP server whose ``/hold/...`` answers only when ``release`` is set, and records
    whether the client went away (closed the connection) while it held the request."""

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.aborted: set[str] = set()
        self.answered: set[str] = set()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                outer.started.add(self.path)
                while not outer.release.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable:
                        try:
                            gone = self.connection.recv(1, socket.MSG_PEEK) == b""
                        except OSError:
                            gone = True
                        if gone:
                            outer.aborted.add(self.path)
                            return
                body = b"late"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                outer.answered.add(self.path)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture
def probe(egress):
    srv = AbortProbe()
    egress.add(srv)
    yield srv
    srv.close()


async def test_a_stop_aborts_the_http_request_of_the_layer_in_flight(worker, service, store, user, make_flow, probe):
    flow = await make_flow(held_http_flow(f"{probe.url}/hold/stop"))
    job, _ = await service.submit(user, flow, input_value="x", session_id=None, tweaks=None, idempotency_key=None,
                                  mode="background")
    await eventually(lambda: "/hold/stop" in probe.started, what="the held call")
    stopped = await service.stop(user, job.job_id)
    assert stopped.status == JobStatus.cancelled
    await eventually(lambda: "/hold/stop" in probe.aborted, timeout=30, what="the request aborted by the stop")
    assert "/hold/stop" not in probe.answered
    assert [(e.event, e.data) for e in await store.read_events(job.job_id)] == [
        ("run_cancelled", {"reason": "stopped"})]
    handle = service.client.get_workflow_handle(job.job_id)
    await replayer().replay_workflow(await handle.fetch_history())
