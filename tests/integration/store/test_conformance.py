"""The Store contract (tests/store_conformance.py) on every backend: in memory, SQLite and
PostgreSQL; and what ``open_store`` accepts."""

from __future__ import annotations

import pytest

from signoff.engine.store import Store, open_store
from signoff.engine.store.memory import MemoryStore
from tests.store_conformance import *  # noqa: F403 - the contract's tests, collected here
from tests.store_conformance_channels import *  # noqa: F403 - contacts, decision links, notifications
from tests.store_conformance_standing import *  # noqa: F403 - standing approvals
from tests.store_conformance_receipts import *  # noqa: F403 - receipts (docs/audit.md)


@pytest.fixture
def store(any_store: Store) -> Store:
    """The contract runs on the in-memory store too, not only on the databases."""
    return any_store


def test_open_store_rejects_unknown_urls() -> None:
    with pytest.raises(ValueError, match="sqlite:///"):
        open_store("mysql://x")
    with pytest.raises(ValueError, match="file"):
        open_store("sqlite:///:memory:")
    with pytest.raises(ValueError, match="synchronous"):
        open_store("sqlite:///x.db?synchronous=sometimes")


async def test_memory_url_opens_a_new_empty_store_each_time() -> None:
    first, second = open_store("memory://"), open_store("memory://")
    assert isinstance(first, MemoryStore)
    user = await first.create_user("alice")
    assert await second.get_user(user.id) is None  # nothing shared: one store per call, one process
    with pytest.raises(ValueError, match="memory://"):
        open_store("memory://shared")
