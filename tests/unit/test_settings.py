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
])
def test_a_command_with_a_bad_setting_says_which_and_exits_2(monkeypatch, capsys, tmp_path, name, value,
                                                             says) -> None:
    monkeypatch.setenv("SIGNOFF_HOME", str(tmp_path))
    monkeypatch.setenv(name, value)
    assert main(["users", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"signoff: {name}: ") and says in err and err.count(name) == 1, err
    assert "Traceback" not in err
