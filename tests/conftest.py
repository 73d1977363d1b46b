"""Shared fixtures. Tiers by folder: tests/unit (no services), tests/integration (Temporal dev
server, SQLite, PostgreSQL), tests/acceptance (the CLI and HTTP as a user drives them)."""

pytest_plugins = ["tests.fixtures.temporal", "tests.fixtures.db", "tests.fixtures.fake_openai"]
