"""The Temporal tests run in the shared per-test world (tests/fixtures/world.py)."""

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
from tests.helpers import GATE_FLOW, CountingHTTP, event_names, eventually, wait_status  # noqa: F401
