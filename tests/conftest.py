"""Shared fixtures. Tiers by folder: tests/unit (no services), tests/integration (Temporal dev
server, SQLite, PostgreSQL), tests/acceptance (the CLI and HTTP as a user drives them)."""

import os
import resource
import time

import pytest

from tests.helpers import EgressAllow

# One test session is one deployment: its tests share each worker's PostgreSQL database (tests/
# fixtures/db.py), so they share its deployment key too, as replicas must (docs/audit.md: the
# receipts' signing key is sealed with it; a key made under one test's SIGNOFF_HOME/secret.key
# could not be opened by the next test's). Set for every Settings and every process a test
# starts; a test of the key file itself unsets it.
os.environ.setdefault("SIGNOFF_SECRET_KEY", "c2lnbm9mZi10ZXN0LXNlc3Npb24ta2V5LTMyLWJ5dGU=")

pytest_plugins = ["tests.fixtures.temporal", "tests.fixtures.db", "tests.fixtures.fake_openai", "tests.fixtures.own_postgres",
                  "tests.fixtures.routes_once"]


@pytest.fixture
def egress() -> EgressAllow:
    """This test's SIGNOFF_EGRESS_ALLOW: the local servers its flows may call, port by port."""
    return EgressAllow()


def pytest_addoption(parser):
    parser.addoption("--record-histories", action="store_true", default=False,
                     help="write the replay histories of tests/integration/temporal/test_replay.py to its histories/")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``store_backend``: the store a test above the store tier runs on.

    One store is enough there: every store method runs on SQLite, PostgreSQL and the in-memory
    store in the conformance suite (tests/integration/store), so repeating a Temporal or HTTP
    round trip per store tests the store again, not the layer above it. A test (or a module, by
    ``pytestmark``) marked ``both_stores`` exercises what differs between the stores (the events
    tail's LISTEN/NOTIFY, the pool, an outage, a restart, claims raced through the whole stack)
    and runs on PostgreSQL too. Module-scoped, so the per-module harnesses are made once per
    store."""
    if "store_backend" in metafunc.fixturenames:
        from tests.fixtures.db import BACKENDS

        both = metafunc.definition.get_closest_marker("both_stores") is not None
        metafunc.parametrize("store_backend", BACKENDS if both else BACKENDS[:1], scope="module")


# The files that take longest (`--durations` of a clean-clone CI), longest first. pytest-xdist
# hands files out in collection order (`--no-loadscope-reorder` in the Makefile; its default
# orders them by their number of tests, which put the long files of few tests, the soak and the
# acceptance runs, last, where one worker ran them alone while the others had finished): these go
# first, so the short files fill in around them at the end. A file missing here just runs later.
LONGEST_FIRST = (
    "tests/acceptance/test_dev.py",
    "tests/integration/faults/test_soak.py",
    "tests/acceptance/test_cli_and_fresh_api.py",
    "tests/integration/decisions/test_quorum.py",
    "tests/acceptance/test_readme_walkthrough.py",
    "tests/integration/faults/test_database_outage.py",
    "tests/browser/test_axe.py",
    "tests/browser/test_workbench_views.py",
    "tests/browser/test_pages.py",
    "tests/integration/api/test_supersede_and_events.py",
    "tests/integration/decisions/test_decision_races.py",
    "tests/browser/test_workbench.py",
    "tests/integration/faults/test_temporal_outage.py",
    "tests/acceptance/test_fuzz_openapi.py",
    "tests/integration/decisions/test_race_surfaces.py",
    "tests/integration/temporal/test_update_not_taken.py",
    "tests/integration/trace/test_restart_and_otlp.py",
    "tests/integration/decisions/test_timers.py",
    "tests/integration/inline/test_killed_api.py",
    "tests/integration/temporal/test_restarts.py",
    "tests/acceptance/test_install.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (:data:`LONGEST_FIRST`), the rest in their order.

    And a node id per schemathesis case (tests/acceptance/test_fuzz_openapi.py): its items, one
    per API operation and named ``test_x[GET /path]``, all carry the test function's node id, and
    pytest-xdist, which hands work out and reports it by node id, would run one of the 38. Each
    gets the id its name says, as any parametrised test has (pytest's own ``parent.id.child``)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order
    for item in items:
        if type(item).__name__ == "SchemathesisFunction" and not item.nodeid.endswith("]") and "[" in item.name:
            item._id = item.parent.id.child(item.name)  # type: ignore[attr-defined, union-attr]


# ---- where the suite's CPU goes -------------------------------------------------------------------
# The suite is bound by the machine's cores more than by waiting (2 cores, 3 workers, a Temporal
# dev server each), so `--durations` (wall time, stretched by whatever else runs) is printed beside
# each file's CPU: the test process's own and that of the processes it started and reaped (a
# `signoff` command, a killed API), per setup, call and teardown. The session's fixtures (each
# worker's Temporal dev server, Chromium) are reaped in the last test's teardown: that is billed
# to a line of its own, not to whichever file a worker happened to run last (which put unit files
# at the top of the list, at 60 s each).
_CPU = pytest.StashKey[float]()
_LAST = pytest.StashKey[bool]()
SESSION_FIXTURES = "(the session's fixtures: Temporal dev servers, Chromium; reaped at the end)"


def _cpu_seconds() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    now = _cpu_seconds()
    name = "cpu_seconds_session" if call.when == "teardown" and item.stash.get(_LAST, False) else "cpu_seconds"
    report.user_properties.append((name, round(now - item.stash.get(_CPU, now), 3)))
    item.stash[_CPU] = now
    if call.when == "teardown":  # when the test ended, on which worker: each worker's last end is printed
        report.user_properties.append(("ended_at", (os.environ.get("PYTEST_XDIST_WORKER", "main"), time.time())))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    item.stash[_LAST] = nextitem is None  # this teardown ends the session's fixtures too
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    item.stash[_CPU] = _cpu_seconds()
    yield


_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.time()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    spent: dict[str, float] = {}
    ended: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name in ("cpu_seconds", "cpu_seconds_session"):
                    path = report.nodeid.split("::", 1)[0] if name == "cpu_seconds" else SESSION_FIXTURES
                    spent[path] = spent.get(path, 0.0) + value
                elif name == "ended_at":
                    worker, at = value
                    ended[worker] = max(ended.get(worker, 0.0), at)
    if not spent:
        return
    started = config.stash.get(_STARTED, None)
    if started is not None and ended:  # a worker done long before the others: the tail is one long file
        terminalreporter.write_sep("=", "each worker's last test ended at (s after the start)")
        terminalreporter.write_line("  ".join(f"{w} {at - started:.0f}" for w, at in sorted(ended.items())))
    terminalreporter.write_sep("=", f"CPU by file: {sum(spent.values()):.0f} s in all (the 15 most)")
    for path, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
