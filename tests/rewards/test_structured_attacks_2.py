"""More completions and schemas crafted against the structured-output verifiers (`json_schema`,
`regex`, `format`): the red team's second round (2026-12-03) and variations of it.

As in test_structured_attacks.py: each reject case would score 1 if the defence it targets
were missing, each keep case is a legitimate answer that must still score 1.
"""

from __future__ import annotations

import json
import re
import reprlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rlvr.errors import DataError
from rlvr.rewards.format import FormatVerifier
from rlvr.rewards.json_schema import JsonSchemaVerifier
from rlvr.rewards.regex_match import RegexVerifier, final_answer

pytest.importorskip("jsonschema")
pytest.importorskip("regress")

TIMEOUT_S = 1.0
SLACK_S = 1.0  # a kill and a fork-server respawn


def short(value: Any) -> str:
    """A readable test id for a long completion."""
    text = ascii(value) if isinstance(value, str) else reprlib.repr(value)
    return text if len(text) <= 48 else f"{text[:40]}...[{len(text)}]"


def verdict(v: Any, completion: str, sample: dict) -> float | str:
    """The reward, or "DataError" (one line naming the sample); any other exception fails."""
    try:
        return v(completion, sample)
    except DataError as e:
        assert "\n" not in str(e) and repr(str(sample.get("id", "?"))) in str(e), str(e)
        return "DataError"


@pytest.fixture(scope="module")
def isolated() -> Iterator[JsonSchemaVerifier]:
    v = JsonSchemaVerifier(timeout_s=TIMEOUT_S)
    yield v
    v.close()


@pytest.fixture(scope="module", params=["isolated", "inline"])
def verifier(request: pytest.FixtureRequest, isolated: JsonSchemaVerifier) -> JsonSchemaVerifier:
    return isolated if request.param == "isolated" else isolated.for_worker()


def string_schema(keyword: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"s": {"type": "string", **keyword}}, "required": ["s"]}


def check(v: Any, schema: Any, value: Any) -> float | str:
    return verdict(v, json.dumps({"s": value}), {"id": "e", "schema": schema})


A_END = {"type": "string", "pattern": "^a$"}


# --- every pattern, wherever the schema puts it, is ECMA-262 -----------------------------------


@pytest.mark.parametrize(
    ("schema", "completion"),
    [
        ({"components": {"schemas": {"N": A_END}}, "properties": {"s": {
            "$ref": "#/components/schemas/N"}}}, '{"s": "a\\n"}'),
        ({"components": {"schemas": {"N": {"properties": {"s": A_END}}}},
          "$ref": "#/components/schemas/N"}, '{"s": "a\\n"}'),
        ({"x": {"$defs": {"p": A_END}}, "properties": {"s": {"$ref": "#/x/$defs/p"}}},
         '{"s": "a\\n"}'),
        ({"x": {"patternProperties": {"^a$": {}}, "additionalProperties": False}, "$ref": "#/x"},
         '{"a\\n": 1}'),
        ({"x": {"propertyNames": {"pattern": "^[a-z]+$"}}, "$ref": "#/x"}, '{"ab\\n": 1}'),
        ({"x": {"patternProperties": {"^a$": {}}, "unevaluatedProperties": False},
          "$ref": "#/x"}, '{"a\\n": 1}'),
        ({"patternProperties": {"^a$": {}}, "unevaluatedProperties": False}, '{"a\\n": 1}'),
        ({"allOf": [{"patternProperties": {"^a$": {}}}], "unevaluatedProperties": False},
         '{"a\\n": 1}'),
        ({"$schema": "https://json-schema.org/draft/2019-09/schema",
          "patternProperties": {"^a$": {}}, "unevaluatedProperties": False}, '{"a\\n": 1}'),
        ({"dependentSchemas": {"k": {"properties": {"s": A_END}}}}, '{"k": 1, "s": "a\\n"}'),
        ({"if": {"required": ["k"]}, "then": {"properties": {"s": A_END}}},
         '{"k": 1, "s": "a\\n"}'),
        ({"properties": {"s": {"prefixItems": [A_END]}}}, '{"s": ["a\\n"]}'),
        ({"properties": {"s": {"contains": A_END}}}, '{"s": ["a\\n"]}'),
        ({"properties": {"s": {"not": {"not": A_END}}}}, '{"s": "a\\n"}'),
        ({"patternProperties": {"^(a)\\1$": {}, "^(b)\\1$": {}}, "additionalProperties": False},
         '{"b": 1}'),  # joined with "|", the second \\1 would name the first pattern's group
    ],
    ids=short,
)  # fmt: skip
def test_dollar_is_the_end_of_the_string_wherever_the_pattern_is(verifier, schema, completion):
    assert verdict(verifier, completion, {"id": "p", "schema": schema}) == 0.0


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ("^\\d{3}$", "١٢٣"),  # Arabic-Indic digits are \\d in Python
        ("^\\d{3}$", "５５５"),  # so are full-width ones
        ("^\\w+$", "é"),
        ("^\\w+$", "a\u0301"),
        ("^.$", "\r"),
        ("^.$", "\u2028"),
        ("^a.b$", "a\u2029b"),
        ("^\\S+$", "a\ufeffb"),  # U+FEFF is \\s in ECMA-262, not in Python
        ("^\\S+$", "a\u00a0b"),
        ("^[^\\s]+$", "a\u3000b"),
        ("^\\bab$", "ab\n"),
        ("^[0-9]+$", "12\n"),
    ],
    ids=short,
)
def test_ecma_classes_are_ascii(verifier, pattern, value):
    assert check(verifier, string_schema({"pattern": pattern}), value) == 0.0


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ("^\\d{3}$", "123"),
        ("^\\p{L}+$", "été"),  # Unicode mode: Python refused \\p
        ("^(?<y>\\d{4})-\\k<y>$", "2024-2024"),  # ECMA named groups
        ("^[\\-_a-z]+$", "a-b_c"),
        ("^\\-?[0-9]+$", "-5"),  # an identity escape outside Unicode mode (Annex B)
        ("^\\S+$", "é"),
        ("^.$", "😀"),
    ],
    ids=short,
)
def test_ecma_patterns_that_python_reads_otherwise_still_match(verifier, pattern, value):
    assert check(verifier, string_schema({"pattern": pattern}), value) == 1.0


