"""The inline tests' world: the shared per-test world (tests/fixtures/world.py) with fast
leases and heartbeats, a worker (for the flows that still run on Temporal, and the reference
runs that inline runs are compared with), and the flows."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.engine.settings import Settings
from tests.fixtures.world import (  # noqa: F401 - fixtures
    client,
    database_url,
    http_counter,
    make_flow,
    service,
    store,
    user,
    worker,
)


@pytest.fixture
def settings(tmp_path, temporal_server, task_queue, database_url, egress) -> Settings:
    return egress.bind(Settings(
        home=tmp_path / "home",
        database_url=database_url,
        temporal_address=temporal_server.address,
        task_queue=task_queue,
        inline_lease_seconds=5,
        inline_heartbeat_seconds=0.2,
        inline_sweep_seconds=0.5,
    ))


def chat_flow(name: str = "Greeting") -> dict[str, Any]:
    """Chat Input → Prompt → Chat Output: three layers, no gate."""
    return {
        "name": name,
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "p", "type": "Prompt", "params": {"template": "You said: {q}"}},
            {"id": "out", "type": "ChatOutput", "params": {"display_name": "Answer"}},
        ],
        "edges": [{"from": "ask.message", "to": "p.q"}, {"from": "p.prompt", "to": "out.input_value"}],
    }


def failing_flow() -> dict[str, Any]:
    """Chat Input → Calculator (1/0: a component error) → Chat Output."""
    return {
        "name": "Divide",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "calc", "type": "Calculator", "params": {"expression": "1/0"}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [{"from": "ask.message", "to": "out.input_value"}, {"from": "calc.result", "to": "out.input_value"}],
    }


def blocking_flow(url: str) -> dict[str, Any]:
    """Chat Input → HTTPRequest to ``url`` (blocks until the test server is released) → Chat Output."""
    return {
        "name": "Blocking call",
        "nodes": [
            {"id": "ask", "type": "ChatInput"},
            {"id": "call", "type": "HTTPRequest", "params": {"url": url, "method": "POST", "timeout": 120}},
            {"id": "out", "type": "ChatOutput"},
        ],
        "edges": [{"from": "ask.message", "to": "call.body"}, {"from": "call.response", "to": "out.input_value"}],
    }
