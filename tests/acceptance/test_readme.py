"""The README's configuration table lists every setting, and its commands exist."""

from __future__ import annotations

from pathlib import Path

from signoff.engine.settings import Settings
from signoff.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_readme_lists_every_setting() -> None:
    text = (ROOT / "README.md").read_text()
    missing = [f"SIGNOFF_{name.upper()}" for name in Settings.model_fields if f"`SIGNOFF_{name.upper()}`" not in text]
    assert not missing, f"README configuration table lacks {missing}"


def test_readme_test_command_is_the_makefile_target() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make dev" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert "\ntest:" in makefile and "\ndev:" in makefile


def test_client_commands_have_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in ("api", "users", "flows", "submit", "status", "pending", "resume", "delete"):
        assert name in sub.choices, name
        assert sub.choices[name].format_help()