@pytest.mark.parametrize(
    "pattern",
    ["(?P<x>a)", "(?i)abc", "(?m)^a$", "a++", "(?>a)", "(?#c)a", "[[:alpha:]]+)"],
    ids=short,
)
def test_python_only_pattern_syntax_is_a_bad_schema(verifier, pattern):
    assert check(verifier, string_schema({"pattern": pattern}), "abc") == "DataError"
    hidden = {"x": {"pattern": pattern}, "properties": {"s": {"$ref": "#/x"}}}  # not metaschema'd
    assert check(verifier, hidden, "abc") == "DataError"
    named = {"patternProperties": {pattern: {}}}
    assert verdict(verifier, '{"abc": 1}', {"id": "e", "schema": named}) == "DataError"


@pytest.mark.parametrize(
    "pattern",
    ["|".join(["a"] * 60_000), "(" * 5000 + ")" * 5000, "(?:" * 101 + "a" + ")" * 101],
    ids=short,
)
def test_a_pattern_that_would_overflow_regress_is_refused_not_a_crash(verifier, pattern):
    """regress's parser recurses: 50,000 alternatives crash the process with a segfault."""
    assert check(verifier, string_schema({"format": "regex"}), pattern) == 0.0
    assert check(verifier, string_schema({"pattern": pattern}), "a") == "DataError"


def test_without_regress_the_error_names_the_extra(monkeypatch):
    from rlvr.errors import ConfigError

    monkeypatch.setitem(sys.modules, "regress", None)
    with pytest.raises(ConfigError, match="regress"):
        JsonSchemaVerifier(isolate=False)('{"s": "a"}', {"schema": string_schema({})})


def test_a_backtracking_ecma_pattern_still_stops_at_the_limit(isolated):
    isolated("{}", {"schema": {}})
    started = time.monotonic()
    value = "a" * 50 + "!"
    assert check(isolated, string_schema({"pattern": "^(a|a)+$"}), value) == 0.0
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert check(isolated, string_schema({"pattern": "^a+$"}), "aaa") == 1.0


def test_the_stand_in_for_re_changes_nothing_outside_the_verifier():
    import jsonschema

    from rlvr.rewards.json_schema import ecma

    ecma.install()
    plain = jsonschema.Draft202012Validator({"pattern": "^a$"})
    assert plain.is_valid("a\n")  # jsonschema's own reading, for any other user in the process
    with ecma.ecma_patterns():
        assert not plain.is_valid("a\n")


