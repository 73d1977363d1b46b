"""Nothing a flow or a person supplies runs unbounded (issue 28): the If-Else regex on RE2,
values keywords in linear time, arrays and ``fields`` bounded. A regression of the first two
hangs the suite (Python's backtracking ``re`` and jsonschema's pairwise ``uniqueItems`` would not
finish) rather than passing."""

from __future__ import annotations

import pytest

from signoff.engine.components.human_input import HumanInput
from signoff.engine.components.router import ConditionalRouter, matches
from signoff.engine.decisions import check_decision
from signoff.engine.errors import InvalidValues
from signoff.engine.models import Decision, Option, PendingRequest, utcnow
from signoff.engine.valueschema import ValuesValidator


def gate(schema: dict) -> PendingRequest:
    return PendingRequest(request_id="gate:run", options=[Option(action_id="approve", label="Approve")],
                          allowed_decisions=["approve"], paused_at=utcnow(), fields={"approve": schema})


def tags(**array: object) -> dict:
    return {"type": "object", "properties": {"tags": {"type": "array", **array}}}


# ---- If-Else regex ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["regex", "regex_match"])
def test_a_catastrophic_router_pattern_answers_at_once(op):
    """``^(a+)+$`` on 60 a's and a '!': 2^60 steps for Python's re (29 characters took 8 s)."""
    assert matches(op, "a" * 60 + "!", "^(a+)+$", True) is False
    assert matches(op, "a" * 60, "^(a+)+$", True) is True
    assert matches(op, "A" * 60, "^(a+)+$", False) is True
    assert matches(op, "A" * 60, "^(a+)+$", True) is False


def test_regex_keeps_langflow_semantics():
    assert matches("regex", "x-ab", "ab", True) and not matches("regex_match", "x-ab", "ab", True)
    assert matches("regex_match", "ab-x", "ab", True)
    assert matches("regex", "xAB", "ab", False) and not matches("regex", "xAB", "ab", True)


@pytest.mark.parametrize("pattern", [r"^(a)\1$", r"^(?=a)a$", r"^(?<!b)a$"])
def test_a_router_pattern_re2_cannot_run_is_refused_at_save(pattern):
    (problem,) = ConditionalRouter.check_params({"operator": "regex", "match_text": pattern})
    assert problem.startswith("param 'match_text': pattern") and "RE2" in problem


# ---- values keywords --------------------------------------------------------------------------


def test_unique_items_is_linear_on_items_that_do_not_sort():
    """50 000 strings and numbers mixed: jsonschema cannot sort them and compares every pair
    (1.25e9 comparisons; a 70 KB decision held the API 30 s). Hashing answers at once."""
    many = [i if i % 2 else str(i) for i in range(50_000)]
    pending = gate(tags(uniqueItems=True, maxItems=100_000))
    check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": many}))
    with pytest.raises(InvalidValues) as e:
        check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": [*many, "8"]}))
    assert [p["loc"] for p in e.value.problems] == ["values.tags"]


@pytest.mark.parametrize("items,unique", [
    ([1, 1.0], False), ([1, True], True), ([0, False], True), (["1", 1], True), ([None, None], False),
    ([{"a": 1, "b": [1]}, {"b": [1.0], "a": 1}], False), ([[1, 2], [2, 1]], True), ([2 ** 53 + 1, 2.0 ** 53], True),
])
def test_unique_items_means_what_json_schema_says(items, unique):
    errors = list(ValuesValidator(tags(uniqueItems=True)).iter_errors({"tags": items}))
    assert (not errors) is unique


def test_a_400_digit_integer_against_multiple_of_is_invalid_values_not_a_crash():
    pending = gate({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.01}}})
    with pytest.raises(InvalidValues) as e:
        check_decision(pending, "gate:run", Decision(action_id="approve", values={"n": 10 ** 400}))
    assert [p["loc"] for p in e.value.problems] == ["values.n"]
    half = gate({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}})
    check_decision(half, "gate:run", Decision(action_id="approve", values={"n": 10 ** 400 + 1}))


def test_arrays_and_all_values_are_bounded_by_the_setting():
    """Whatever maxItems the schema gives: the keywords cost ~0.1 ms an item, so a schema's own
    larger bound let a 2 MiB body hold the API for a minute."""
    pending = gate(tags(maxItems=10 ** 6))
    check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": ["x"] * 10}), max_items=10)
    with pytest.raises(InvalidValues) as e:
        check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": ["x"] * 11}), max_items=10)
    assert e.value.problems == [{"loc": "values.tags", "type": "maxItems",
                                 "message": "has 11 items; the limit is 10 (SIGNOFF_MAX_VALUE_ITEMS)"}]
    wide = {"type": "object"}  # many arrays, each under the bound: 10 x the bound in all
    with pytest.raises(InvalidValues) as e:
        check_decision(gate(wide), "gate:run", Decision(action_id="approve", values={
            f"k{i}": ["x"] * 9 for i in range(12)}), max_items=10)
    assert [p["loc"] for p in e.value.problems] == ["values"] and "10 x SIGNOFF_MAX_VALUE_ITEMS" in e.value.message


def test_the_workflow_validator_check_leaves_values_out():
    """values=False (the Update validator): shape, request id and action id only."""
    pending = gate(tags(uniqueItems=True))
    check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": [1, 1]}), values=False)
    with pytest.raises(InvalidValues):
        check_decision(pending, "gate:run", Decision(action_id="approve", values={"tags": [1, 1]}))


# ---- the size of `fields` ---------------------------------------------------------------------


def test_fields_larger_than_the_cap_is_refused_at_save():
    from signoff.engine.components.human_input import fields_too_large

    big = {"type": "object", "properties": {"pick": {"type": "string", "enum": [f"option {i}" for i in range(8000)]}}}
    problems = HumanInput.check_params({"fields": big})
    assert len(problems) == 1 and problems[0].startswith("fields: is ") and "SIGNOFF_MAX_FIELDS_BYTES" in problems[0]
    (by_label,) = HumanInput.check_params({"fields": {"Approve": big}})
    assert by_label.startswith("fields: is ") and "SIGNOFF_MAX_FIELDS_BYTES" in by_label
    assert fields_too_large(big, 10 ** 6) is None
    small = {"type": "object", "properties": {"pick": {"type": "string", "enum": ["a", "b"]}}}
    assert HumanInput.check_params({"fields": small}) == []
