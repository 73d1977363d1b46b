"""The README's MCP and A2A client programs, run as a newcomer would (a Python process of their
own, the environment the README names) against a real signoff: each prints what the README says."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.integration.api.conftest import Harness, harness, serving

ROOT = Path(__file__).resolve().parents[3]


def program(heading: str) -> str:
    """The first Python block under the README's ``## {heading}``."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest_asyncio.fixture(scope="module")
async def h(tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness("sqlite", tmp_path_factory.mktemp("readme"), temporal_client) as hx:
        yield hx


@pytest.mark.parametrize("heading", ["Use signoff from an MCP client", "Call a flow from an A2A agent"])
async def test_the_readme_program_runs_a_flow_and_answers_its_gate(h: Harness, heading: str, tmp_path: Path):
    script = tmp_path / "client.py"
    script.write_text(program(heading))
    async with serving(h.app, force_exit=True) as url:
        env = {**os.environ, "SIGNOFF_URL": url, "SIGNOFF_API_KEY": h.users["alice"][1],
               "FLOW_ID": h.flows["refund"]}
        proc = await asyncio.create_subprocess_exec(sys.executable, str(script), env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("Approve the refund for: Refund order 42") and lines[-1] == "Refund sent", out.decode()