def test_every_jsonschema_module_that_matches_patterns_is_covered():
    """A jsonschema release that calls `re.search` in another module would match there as
    Python: this test names it."""
    import importlib
    from pathlib import Path

    import jsonschema

    from rlvr.rewards.json_schema import ecma

    ecma.install()
    root = Path(jsonschema.__file__).parent
    for path in root.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        if re.search(r"\bre\.(search|match|fullmatch|compile)\(", source):
            name = f"jsonschema.{path.stem}"
            if name in ("jsonschema._format", "jsonschema.exceptions"):
                continue  # their own fixed patterns (dates, JSON paths), not a schema's
            assert name in ecma.PATTERN_MODULES, name
            assert importlib.import_module(name).re is not re, name


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "value"),
    [
        ("idn-email", "\u200b@example.com"),
        ("idn-email", "ada\u200d@example.com"),
        ("idn-email", "ada@exa\u200bmple.com"),
        ("idn-email", "ada\u00a0@example.com"),
        ("idn-email", "\u3164@example.com"),
        ("idn-email", "ada\u202e@example.com"),
        ("idn-email", "ada@example.com\ufeff"),
        ("email", "ada@example.com\u200b"),
        ("email", "ada\u0430@example.com"),  # a Cyrillic a
        ("idn-hostname", "exa\u200bmple.com"),
        ("idn-hostname", "example.com\u3000"),
        ("hostname", "a\u200b.com"),
        ("hostname", "exa mple.com"),
        ("uri", "http://exa mple.com"),
        ("uri", "http://example.com/\u200b"),
        ("uri-reference", "/a\u00a0b"),
        ("iri", "http://ü\u200b.com"),
        ("date", "2024-01-05\u200b"),
        ("date", "٢٠٢٤-01-05"),
        ("date-time", "\ufeff2024-01-05T10:00:00Z"),
        ("date-time", "2024-01-05T10:00:00Z\u2028"),
        ("time", "10:00:00Z\u00a0"),
        ("duration", "P1D\u200b"),
        ("ipv4", "192.0.2.1\u200b"),
        ("ipv6", "::1\u2060"),
        ("uuid", "12345678-1234-1234-1234-123456789abc\u200b"),
        ("json-pointer", "/a\u200b"),
        ("relative-json-pointer", "0/a\u200b"),
        ("regex", "^a\u200b$"),
        ("regex", "(?P<x>a)"),
        ("regex", "(?i)a"),
        ("regex", "a++"),
        ("hostname", "-a.example.com"),  # a coarse grammar where jsonschema has no checker
        ("hostname", "a_b.example.com"),
        ("duration", "P"),
        ("duration", "1D"),
        ("uri", "example.com"),
        ("uri", "http://a/%zz"),
        ("uri-reference", "a b"),
    ],
    ids=short,
)
def test_format_values_with_invisible_or_foreign_characters_are_malformed(verifier, fmt, value):
    assert check(verifier, string_schema({"format": fmt}), value) == 0.0, (fmt, value)


@pytest.mark.parametrize(
    ("fmt", "value"),
    [
        ("idn-email", "ада@пример.рф"),
        ("idn-email", "ada@example.com"),
        ("idn-hostname", "пример.рф"),
        ("email", "ada@example.com"),
        ("json-pointer", "/a b"),
        ("regex", "^hello world$"),
        ("regex", "(?<year>\\d{4})"),  # ECMA-262, which Python's re refused
        ("regex", "\\p{L}+"),
        ("date-time", "2024-01-05T10:00:00Z"),
        ("uri", "https://example.com/a?b=c#d"),
        ("hostname", "example.com"),
        ("duration", "P1Y2M3DT4H5M6S"),
        ("duration", "P2W"),
        ("uri", "urn:isbn:0451450523"),
        ("uri-reference", "../a?b#c"),
        ("uuid", "12345678-1234-1234-1234-123456789abc"),
        ("phone", "anything: an unknown format is an annotation"),
    ],
    ids=short,
)
def test_legitimate_format_values_still_pass(verifier, fmt, value):
    assert check(verifier, string_schema({"format": fmt}), value) == 1.0, (fmt, value)


# --- which object is the answer: not an element of an array ---------------------------------


ONE = {"type": "object", "properties": {"n": {"const": 1}}, "required": ["n"]}


