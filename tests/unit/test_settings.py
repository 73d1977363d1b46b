"""Settings are read, and refused, when a process starts: a malformed value stops every command
at once with the variable's name and what is wrong, not a traceback, and not later when a flow
first needs it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from signoff.cli import main
from signoff.engine.settings import Settings


def test_a_malformed_egress_allow_list_is_refused_at_start_naming_the_entry() -> None:
    with pytest.raises(ValidationError, match="10.0.0.0/33"):
        Settings(egress_allow="127.0.0.1:9000, 10.0.0.0/33")
    assert Settings(egress_allow="127.0.0.1:9000, internal.example.com, 10.0.0.0/8").egress_allow


@pytest.mark.parametrize(("name", "value", "says"), [
    ("SIGNOFF_EGRESS_ALLOW", "10.0.0.0/33", "'10.0.0.0/33' is not a host"),
    ("SIGNOFF_DATABASE_URL", "mysql://db/signoff", "must start with sqlite:/// or postgresql://"),
    ("SIGNOFF_API_PORT", "99999", "less than or equal to 65535"),
    ("SIGNOFF_RUN_RETENTION_DAYS", "0", "greater than 0"),  # not "delete every ended run at once"
    ("SIGNOFF_RUN_RETENTION_DAYS", "a month", "valid number"),
    # a beat at a third of the 30 s lease renews it late (docs/inline.md)
    ("SIGNOFF_INLINE_HEARTBEAT_SECONDS", "10", "under a third of SIGNOFF_INLINE_LEASE_SECONDS (30 s)"),
])
def test_a_command_with_a_bad_setting_says_which_and_exits_2(monkeypatch, capsys, tmp_path, name, value,
                                                             says) -> None:
    monkeypatch.setenv("SIGNOFF_HOME", str(tmp_path))
    monkeypatch.setenv(name, value)
    assert main(["users", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"signoff: {name}: ") and says in err and err.count(name) == 1, err
    assert "Traceback" not in err


def test_an_inline_heartbeat_under_a_third_of_the_lease_is_taken() -> None:
    assert Settings(inline_lease_seconds=2, inline_heartbeat_seconds=0.5).inline_heartbeat_seconds == 0.5
    with pytest.raises(ValidationError, match="under a third"):
        Settings(inline_lease_seconds=3, inline_heartbeat_seconds=1)


def test_runs_are_kept_forever_unless_a_retention_is_set(monkeypatch) -> None:
    """The record of who approved what stays by default: unset or empty is no retention."""
    monkeypatch.delenv("SIGNOFF_RUN_RETENTION_DAYS", raising=False)
    assert Settings().run_retention_days is None
    monkeypatch.setenv("SIGNOFF_RUN_RETENTION_DAYS", " ")
    assert Settings().run_retention_days is None
    monkeypatch.setenv("SIGNOFF_RUN_RETENTION_DAYS", "30")
    assert Settings().run_retention_days == 30
    assert Settings(run_retention_days=0.5).run_retention_days == 0.5


def _planted(home, api_url: str) -> None:
    import json
    import os

    home.mkdir(parents=True, exist_ok=True)
    (home / "dev.json").write_text(json.dumps({"pid": os.getpid(), "api_url": api_url, "database_url": "sqlite://",
                                               "user": "dev"}))
    (home / "dev_api_key").write_text("sk-dev-from-the-folder\n")


def _client_settings(monkeypatch, home, **env: str):
    import argparse

    from signoff.commands._client import settings_from

    monkeypatch.setenv("SIGNOFF_HOME", str(home))
    for name in ("SIGNOFF_API_URL", "SIGNOFF_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return settings_from(argparse.Namespace(api_url=None, api_key=None))


def test_the_client_commands_take_the_running_dev_of_their_folder(monkeypatch, tmp_path) -> None:
    _planted(tmp_path, "http://127.0.0.1:18123")
    s = _client_settings(monkeypatch, tmp_path)
    assert (s.effective_api_url, s.api_key) == ("http://127.0.0.1:18123", "sk-dev-from-the-folder")


def test_a_key_you_gave_never_goes_where_a_folders_files_say(monkeypatch, tmp_path) -> None:
    """A cloned folder may hold a .signoff/dev.json naming any URL: with your SIGNOFF_API_KEY set,
    the record is not read at all; without it, only a record of this machine counts."""
    _planted(tmp_path, "http://127.0.0.1:18123")
    s = _client_settings(monkeypatch, tmp_path, SIGNOFF_API_KEY="sk-mine")
    assert (s.effective_api_url, s.api_key) == ("http://127.0.0.1:8000", "sk-mine")
    _planted(tmp_path, "https://collector.example")
    s = _client_settings(monkeypatch, tmp_path)
    assert (s.effective_api_url, s.api_key) == ("http://127.0.0.1:8000", None)


def test_a_record_of_a_process_that_is_gone_is_ignored(monkeypatch, tmp_path) -> None:
    import json

    _planted(tmp_path, "http://127.0.0.1:18123")
    record = json.loads((tmp_path / "dev.json").read_text())
    (tmp_path / "dev.json").write_text(json.dumps({**record, "pid": 2**22 + 12345}))  # above pid_max
    assert _client_settings(monkeypatch, tmp_path).effective_api_url == "http://127.0.0.1:8000"


@pytest.mark.parametrize("pid", [0, -1])
def test_a_record_naming_a_process_group_is_ignored(monkeypatch, tmp_path, pid) -> None:
    """pid 0 and -1 name process groups, which kill(pid, 0) answers for: never a running dev."""
    import json

    _planted(tmp_path, "http://127.0.0.1:18123")
    record = json.loads((tmp_path / "dev.json").read_text())
    (tmp_path / "dev.json").write_text(json.dumps({**record, "pid": pid}))
    assert _client_settings(monkeypatch, tmp_path).effective_api_url == "http://127.0.0.1:8000"
