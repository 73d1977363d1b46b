"""The examples the README points at are whole and valid as they are: each file under examples/
passes the API's own parser and checks (a Langflow export converted as an upload converts it),
and each flow asks a person."""

from __future__ import annotations

from pathlib import Path

import pytest

from signoff.api.flowspec import parse_body, validate_spec
from signoff.engine.settings import Settings
from signoff.engine.validate import flow_has_gate, parse_and_validate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".json", ".yaml", ".yml"))


def test_there_are_examples_of_each_kind() -> None:
    names = {p.relative_to(EXAMPLES).as_posix() for p in FILES}
    assert {"flows/refund.json", "flows/purchase.yaml", "langflow/refund_approval.json"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_an_example_is_accepted_as_an_upload_and_has_a_gate(path: Path) -> None:
    ctype = "application/yaml" if path.suffix in (".yaml", ".yml") else "application/json"
    spec = validate_spec(parse_body(path.read_bytes(), ctype), Settings())
    assert flow_has_gate(parse_and_validate(spec))


def test_the_purchase_example_uses_every_option_of_a_human_input() -> None:
    spec = validate_spec(parse_body((EXAMPLES / "flows/purchase.yaml").read_bytes(), "application/yaml"), Settings())
    gate = next(n for n in spec["nodes"] if n["type"] == "HumanInput")
    assert {"decisions", "fields", "approvers", "allow_self_approval", "required_approvals", "timeout", "on_timeout",
            "default_action", "default_values", "remind_every", "escalate_after", "escalate_to"} <= set(gate["params"])


def test_the_langflow_example_keeps_langflows_node_ids() -> None:
    spec = validate_spec(parse_body((EXAMPLES / "langflow/refund_approval.json").read_bytes(), "application/json"),
                         Settings())
    assert "HumanInput-x8Kq2" in {n["id"] for n in spec["nodes"]}


def test_the_webhook_receiver_takes_what_signoff_signs_and_refuses_the_rest() -> None:
    import json
    import subprocess
    import sys

    import httpx

    from signoff.devserver import free_port
    from signoff.engine.webhooks import SIGNATURE, signature

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(EXAMPLES / "webhook_receiver.py"), str(port), "s3cret"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"listening on http://127.0.0.1:{port}/hook")
        body = json.dumps({"event": "human_input_required", "job_id": "j1"}).encode()
        url = f"http://127.0.0.1:{port}/hook"
        ok = httpx.post(url, content=body, headers={SIGNATURE: signature("s3cret", body),
                                                     "X-Signoff-Event": "human_input_required"})
        bad = httpx.post(url, content=body, headers={SIGNATURE: signature("other", body)})
        assert (ok.status_code, bad.status_code) == (204, 401)
        assert proc.stdout.readline().startswith('human_input_required: {"event": "human_input_required"')
        assert proc.stdout.readline().startswith("refused a delivery with a wrong signature")
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