@pytest.mark.parametrize(
    "completion",
    [
        '[{"n": 1}]',
        '[1, {"n": 1}]',
        '{"n": 1}]',
        '[{"n": 0}, {"n": 1}]',
        '```json\n[\n  {"n": 0},\n  {"n": 1}\n]\n```',
        '{"n": 0},\n{"n": 1}',
        '{"n": 1}, {"n": 0}',
        '<think>[{"n": 0},</think>{"n": 1}]',
        '{"wrapper": [{"n": 1}]}',
        '{"n": [{"n": 1}]}',
        '{"n": 1}, 5',
        '"x", {"n": 1}',
        '{"n": 1} ]',
        '[\n{"n": 1}',
        # the same hedge with a blank JSON does not know between: no-break, zero-width and
        # ideographic spaces, line and paragraph separators, controls, a BOM; full-width signs
        *(
            f'{{"n": 0}},{gap}{{"n": 1}}'
            for gap in "\u00a0\u2028\u3000\ufeff\u200b\x0b\x0c\x1c\x85"
        ),
        '{"n": 0}\u00a0, {"n": 1}',
        '{"n": 0}\uff0c{"n": 1}',
        '{"n": 0}\u3001{"n": 1}',
        '\uff3b{"n": 1}\uff3d',
    ],
    ids=short,
)
def test_an_object_in_an_array_is_not_the_answer(verifier, completion):
    assert verdict(verifier, completion, {"id": "a", "schema": ONE}) == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        '{"n": 1}',
        'Answer: {"n": 1}.',
        '```json\n{"n": 1}\n```',
        '\ufeff{"n": 1}',  # a BOM before the JSON is prose
        '[see note 1] {"n": 1}',
        '{"n": 0} (no, wait) {"n": 1}',  # the last object, as documented
        'Sure, {"n": 1}, as asked.',  # prose commas
        'true, {"n": 1}',
    ],
    ids=short,
)
def test_an_object_on_its_own_is_still_the_answer(verifier, completion):
    assert verdict(verifier, completion, {"id": "a", "schema": ONE}) == 1.0


# --- multipleOf is exact ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("divisor", "number", "reward"),
    [
        (0.7, "1e20", 0.0),  # float division: 1e20 / 0.7 is an integer-valued float
        (0.7, "1e308", 0.0),
        (0.7, "7e-324", 0.0),
        (0.7, "5e-324", 0.0),
        (0.1, "0.3", 1.0),  # 0.3 / 0.1 is 2.9999999999999996 in floats
        (0.01, "4.35", 1.0),
        (0.01, "4.351", 0.0),
        (3, str(10**30 + 1), 0.0),
        (3, str(3 * 10**30), 1.0),
        (0.5, str(10**400 + 1), 1.0),
        (1e-5, "0.00003", 1.0),
        (2.5, "7.5", 1.0),
        (2.5, "7.6", 0.0),
        (1, "1.0000000000000002", 0.0),
    ],
    ids=short,
)
def test_multiple_of_is_exact(verifier, divisor, number, reward):
    schema = {"properties": {"v": {"multipleOf": divisor}}}
    assert verdict(verifier, f'{{"v": {number}}}', {"id": "m", "schema": schema}) == reward


@pytest.mark.parametrize(
    ("completion", "schema", "why"),
    [
        ('{"n": NaN}', {}, "NaN"),
        ('{"n": Infinity}', {}, "Infinity"),
        ('{"n": 1e400}', {}, "1e400 overflows"),
        ('{"n": -1e400}', {}, "-1e400"),
        ('{"n": 1, "n": 1}', {}, "a duplicate key, even with one value"),
        ('{"n": 1, "\\u006e": 2}', {}, "a duplicate key by escape"),
        ('{"n": ' + "[" * 70 + "]" * 70 + "}", {}, "deeper than 64"),
        ('```json\n{"n": 1}\n```\nor {"n": 2}', ONE, "a later object in prose"),
        ('{"n": 1, "s": "a\\u0000"}', {"properties": {"s": {"format": "idn-email"}}}, "NUL"),
    ],
    ids=short,
)
def test_other_variations_score_zero(verifier, completion, schema, why):
    assert verdict(verifier, completion, {"id": "v", "schema": schema}) == 0.0, why


def test_a_reference_to_the_root_that_loops_is_a_data_error(verifier):
    schema = {"properties": {"a": {"$ref": "#"}}, "$ref": "#"}
    assert verdict(verifier, '{"a": 1}', {"id": "r", "schema": schema}) == "DataError"


