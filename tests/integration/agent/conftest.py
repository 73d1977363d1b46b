"""Agent runs as FlowRun workflows on the session's Temporal dev server. The per-test world
(SQLite store, settings with this test's task queue, in-process worker, service, user) is the
shared one (tests/fixtures/world.py); the model and the tool target
are real HTTP servers (tests/fixtures/fake_openai.py)."""

from __future__ import annotations

from tests.fixtures.world import (  # noqa: F401 - fixtures
    client,
    database_url,
    make_flow,
    service,
    settings,
    store,
    user,
    worker,
)
