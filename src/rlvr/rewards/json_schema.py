"""JSON-schema verifier (`json_schema`): structured output, validated and optionally compared.

    reward = 0                       no JSON object, or it breaks the schema
    reward = 1                       it satisfies the schema and the sample has no "expected"
    reward = [object == expected]    per_field=False (the default): exact comparison
    reward = matching fields / len(expected)   per_field=True, for an "expected" object

The object: the last top-level `{...}` in the text after the reasoning (rewards/structured.py)
that parses as JSON; prose and code fences around it are ignored, and an earlier object is not
the answer. Strict JSON only: no NaN or Infinity (nor 1e999, which overflows), no duplicate
keys (parsers disagree on which one wins), nesting and size bounded (`max_chars` of text are
searched). Only an object is an answer: a top-level array or number is not.

Validation uses the `jsonschema` library (`pip install 'rlvr[structured]'`) with the validator
the schema's `$schema` names (the newest draft by default) and format checking on (`"format":
"date"`, `"email"`, ...: a malformed value fails). A schema the library rejects is a DataError
naming the sample; so is a `$ref` it cannot resolve (remote references are never fetched).
Validation runs in a worker process killed after `timeout_s`: a schema's `pattern` is a regex
that can backtrack for hours on a crafted string.

Comparison: JSON values (rewards.code.json_equal): `true` is not `1`, `1` equals `1.0`, object
key order does not matter. Per field: each top-level key of "expected" scores when the object
has an equal value there.

Sample: {"schema": object or JSON string, "expected": JSON value (optional)}.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.base import Score
from rlvr.rewards.code import json_equal
from rlvr.rewards.structured import CheckTimeout, IsolatedCheck, after_reasoning

EXTRA_HINT = "pip install 'rlvr[structured]' (or pip install jsonschema)"
MAX_DEPTH = 64
MAX_RESCANS = 16
_SPECIAL = re.compile(r'[{}"\\]')


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Duplicate("duplicate key")
    return obj


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 is valid JSON syntax, but not a number Python keeps
        raise ValueError(f"{text[:20]} overflows a float")
    return value


def parse_json(text: str) -> Any:
    """Strict JSON: ValueError (or RecursionError) on anything else."""
    return json.loads(
        text,
        object_pairs_hook=_no_duplicates,
        parse_constant=_reject_constant,
        parse_float=_finite_float,
    )


def object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level balanced `{...}` outside JSON strings, in order.

    An unclosed `{` (prose such as "a set {1, 2") is skipped by scanning again from the next
    `{`; after `MAX_RESCANS` scans that reach the end unclosed the search stops (crafted text
    then has no object), and nesting deeper than MAX_DEPTH is skipped, so the work stays a
    small multiple of the text's length."""
    spans: list[tuple[int, int]] = []
    begin, rescans = 0, 0
    while rescans <= MAX_RESCANS:
        start = text.find("{", begin)
        if start < 0:
            break
        depth, in_string, skip_to, resume = 0, False, 0, None
        for match in _SPECIAL.finditer(text, start):
            i, c = match.start(), match.group()
            if i < skip_to:
                continue
            if in_string:
                if c == "\\":
                    skip_to = i + 2
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "{":
                depth += 1
                if depth > MAX_DEPTH:
                    resume = i + 1
                    break
            elif c == "}":
                depth -= 1
                if depth == 0:
                    spans.append((start, i + 1))
                    resume = i + 1
                    break
        if resume is None:
            rescans += 1
            resume = start + 1
        begin = resume
    return spans


def final_object(completion: str, max_chars: int) -> tuple[dict[str, Any] | None, str]:
    """(the last top-level JSON object after the reasoning, or None; why not)."""
    text = after_reasoning(completion)
    if text is None:
        return None, "no answer: the reasoning is not closed"
    if len(text) > max_chars:
        return None, f"answer longer than {max_chars} characters"
    for start, end in reversed(object_spans(text)):
        try:
            value = parse_json(text[start:end])
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value, ""
    return None, "no JSON object"


