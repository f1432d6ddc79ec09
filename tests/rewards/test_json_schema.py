"""The json_schema verifier: which object is the answer, validation, comparison, and inputs
crafted to slip past it (each would score 1 if the check it targets were missing)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.json_schema import JsonSchemaVerifier, final_object, object_spans
from rlvr.rewards.registry import get_verifier

pytest.importorskip("jsonschema")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "born": {"type": "string", "format": "date"},
    },
    "required": ["name", "age"],
}
SAMPLE = {"id": "p1", "schema": PERSON, "expected": {"name": "Ada", "age": 36}}


@pytest.fixture(scope="module")
def verifier() -> JsonSchemaVerifier:
    return get_verifier("json_schema")


def test_the_object_after_the_reasoning_validates_and_compares(verifier):
    completion = (
        '<think>maybe {"name": "Bob", "age": 1}</think>\n```json\n{"age": 36, "name": "Ada"}\n```'
    )
    assert verifier.score(completion, SAMPLE).reward == 1.0
    assert verifier('{"name": "Ada", "age": 36} Hope this helps!', SAMPLE) == 1.0


def test_without_expected_a_valid_object_is_enough(verifier):
    sample = {"schema": PERSON}
    assert verifier('{"name": "Zed", "age": 3}', sample) == 1.0
    assert verifier.score('{"name": "Zed"}', sample).detail.startswith("schema: ")


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ('<think>{"name": "Ada", "age": 36}</think> no json', "the answer only in the reasoning"),
        ('<think>{"name": "Ada", "age": 36}', "an unclosed reasoning block"),
        ('{"name": "Ada", "age": 36} or rather {"name": "Ada", "age": 37}', "hedging: the last"),
        ('{"name": "Ada", "age": 36, "age": 37}', "a duplicate key"),
        ('{"name": "Ada", "age": true}', "true is not 36"),
        ('{"name": "Ada", "age": 36, "extra": 1}', "an extra key under exact comparison"),
        ('{"name": "Ada", "age": 36, "born": "1815-13-40"}', "a malformed date format"),
        ('{"name": "Ada", "age": NaN}', "NaN is not JSON"),
        ('{"name": "Ada", "age": 1e999}', "an overflowing number"),
        # An element of an array is not an answer (until 2026-12-03 it was read as one).
        ('[{"name": "Ada", "age": 36}]x', "an array element"),
        ("{'name': 'Ada', 'age': 36}", "Python, not JSON"),
        ('{"name": "Ada", "age": 36', "an unclosed object"),
        ('{"name": "Ada", "age": ' + "1" * 5000 + "}", "an integer past Python's digit limit"),
    ],
)
def test_crafted_answers_score_zero(verifier, completion, why):
    assert verifier(completion, SAMPLE) == 0.0, why


def test_one_equals_one_point_zero_but_key_order_does_not_matter(verifier):
    assert verifier('{"age": 36.0, "name": "Ada"}', SAMPLE) == 1.0


def test_per_field_credit_counts_the_expected_fields():
    v = JsonSchemaVerifier(per_field=True)
    score = v.score('{"name": "Ada", "age": 35, "extra": 1}', SAMPLE)
    assert score.reward == 0.5 and score.detail == "1/2 fields equal"
    assert v('{"name": "Ada", "age": -1}', SAMPLE) == 0.0  # breaks the schema: nothing


def test_braces_in_prose_and_in_strings_do_not_hide_the_object():
    text = 'a set {1, 2 and {x} then {"s": "}{\\"", "n": {"m": 1}} done'
    assert final_object(text, 10_000) == ({"s": '}{"', "n": {"m": 1}}, "")
    assert object_spans("{{}") == [(1, 3)]


@pytest.mark.parametrize(
    "text",
    ['{"' + "{" * 50_000, "{" * 100_000, '{"a":' * 30_000, ('{"a": [' * 10 + '"x') * 5_000],
)
def test_crafted_text_is_searched_in_bounded_time(text):
    started = time.monotonic()
    assert final_object(text, 10**6)[0] is None
    assert time.monotonic() - started < 2.0


def test_a_backtracking_pattern_in_the_schema_times_out_to_zero():
    v = JsonSchemaVerifier(timeout_s=1.0)
    sample = {"schema": {"properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}}
    started = time.monotonic()
    score = v.score('{"s": "' + "a" * 40 + '!"}', sample)
    assert score.reward == 0.0 and "timeout" in score.detail
    assert time.monotonic() - started < 1.0 + 2.0
    assert v('{"s": "aaa"}', sample) == 1.0  # a fresh worker answers the next check
    v.close()


def test_text_past_max_chars_scores_zero():
    v = JsonSchemaVerifier(max_chars=100)
    assert v.score(" " * 200 + '{"name": "Ada", "age": 36}', SAMPLE).detail.startswith("answer")


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({"id": "s"}, "field 'schema' is missing"),
        ({"id": "s", "schema": [1]}, "field 'schema' is a list"),
        ({"id": "s", "schema": "{not json"}, "is a string but not JSON"),
        ({"id": "s", "schema": {"type": 5}}, "is not a valid schema"),
        ({"id": "s", "schema": {"$ref": "https://example.com/s.json"}}, "not a valid schema"),
    ],
)
def test_malformed_samples_are_one_line_data_errors(verifier, sample, message):
    with pytest.raises(DataError) as info:
        verifier.score('{"a": 1}', sample)
    assert message in str(info.value) and "'s'" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_schema_given_as_a_json_string_is_read(verifier):
    assert verifier('{"name": "Ada", "age": 36}', {"schema": json.dumps(PERSON)}) == 1.0


def test_without_jsonschema_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    v = JsonSchemaVerifier().for_worker()  # inline, so the missing module is this process's
    with pytest.raises(ConfigError, match=r"rlvr\[structured\]"):
        v('{"a": 1}', {"schema": {}})
