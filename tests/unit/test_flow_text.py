"""The one parser of a flow's text (engine/spec.py ``parse_text``: the API upload, SIGNOFF_FLOWS_DIR
and ``signoff run``), the API's walk of a request body (api/limits.py), the node limit, and
``signoff run`` reading YAML 1.2 with SIGNOFF_MAX_FLOW_NODES and SIGNOFF_MAX_JSON_DEPTH."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from signoff.api.limits import string_problems
from signoff.commands.run import run_file
from signoff.engine.errors import FlowInvalid
from signoff.engine.spec import FlowSyntaxError, parse_text
from signoff.engine.validate import parse_and_validate, too_many_nodes

ROOT = Path(__file__).resolve().parents[2]
REFUND = json.loads((ROOT / "examples/flows/refund.json").read_text())

REFUND_YAML = """\
name: Refund approval
nodes:
  - {id: ask, type: ChatInput}
  - id: gate
    type: HumanInput
    params: {decisions: [Approve, Reject]}
  - {id: ok, type: ChatOutput, params: {text: Refund sent}}
  - {id: no, type: ChatOutput, params: {text: Refund refused}}
edges:
  - {from: ask.message, to: gate.prompt}
  - {from: gate.branch_approve, to: ok.input_value}
  - {from: gate.branch_reject, to: no.input_value}