def _validator(_: Any) -> Callable[[tuple[Any, Any]], tuple[str, str]]:
    """Worker side: (schema, instance) -> ("ok" | "invalid" | "bad_schema" | "missing", text)."""
    try:
        import jsonschema
        from referencing.exceptions import Unresolvable
    except ImportError:
        return lambda payload: ("missing", EXTRA_HINT)

    def validate(payload: tuple[Any, Any]) -> tuple[str, str]:
        schema, instance = payload
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
            error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        except jsonschema.exceptions.SchemaError as e:
            return "bad_schema", " ".join(e.message.split())[:200]
        except Unresolvable as e:
            return "bad_schema", f"cannot resolve {e}"[:200]
        if error is None:
            return "ok", ""
        where = "/".join(str(p) for p in error.absolute_path)
        return "invalid", (f"at /{where}: " if where else "") + " ".join(error.message.split())

    return validate


class JsonSchemaVerifier:
    """`(completion, sample) -> float in [0, 1]`; see the module docstring. per_field: partial
    credit over the fields of an "expected" object; timeout_s: the limit for one validation;
    max_chars: longer text after the reasoning scores 0; isolate: False validates inline."""

    def __init__(
        self,
        per_field: bool = False,
        timeout_s: float = 5.0,
        max_chars: int = 100_000,
        isolate: bool = True,
    ) -> None:
        self.per_field, self.timeout_s, self.max_chars = per_field, timeout_s, max_chars
        self.check = IsolatedCheck(
            f"{__name__}:_validator",
            None,
            timeout_s,
            isolate=isolate,
            on_crash=("invalid", "the validator crashed"),
        )

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        schema, expected = _schema_and_expected(sample)
        value, why = final_object(completion, self.max_chars)
        if value is None:
            return Score(0.0, why)
        try:
            kind, message = self.check((schema, value))
        except CheckTimeout as e:
            return Score(0.0, f"validation {e}")
        if kind == "missing":
            raise ConfigError(f"json_schema verifier needs jsonschema: {message}")
        if kind == "bad_schema":
            raise DataError(f"{_where(sample)}: field 'schema' is not a valid schema: {message}")
        if kind != "ok":
            return Score(0.0, f"schema: {message}"[:200])
        if expected is _NOTHING:
            return Score(1.0, "valid")
        if self.per_field and isinstance(expected, dict) and expected:
            same = [k for k in expected if k in value and json_equal(value[k], expected[k])]
            return Score(len(same) / len(expected), f"{len(same)}/{len(expected)} fields equal")
        equal = json_equal(value, expected)
        return Score(1.0 if equal else 0.0, "valid, equal" if equal else "valid, not equal")

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def for_worker(self) -> JsonSchemaVerifier:
        """An inline copy for a worker process that is itself killed on timeout."""
        return JsonSchemaVerifier(self.per_field, self.timeout_s, self.max_chars, isolate=False)

    def close(self) -> None:
        self.check.close()


_NOTHING = object()


def _where(sample: Mapping[str, Any]) -> str:
    return f"json_schema verifier: sample {str(sample.get('id', '?'))[:80]!r}"


def _schema_and_expected(sample: Mapping[str, Any]) -> tuple[Any, Any]:
    """The sample's schema (an object, or a JSON string of one) and expected value."""
    schema = sample.get("schema")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            message = f"{_where(sample)}: field 'schema' is a string but not JSON ({e})"
            raise DataError(message) from None
    if not isinstance(schema, (dict, bool)):
        what = "is missing" if schema is None else f"is a {type(schema).__name__}"
        raise DataError(f"{_where(sample)}: field 'schema' {what} (expected a JSON schema object)")
    expected = sample.get("expected", _NOTHING)
    return schema, expected


# "json_schema" in the registry; its worker process starts on the first check.
json_schema_reward = JsonSchemaVerifier()
