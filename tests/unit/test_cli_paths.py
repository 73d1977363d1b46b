"""The client commands put what a person types (a job id, a flow, user, group or secret name) into
an API URL as one quoted path segment (signoff/commands/_client.py: seg): unquoted, httpx resolves
``..``, so ``signoff delete ../../v1/flows/X`` deleted a flow with the caller's key (a hostile-review
find; the same held for status, resume, secrets, shares and groups)."""

from __future__ import annotations

import re
from pathlib import Path

from signoff.commands._client import seg

COMMANDS = Path(__file__).resolve().parents[2] / "signoff" / "commands"


def test_a_segment_is_quoted_whole() -> None:
    assert seg("../../v1/flows/x") == "..%2F..%2Fv1%2Fflows%2Fx"
    assert seg("job-1") == "job-1" and seg("a b?c#d") == "a%20b%3Fc%23d"


def test_every_api_path_the_commands_build_quotes_its_parts() -> None:
    unquoted = []
    for path in sorted(COMMANDS.glob("*.py")):
        for url in re.findall(r'f"(/api/v[0-9]+/[^"]*)"', path.read_text()):
            unquoted += [f"{path.name}: {url}" for part in re.findall(r"\{([^{}]+)\}", url)
                         if not part.startswith("seg(")]
    assert unquoted == []