"""

BOMB = "\n".join(
    ["name: bomb", "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    + [f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    + ["nodes: [{id: ask, type: ChatInput, params: {x: *i}}]", ""]
)


def nest(levels: int) -> Any:
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if (levels - i) % 2 else {"k": value}
    return value


def refused(text: str | bytes, **kw: Any) -> list[dict[str, Any]]:
    with pytest.raises(FlowInvalid) as info:
        parse_text(text, **kw)
    assert not isinstance(info.value, FlowSyntaxError), info.value.problems
    return info.value.problems


# ---- YAML 1.2, the JSON data model -----------------------------------------------------------


@pytest.mark.parametrize("scalar,value", [
    ("no", "no"), ("yes", "yes"), ("on", "on"), ("off", "off"), ("y", "y"), ("N", "N"),
    ("true", True), ("False", False), ("TRUE", True),
    ("~", None), ("null", None), ("", None),
    ("12", 12), ("-3", -3), ("0777", 777), ("0o17", 15), ("0x1F", 31), ("1_000", "1_000"),
    ("1.5", 1.5), ("-.5", -0.5), ("1e3", 1000.0),
    ("2024-01-01", "2024-01-01"), ("12:30", "12:30"), ("=", "="), ("'no'", "no"),
])
def test_yaml_scalars_are_yaml_1_2_core(scalar, value):
    assert parse_text(f"v: {scalar}\n") == {"v": value}


def test_yaml_keys_are_strings_as_written_and_merge_is_a_plain_key():
    assert parse_text("1: a\ntrue: b\nnull: c\nno: d\n<<: {e: 1}\n") == {
        "1": "a", "true": "b", "null": "c", "no": "d", "<<": {"e": 1}}


def test_the_refund_flow_in_yaml_keeps_its_node_called_no():
    spec = parse_and_validate(parse_text(REFUND_YAML))
    assert [n.id for n in spec.nodes] == ["ask", "gate", "ok", "no"]
    assert spec.edges[2].target_node == "no"


@pytest.mark.parametrize("text,words", [
    ("a: !!binary aGVsbG8=\n", "!!binary"),
    ("a: !!set {x, y}\n", "!!set"),
    ("a: !!timestamp 2024-01-01\n", "!!timestamp"),
    ("a: !!python/object/apply:os.system [true]\n", "!!python/object/apply:os.system"),
    ("a: !mine x\n", "!mine"),
    ("a: .inf\n", "infinity"),
    ("a: -.Inf\n", "infinity"),
    ("a: .nan\n", "NaN"),
    ("a: 1e400\n", "infinity"),
    ("a: " + "9" * 5000 + "\n", "integer"),
    ("? [x]\n: y\n", "mapping key must be a string"),
])
def test_yaml_that_json_cannot_say_is_a_flow_problem_naming_the_line(text, words):
    problems = refused(text)
    assert words in problems[0]["message"] and "line 1" in problems[0]["message"], problems


@pytest.mark.parametrize("text,words", [
    ('{"a": NaN}', "NaN"), ('{"a": -Infinity}', "-Infinity"), ('{"a": 1e400}', "1e400"),
    ('{"a": ' + "9" * 5000 + "}", "4300 digits"),
])
def test_json_that_json_cannot_say_is_a_flow_problem(text, words):
    assert words in refused(text)[0]["message"]


# ---- anchors and aliases ------------------------------------------------------------------------


def test_the_alias_bomb_is_refused_at_its_first_anchor():
    assert len(BOMB.encode()) < 400
    problems = refused(BOMB)
    assert problems == [{"where": "line 2", "message": "YAML anchor &a at line 2, column 4: anchors and aliases are "
                                                        "not accepted in a flow; write the value out where it is used"}]


@pytest.mark.parametrize("text", [
    "a: &x 1\nb: 2\n",  # an anchor alone
    "a: *x\n",  # an alias to nothing
    "base: &b {type: ChatInput}\nnode: {<<: *b, id: a}\n",  # a merge
    '{"a": &x 1, "b": *x}',  # JSON-looking YAML
])
def test_any_anchor_or_alias_is_refused(text):
    assert "anchors and aliases are not accepted" in refused(text)[0]["message"]


# ---- depth --------------------------------------------------------------------------------------


@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_depth_at_the_limit_is_read_one_more_is_refused_naming_where(syntax):
    doc = lambda levels: json.dumps({"nodes": [{"params": {"meta": nest(levels)}}]})  # noqa: E731
    # {} (1) > nodes (2) > node (3) > params (4) > meta: nest(n), the deepest at 4 + n
    assert parse_text(doc(28), syntax=syntax, max_depth=32)["nodes"][0]["params"]["meta"] == nest(28)
    problems = refused(doc(29), syntax=syntax, max_depth=32)
    assert problems[0]["where"] == "nodes.0.params.meta" + ".0.k" * 14
    assert "more than 32 levels deep" in problems[0]["message"] and "SIGNOFF_MAX_JSON_DEPTH" in problems[0]["message"]
    assert parse_text(doc(2), syntax=syntax, max_depth=6)
    assert refused(doc(3), syntax=syntax, max_depth=6)


@pytest.mark.parametrize("text", ["[" * 2_000_000, "[" * 5_000 + "]" * 5_000, "- " * 1_000_000, '{"a": ' * 100_000])
def test_any_depth_is_refused_without_running_out_of_stack(text):
    assert "SIGNOFF_MAX_JSON_DEPTH" in refused(text)[0]["message"]


def test_default_depth_is_the_setting():
    assert parse_text(json.dumps(nest(32)))
    assert refused(json.dumps(nest(33)))


# ---- what is not a document at all ---------------------------------------------------------------


@pytest.mark.parametrize("text,syntax,words", [
    ("", None, "empty"), ("   \n", "yaml", "empty"), (b"\xff\xfe", None, "UTF-8"),
    ("{nope", None, "not valid JSON"), ("{nope", "json", "not valid JSON"), ("a: [", None, "not valid YAML"),
    ("a: 1\n---\nb: 2\n", None, "not valid YAML"),
])
def test_not_a_document_is_a_syntax_error(text, syntax, words):
    with pytest.raises(FlowSyntaxError) as info:
        parse_text(text, syntax=syntax)
    assert words in info.value.message


def test_json_looking_yaml_and_a_bom_are_read():
    assert parse_text("{name: x, nodes: []}") == {"name": "x", "nodes": []}
    assert parse_text("\ufeff" + json.dumps(REFUND)) == REFUND
    assert parse_text(json.dumps(REFUND), syntax="yaml") == REFUND


# ---- the API's walk ------------------------------------------------------------------------------


def test_the_walk_reports_every_kind_of_problem_in_document_order():
    value = {"a": "x\x00", "b\ud800": 1, "c": [float("nan"), "\udfff", "y" * 11], "d": nest(5)}
    problems = string_problems(value, 10, ("body",), max_depth=4)
    assert [(p["loc"], p["type"]) for p in problems] == [  # an object's keys when the object is reached
        ("body.b\\ud800", "string_surrogate"), ("body.a", "string_nul"), ("body.c.0", "number_not_finite"),
        ("body.c.1", "string_surrogate"), ("body.c.2", "string_too_long"), ("body.d.0.k.0", "json_too_deep")]


def test_the_walk_needs_no_recursion_and_stops_at_the_limit():
    value: Any = "leaf"
    for _ in range(200_000):
        value = [value]
    problems = string_problems(value, None, ("body", "tweaks"), max_depth=32, level=2)
    assert [p["type"] for p in problems] == ["json_too_deep"]
    assert problems[0]["loc"] == "body.tweaks" + ".0" * 31
    assert string_problems(nest(31), None, (), max_depth=32, level=2) == []


# ---- the node limit -----------------------------------------------------------------------------


def test_too_many_nodes_is_one_rule():
    assert too_many_nodes(3, 3) is None
    assert too_many_nodes(4, 3) == "the flow has 4 nodes; the limit is 3 (SIGNOFF_MAX_FLOW_NODES)"
    with pytest.raises(FlowInvalid) as info:
        parse_and_validate(REFUND, max_nodes=3)
    assert info.value.problems == [{"message": "the flow has 5 nodes; the limit is 3 (SIGNOFF_MAX_FLOW_NODES)"}]


# ---- signoff run ----------------------------------------------------------------------------------


async def test_signoff_run_reads_yaml_1_2_so_the_node_called_no_runs(tmp_path):
    path = tmp_path / "refund.yaml"
    path.write_text(REFUND_YAML)
    out = io.StringIO()
    assert await run_file(path, "refund 42", read=lambda _prompt: "reject", out=out) == 0
    assert out.getvalue().strip() == "Refund refused"


def _run(monkeypatch, capsys, tmp_path: Path, name: str, text: str, **env: str) -> subprocess.CompletedProcess:
    """``signoff run`` through the CLI's own entry (``signoff.cli.main``, what the console script
    calls) in this process: the environment read by its settings is the subject, not the
    interpreter's start (a spawn cost a second or more of imports per call). The settings this
    process read once are forgotten before and after, as a fresh process has none."""
    from signoff.cli import main
    from signoff.engine import spec, validate
    from signoff.engine.components import human_input

    read_once = [validate._process_max_nodes, validate._process_min_remind_every, spec._process_max_depth,
                 human_input._process_max_fields_bytes]

    (tmp_path / name).write_text(text)
    for key in [k for k in os.environ if k.startswith("SIGNOFF_")]:
        monkeypatch.delenv(key)
    for key, value in {"SIGNOFF_HOME": str(tmp_path), **env}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "stdin", io.StringIO("reject\n"))
    capsys.readouterr()
    [cached.cache_clear() for cached in read_once]
    try:
        code = main(["run", str(tmp_path / name), "--input", "x"])
    finally:
        [cached.cache_clear() for cached in read_once]
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["signoff", "run"], code, out, err)


def test_signoff_run_honours_max_flow_nodes_and_max_json_depth(monkeypatch, capsys, tmp_path):
    run = lambda *a, **env: _run(monkeypatch, capsys, tmp_path, *a, **env)  # noqa: E731
    wide = json.dumps({"name": "wide", "nodes": [{"id": f"n{i}", "type": "TextInput"} for i in range(501)]})
    done = run("wide.json", wide, SIGNOFF_MAX_FLOW_NODES="600")
    assert done.returncode == 0, done.stderr  # the engine no longer holds its own 500
    done = run("refund.yaml", REFUND_YAML, SIGNOFF_MAX_FLOW_NODES="3")
    assert done.returncode == 1 and "the limit is 3 (SIGNOFF_MAX_FLOW_NODES)" in done.stderr, done.stderr
    deep = json.dumps({**REFUND, "meta": nest(10)})
    done = run("deep.json", deep, SIGNOFF_MAX_JSON_DEPTH="10")
    assert done.returncode == 1 and "more than 10 levels deep" in done.stderr, done.stderr
    assert run("deep.json", deep, SIGNOFF_MAX_JSON_DEPTH="11").returncode == 0


def test_signoff_run_refuses_the_alias_bomb(monkeypatch, capsys, tmp_path):
    done = _run(monkeypatch, capsys, tmp_path, "bomb.yaml", BOMB)
    assert done.returncode == 1 and "anchors and aliases are not accepted" in done.stderr
    assert len(done.stderr) < 1_000 and done.stdout == ""