# --- regex verifier --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def regex() -> Iterator[RegexVerifier]:
    v = RegexVerifier(timeout_s=TIMEOUT_S)
    yield v
    v.close()


@pytest.mark.parametrize(
    ("pattern", "completion"),
    [
        ("(?i)^yes$", "yeſ"),  # U+017F folds onto s
        ("(?i)k", "\u212a"),  # the Kelvin sign folds onto k
        ("(?i:yes)", "yeſ"),
        ("(?i)^hi$", "hı"),  # U+0131 dotless i
        ("(?i)^hi$", "Hİ"),  # U+0130
        ("yes", "<answer><answer>yes</answer>"),
        ("yes", "<answer>no</answer><answer>yes</answer>"),
        ("yes", "<ANSWER>no</ANSWER><answer>yes</answer>"),
        ("yes", "< answer >no</answer><answer>yes</answer>"),
        ("yes", "<answer>no</answer ><answer>yes</answer>"),
        ("yes", "<Answer>no</Answer>\n<answer>yes</answer>"),
        ("yes", '<answer id="1">no</answer><answer>yes</answer>'),
        ("yes", "<answer>no</answer></answer><answer>yes</answer>"),
        ("yes", "<answer/>yes"),
        ("yes", "<answer>yes</answer><answer>"),
        ("yes", "yes\x1c"),
        ("yes", "yes\x1f"),
        ("yes", "<answer>yes\x1d</answer>"),
        ("yes", "yes\u00a0"),
        ("yes", "\ufeffyes"),
        ("yes", "yes\u200b"),
        ("yes", "\u3000yes"),
        ("yes", "yes\u2028"),
        ("yes", "yes\x0b"),
        ("yes", "yes\x0c"),
        ("yes", "ye\u200bs"),
    ],
    ids=short,
)
def test_regex_attacks_score_zero(regex, pattern, completion):
    for v in (regex, regex.for_worker()):
        assert verdict(v, completion, {"id": "r", "pattern": pattern}) == 0.0


@pytest.mark.parametrize(
    ("pattern", "completion"),
    [
        ("(?i)^yes$", "YES"),
        ("(?i)^yes$", "<ANSWER>Yes</ANSWER>"),
        ("yes", "<answer>yes</answer> and again <answer> yes </answer>"),
        ("yes", "\t yes \r\n"),
        ("yes", "< answer >yes</ answer >"),
        ("^straße$", "straße"),
        ("(?i)^ſ$", "ſ"),  # a pattern that is not ASCII asked for it
        ("^\\w+$", "kırmızı"),  # Turkish, without case-insensitivity
    ],
    ids=short,
)
def test_regex_legitimate_answers_score_one(regex, pattern, completion):
    assert verdict(regex, completion, {"id": "r", "pattern": pattern}) == 1.0


def test_answer_tags_are_scanned_in_linear_time():
    for text in (
        "<answer" * 50_000,
        "< " * 100_000,
        "<answer " + "x" * 300_000,
        "</answer>" * 50_000,
    ):
        started = time.monotonic()
        final_answer(text)
        assert time.monotonic() - started < 1.0


# --- format verifier -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ["\u200b", "\ufeff", "\u3164", "\u115f", "\u2800", "\u0301", "\u00a0", "\u2060", "\u200d",
     "\U000e0020", "\u3000", "\u2028", "\x1c", " \u200b\n", "\u034f", "\ue000", "\u180e"],
    ids=short,
)  # fmt: skip
def test_format_blocks_of_invisible_characters_are_empty(content):
    fmt = FormatVerifier()
    assert fmt(f"<think>{content}</think><answer>5</answer>") == 0.0
    assert fmt(f"<think>ok</think><answer>{content}</answer>") == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        "<think>ok</think><answer>5</answer>\x1c",
        "\u3000<think>ok</think><answer>5</answer>",
        "<think>ok</think>\u2028<answer>5</answer>",
    ],
    ids=short,
)
def test_format_allows_only_ascii_whitespace_outside_the_blocks(completion):
    assert FormatVerifier()(completion) == 0.0


@pytest.mark.parametrize(
    "content", ["é", "٣", "a\u0301", "😀", "？", "\u200bx", "ok\u3164"], ids=short
)
def test_format_blocks_with_a_visible_character_count(content):
    assert FormatVerifier()(f"<think>{content}</think>\n<answer>{content}</answer>\n") == 1.0
