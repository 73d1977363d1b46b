"""Agent runs as FlowRun workflows on the session's Temporal dev server. The per-test world
(SQLite store, settings with this test's task queue, in-process worker, service, user) is the
Temporal tests' own (tests/integration/temporal/conftest.py); the model and the tool target
are real HTTP servers (tests/fixtures/fake_openai.py)."""

from __future__ import annotations

from tests.fixtures.fake_openai import fake_openai, tool_target  # noqa: F401 - fixtures
from tests.integration.temporal.conftest import (  # noqa: F401 - fixtures
    client,
    make_flow,
    service,
    settings,
    store,
    user,
    worker,
)
