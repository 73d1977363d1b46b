"""Shared fixtures. Tiers by folder: tests/unit (no services), tests/integration (Temporal dev
server, SQLite, PostgreSQL), tests/acceptance (the CLI and HTTP as a user drives them)."""

import pytest

from tests.helpers import EgressAllow

pytest_plugins = ["tests.fixtures.temporal", "tests.fixtures.db", "tests.fixtures.fake_openai", "tests.fixtures.own_postgres"]


@pytest.fixture
def egress() -> EgressAllow:
    """This test's SIGNOFF_EGRESS_ALLOW: the local servers its flows may call, port by port."""
    return EgressAllow()


def pytest_addoption(parser):
    parser.addoption("--record-histories", action="store_true", default=False,
                     help="write the replay histories of tests/integration/temporal/test_replay.py to its histories/")
