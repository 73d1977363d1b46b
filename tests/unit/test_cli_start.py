"""Every ``signoff`` command starts by building the whole parser (signoff/cli.py imports each
command's module): what a module imports at its top, every command pays. The engine's decisions
(jsonschema) and models are for the commands that use them, imported when they run."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("jsonschema", "signoff.engine.decisions", "signoff.engine.models", "signoff.engine.audit.receipts")


def test_building_the_parser_imports_nothing_only_some_commands_use() -> None:
    code = ("import sys, signoff.cli; signoff.cli.build_parser(); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "", f"imported while building the parser: {out.stdout.strip()}"
