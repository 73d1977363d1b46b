"""The README's walkthrough, run as written: its bash blocks ("Five minutes with curl", "Approve
from the Temporal CLI", "The same from the `signoff` command") in bash against a real `signoff dev`
on moved ports. The only lines changed are the three the reader fills in from the banner (KEY,
API, TEMPORAL_ADDRESS); everything else runs verbatim, so a README that drifts from the product
fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from signoff.devserver import free_port
from tests.acceptance.test_dev import ROOT, Dev

README = (ROOT / "README.md").read_text()


def block(after_heading: str) -> str:
    """The first ```bash block after the heading ``after_heading``."""
    start = README.index(after_heading)
    m = re.compile(r"^```bash\n(.*?)^```", re.M | re.S).search(README, start)
    assert m, f"no bash block after {after_heading!r}"
    return m.group(1)


def filled(script: str, values: dict[str, str]) -> str:
    """``script`` with the reader's lines (``NAME=...``, ``export NAME=...``) given these values."""
    for name, value in values.items():
        script, n = re.subn(rf"^(export )?{name}=\S+", lambda m: f"{m.group(1) or ''}{name}={value}", script,
                            count=1, flags=re.M)
        assert n == 1, f"the README's walkthrough no longer sets {name}"
    return script


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("curl") is None, reason="needs curl and jq")
def test_the_readme_walkthrough_runs_as_written_on_moved_ports(tmp_path: Path) -> None:
    home = tmp_path / "home"
    api_port, temporal_port, ui_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "OTEL_", "TEMPORAL_"))}
    env.update(SIGNOFF_HOME=str(home), SIGNOFF_API_PORT=str(api_port), SIGNOFF_DEV_TEMPORAL_PORT=str(temporal_port),
               SIGNOFF_DEV_UI_PORT=str(ui_port), BANK_TOKEN="a-bank-token")
    curl = block("## Five minutes with curl")
    submit_again = curl[curl.index("# 2. Submit"):curl.index("# 3. See the pause")]
    script = "\n".join([
        "set -e -o pipefail",
        filled(curl, {"KEY": "$DEV_KEY", "API": "$DEV_API", "TEMPORAL_ADDRESS": "$DEV_TEMPORAL"}),
        'echo "== the Temporal CLI"',
        submit_again,
        block("### Approve from the Temporal CLI"),
        'echo "== the signoff command"',
        block("### The same from the `signoff` command"),
    ])
    dev = Dev(env)
    try:
        run = subprocess.run(["bash", "-c", script], cwd=ROOT, input="approve\n", capture_output=True, text=True,
                             timeout=300, env={**env, "DEV_KEY": dev.key, "DEV_API": dev.url("API"),
                                               "DEV_TEMPORAL": f"127.0.0.1:{temporal_port}"})
    finally:
        dev.stop()
    out = run.stdout
    assert run.returncode == 0, f"exit {run.returncode}\n{out}\n{run.stderr}"
    curl_part, temporal_part, cli_part = re.split(r"^== .*$", out, flags=re.M)
    # curl: paused, approved, what happened
    assert '"status": "suspended"' in curl_part and '"completed"\n"Refund sent"' in curl_part, curl_part
    assert "human_input_decision" in curl_part and '"submitted_action": "approve"' in curl_part, curl_part
    assert "Human In The Loop — Approve" in curl_part, curl_part
    # the temporal CLI: the run listed, its pending request queried, rejected by an Update
    assert '"completed"\n"Refund refused"' in temporal_part, temporal_part
    # the signoff command: a flow, a run paused then approved, a user, a share, a secret
    assert "Refund sent" in cli_part and "completed" in cli_part, cli_part + run.stderr
