"""The example agent flow (examples/flows/agent_refund.json) runs with `signoff run`, its model
taken from the OPENAI_* settings, against the real fake OpenAI server; the gated HTTP tool is
rejected at the terminal, so it never runs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from signoff.engine.settings import Settings
from signoff.engine.spec import load_flow
from signoff.engine.validate import flow_has_gate, parse_and_validate
from signoff.commands.run import run_file
from tests.fixtures.fake_openai import call, say

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flows" / "agent_refund.json"


def test_the_example_is_a_valid_gated_flow():
    spec = parse_and_validate(EXAMPLE.read_text())
    assert flow_has_gate(spec)
    assert "base_url" not in load_flow(EXAMPLE.read_text()).node("agent").params  # the endpoint comes from settings


async def test_the_example_runs_at_the_terminal_with_the_openai_settings(fake_openai, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
    monkeypatch.setenv("OPENAI_MODEL", "example-model")
    monkeypatch.delenv("SIGNOFF_OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("SIGNOFF_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SIGNOFF_OPENAI_MODEL", raising=False)
    assert Settings().openai_base_url == fake_openai.base_url
    fake_openai.add(
        call("calculator", {"expression": "3 * 15"}),
        call("send_refund", {"body": "45 EUR to order 1234"}),
        say("A manager has to approve refunds above 40 EUR; we will get back to you."),
    )
    answers = iter(["reject", "above 40 EUR a manager must approve"])
    out = io.StringIO()
    code = await run_file(EXAMPLE, "Refund 3 items at 15 EUR, order 1234", read=lambda _prompt: next(answers), out=out)
    assert code == 0
    assert out.getvalue().strip() == "A manager has to approve refunds above 40 EUR; we will get back to you."
    assert fake_openai.count == 3
    assert fake_openai.requests[0]["model"] == "example-model"
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-example"
    tool_results = [m["content"] for m in fake_openai.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_results == ["45", "above 40 EUR a manager must approve"]


async def test_without_an_endpoint_the_agent_says_what_to_set(monkeypatch, capsys):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "SIGNOFF_OPENAI_BASE_URL", "SIGNOFF_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    code = await run_file(EXAMPLE, "x", read=lambda _p: pytest.fail("no question expected"), out=io.StringIO())
    assert code == 1
    assert "no model endpoint" in capsys.readouterr().err
