"""The security tests run flows as a hostile user of a shared signoff would write them, in the
shared per-test world (tests/fixtures/world.py): a real Temporal dev server, a worker, SQLite
(PostgreSQL where a test is marked both_stores), real local HTTP servers."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.fixtures.world import (  # noqa: F401 - fixtures
    client,
    database_url,
    http_counter,
    make_flow,
    service,
    settings,
    store,
    user,
    worker,
)
from tests.helpers import LocalHTTPServer


class Recorder(LocalHTTPServer):
    """Records every request (path, headers, body); ``/redirect?to=URL`` answers 302 to it,
    ``/big/N`` streams N bytes."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path.startswith("/redirect"):
                    target = self.path.split("to=", 1)[1]
                    self.send_response(302)
                    self.send_header("location", target)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/big/"):
                    size = int(self.path.rsplit("/", 1)[1])
                    self.send_response(200)
                    self.send_header("content-type", "application/octet-stream")
                    self.send_header("content-length", str(size))
                    self.end_headers()
                    chunk = b"x" * 65536
                    try:
                        for _ in range(size // len(chunk)):
                            self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client stopped reading at its cap
                    return
                if self.path.startswith("/echo"):  # a server that echoes the request's headers
                    payload = json.dumps({"headers": dict(self.headers)}).encode()
                elif self.path.startswith("/v1/chat/completions"):  # a model endpoint an attacker runs
                    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": "thanks"},
                                                       "finish_reason": "stop"}]}).encode()
                else:
                    payload = json.dumps({"ok": True, "path": self.path}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture
def recorder():
    srv = Recorder()
    yield srv
    srv.close()


@pytest.fixture
def allowed(recorder, egress):
    """A recording server the deployment lets flows call (its port in SIGNOFF_EGRESS_ALLOW)."""
    egress.add(recorder)
    return recorder


@pytest.fixture
def refused():
    """A recording server on 127.0.0.1 that nobody allowed: a flow must never reach it."""
    srv = Recorder()
    yield srv
    srv.close()
