"""The fault tests run in the shared per-test world (tests/fixtures/world.py) where they need it."""

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
