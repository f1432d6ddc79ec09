"""JSON-schema verifier (`json_schema`): structured output, validated and optionally compared.

    reward = 0                       no JSON object, or it breaks the schema
    reward = 1                       it satisfies the schema and the sample has no "expected"
    reward = [object == expected]    per_field=False (the default): exact comparison
    reward = matching fields / len(expected)   per_field=True, for an "expected" object

The answer: the last top-level balanced `{...}` in the text after the reasoning
(rewards/structured.py); prose and code fences around it are ignored. When that last `{...}` is
not strict JSON there is no answer: an earlier object never stands in for it, or a completion
could be graded on one object while a lenient reader (Python's own `json.loads` takes NaN and
the last of duplicate keys) reads another. Strict JSON: no NaN or Infinity (nor 1e999, which
overflows), no duplicate keys, no lone surrogate (`"\\ud800"`), at most MAX_DEPTH levels of
objects and arrays, `max_chars` of text searched. Only an object is an answer: a top-level array
or number is not, and neither is an object that stands as an element of one (`[{"n": 1}]`,
`[{"n": 0}, {"n": 1}]`, `{"n": 0}, {"n": 1}]`: `in_a_sequence`).

Validation uses the `jsonschema` library (`pip install 'rlvr[structured]'`, which brings
`regress` for ECMA-262 patterns) with the validator the schema's `$schema` names (the newest
draft when it names none or one jsonschema does not know) and format checking on. It never
reads the network or the filesystem: references resolve only inside the schema itself and
against the metaschemas jsonschema bundles, through a `referencing.Registry` whose retrieve
function refuses every URI (a `$schema` URI is never dereferenced either).

Bad schemas: a schema that is not plain JSON within MAX_SCHEMA_DEPTH levels (NaN as a
`maximum` would pass every number) is a DataError naming the sample, as is one the library
rejects (a `pattern` that is not ECMA-262, such as Python's `(?P<x>a)` or `(?i)`), a reference
that does not resolve inside it, and any other failure of the validation (a `{"$ref": "#"}`
loop past Python's recursion limit, a pointer into a string): the answer is plain bounded JSON,
so the schema is the cause, and its owner is the one to hear of it. Raised on the completion
that reaches the fault, it is that completion's failure (the Scorer scores it 0 and counts it),
not the run's end. Validation runs in a worker process killed after `timeout_s` (a schema's
`pattern` is a regex that can backtrack for hours on a crafted string); past it, or when the
worker crashes, the answer scores 0.

Where Python's reading would pass answers the schema's author meant to refuse, the worker reads
as JSON Schema does (rewards/json_schema/ecma.py): every pattern, wherever the schema puts it
(`pattern`, `patternProperties`, under `$ref` to any part of the schema), is matched as
ECMA-262 (`$` is the end of the string, `\\d` is [0-9]); `multipleOf` is exact decimal
arithmetic. Formats are narrowed (rewards/json_schema/formats.py): no invisible or
non-ASCII character where the format's grammar has none, stricter `email`, `uuid`, and `regex`.

Comparison: JSON values (rewards.code.json_equal): `true` is not `1`, `1` equals `1.0`, object
key order does not matter. Per field: each top-level key of "expected" scores when the object
has an equal value there.

Sample: {"schema": object or strict-JSON string, "expected": JSON value (optional)}.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.base import Score
from rlvr.rewards.code import json_equal
from rlvr.rewards.structured import CheckTimeout, IsolatedCheck, after_reasoning

EXTRA_HINT = "pip install 'rlvr[structured]' (or pip install jsonschema regress)"
MAX_DEPTH = 64  # objects and arrays in an answer; validation recursion stays far from the limit
MAX_SCHEMA_DEPTH = 128  # objects and arrays in a schema; real ones nest a few dozen at most
MAX_RESCANS = 16
MESSAGE_CHARS = 200
JSON_SPACE = " \t\r\n"
# The characters a JSON value (other than true, false and null) ends or starts with.
_VALUE_END = frozenset('}]"0123456789')
_VALUE_START = frozenset('{["-0123456789')
_SPECIAL = re.compile(r'[{}"\\]')
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def json_problem(value: Any, max_depth: int) -> str:
    """Why `value` is not plain JSON within `max_depth` levels of objects and arrays, or "".

    Plain JSON: dict (str keys), list, str without lone surrogates, int, finite float, bool,
    None. Iterative, and a container is walked again only when met deeper than before, so a
    deep value costs its size and one that shares sub-objects (a schema built in Python) at
    most its size times max_depth."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    deepest: dict[int, int] = {}  # container id -> the greatest depth it was walked at
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "has a lone surrogate in a string"
        elif isinstance(item, (dict, list)):
            if depth >= max_depth:  # also how a container that holds itself ends
                return f"nests deeper than {max_depth} levels"
            if deepest.get(id(item), -1) >= depth:
                continue
            deepest[id(item)] = depth
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        return f"has a non-string key ({type(key).__name__})"
                    stack.append((key, depth))
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"holds {item}"
        elif not (item is None or isinstance(item, (bool, int))):
            return f"holds a {type(item).__name__}"
    return ""


def object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level balanced `{...}` outside JSON strings, in order.

    An unclosed `{` (prose such as "a set {1, 2") is skipped by scanning again from the next
    `{`; after `MAX_RESCANS` scans that reach the end unclosed the search stops (crafted text
    then has no object). A `{...}` nested deeper than MAX_DEPTH ends the search as the last
    span, with end -1: it is not an answer, and what follows it is not looked at (resuming
    inside it would let an object nested in a too-deep one pass for a top-level answer). So
    the work stays a small multiple of the text's length."""
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
                    spans.append((start, -1))
                    return spans
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


_COMMAS = ",\uff0c\u3001\ufe50\uff64\u060c"  # and full-width, ideographic, Arabic commas
_OPENS, _CLOSES = "[\uff3b", "]\uff3d"


def _blank(ch: str) -> bool:
    """Space as a reader sees it: any whitespace, separator or invisible format character."""
    return ch.isspace() or unicodedata.category(ch) in ("Cf", "Zs", "Zl", "Zp", "Cc")


def _rstrip_blank(text: str) -> str:
    end = len(text)
    while end and _blank(text[end - 1]):
        end -= 1
    return text[:end]


def _lstrip_blank(text: str) -> str:
    start = 0
    while start < len(text) and _blank(text[start]):
        start += 1
    return text[start:]


def in_a_sequence(text: str, start: int, end: int) -> bool:
    """Whether the object at text[start:end] stands where JSON puts an array element: after
    `[`, before `]`, or beside a comma with a JSON value on its other side (any blank between:
    whitespace, no-break and zero-width spaces, controls; full-width brackets and commas count).
    `[{"n": 0}, {"n": 1}]` names two answers (a hedge), `[{"n": 1}]` is an array,
    which is not an answer, and neither is the last object of a list that is not whole
    (`{"n": 0}, {"n": 1}]`). Prose commas stay prose: `Sure, {"n": 1}, as asked.`"""
    head = _rstrip_blank(text[:start])
    tail = _lstrip_blank(text[end:])
    if head[-1:] and head[-1] in _OPENS or tail[:1] and tail[0] in _CLOSES:
        return True
    if head[-1:] and head[-1] in _COMMAS and _rstrip_blank(head[:-1])[-1:] in _VALUE_END:
        return True
    return bool(tail[:1]) and tail[0] in _COMMAS and _lstrip_blank(tail[1:])[:1] in _VALUE_START


def final_object(completion: str, max_chars: int) -> tuple[dict[str, Any] | None, str]:
    """(the answer: the last top-level `{...}` after the reasoning, if it is strict JSON within
    MAX_DEPTH levels; else None, and why not)."""
    text = after_reasoning(completion)
    if text is None:
        return None, "no answer: the reasoning is not closed"
    if len(text) > max_chars:
        return None, f"answer longer than {max_chars} characters"
    spans = object_spans(text)
    if not spans:
        return None, "no JSON object"
    start, end = spans[-1]
    if end < 0:
        return None, f"no answer: the last object nests deeper than {MAX_DEPTH} levels"
    if in_a_sequence(text, start, end):
        return None, "no answer: the last object is an element of an array or a list"
    try:
        value = parse_json(text[start:end])
    except RecursionError:
        return None, "no answer: the last object nests too deep to parse"
    except ValueError as e:
        return None, f"no answer: the last {{...}} is not strict JSON ({e})"[:MESSAGE_CHARS]
    problem = json_problem(value, MAX_DEPTH)
    if problem:
        return None, f"no answer: the last object {problem}"
    return value, ""


# --- worker side ----------------------------------------------------------------------------


def _refuse(uri: str) -> Any:
    """The Registry's retrieve function: nothing outside the schema is ever fetched."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class: mypy misses __init__


def local_registry() -> Any:
    """A `referencing.Registry` that refuses to retrieve any URI. jsonschema adds the
    metaschemas it bundles to it; everything else must be inside the schema."""
    from referencing import Registry

    return Registry(retrieve=_refuse)  # type: ignore[call-arg]  # attrs class: mypy misses __init__


def _reference(error: Exception) -> str:
    """The reference an Unresolvable names, as the schema would write it."""
    from referencing.exceptions import InvalidAnchor, NoSuchAnchor, PointerToNowhere

    # jsonschema wraps referencing's error in its own, raised from it.
    cause = error.__cause__ if isinstance(error.__cause__, Exception) else error
    ref = str(getattr(cause, "ref", ""))
    if isinstance(cause, PointerToNowhere):
        return "#" + ref
    if isinstance(cause, (NoSuchAnchor, InvalidAnchor)):
        return f"{ref}#{cause.anchor}"
    return ref


def _one_line_text(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_CHARS]


def _validator(_: Any) -> Callable[[tuple[Any, Any]], tuple[str, str]]:
    """Worker side: (schema, instance) -> (kind, text); kind is "ok", "invalid" (the instance
    breaks the schema), "bad_schema" (the sample's fault: text says why) or "missing"."""
    try:
        import jsonschema
        from referencing.exceptions import Unresolvable

        from rlvr.rewards.json_schema import ecma
        from rlvr.rewards.json_schema.formats import format_checker

        ecma.install()
    except ImportError:
        return lambda payload: ("missing", EXTRA_HINT)

    registry = local_registry()
    newest = jsonschema.validators.validator_for({})
    classes: dict[Any, tuple[Any, Any]] = {}  # draft -> (its ECMA class, its format checker)

    def prepared(cls: Any) -> tuple[Any, Any]:
        if cls not in classes:
            classes[cls] = (ecma.ecma_validator(cls), format_checker(cls))
        return classes[cls]

    def validate(payload: tuple[Any, Any]) -> tuple[str, str]:
        schema, instance = payload
        try:
            with ecma.ecma_patterns():
                # `default` given: an unknown `$schema` reads as the newest draft, without the
                # warning jsonschema prints for it.
                cls = jsonschema.validators.validator_for(schema, default=newest)
                meta_class = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
                meta = meta_class(
                    cls.META_SCHEMA, registry=registry, format_checker=prepared(meta_class)[1]
                )
                problem = jsonschema.exceptions.best_match(meta.iter_errors(schema))
                if problem is not None:
                    why = _one_line_text(problem.message)
                    return "bad_schema", "is not a valid schema: " + why
                ecma_class, checker = prepared(cls)
                validator = ecma_class(schema, registry=registry, format_checker=checker)
                error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        except Unresolvable as e:
            ref = _one_line_text(repr(_reference(e)))
            why = f"is not a valid schema: its reference {ref} does not resolve inside it"
            return "bad_schema", why + " (references are never fetched)"
        except ecma.PatternError as e:
            return "bad_schema", f"is not a valid schema: {_one_line_text(str(e))}"
        except RecursionError:
            why = "takes validation past Python's recursion limit (a $ref cycle such as"
            return "bad_schema", why + ' {"$ref": "#"}?)'
        except Exception as e:  # noqa: BLE001 - the answer is plain bounded JSON: the schema
            return "bad_schema", _one_line_text(f"made the validator raise {e!r}")
        if error is None:
            return "ok", ""
        where = "/".join(str(p) for p in error.absolute_path)
        return "invalid", _one_line_text((f"at /{where}: " if where else "") + error.message)

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
            raise DataError(f"{_where(sample)}: field 'schema' {message}")
        if kind != "ok":
            return Score(0.0, f"schema: {message}"[:MESSAGE_CHARS])
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
    """The sample's schema (an object, or a strict-JSON string of one) and expected value.

    The schema must be plain JSON within MAX_SCHEMA_DEPTH levels (checked here, before it is
    sent to the worker): NaN as a `maximum` would pass every number, and a schema nested past
    Python's recursion limit would fail in the pickler instead of as a DataError."""
    schema = sample.get("schema")
    if isinstance(schema, str):
        try:
            schema = parse_json(schema)
        except (ValueError, RecursionError) as e:
            why = _one_line_text(str(e) or type(e).__name__)
            message = f"{_where(sample)}: field 'schema' is a string but not JSON ({why})"
            raise DataError(message) from None
    if not isinstance(schema, (dict, bool)):
        what = "is missing" if schema is None else f"is a {type(schema).__name__}"
        raise DataError(f"{_where(sample)}: field 'schema' {what} (expected a JSON schema object)")
    problem = json_problem(schema, MAX_SCHEMA_DEPTH)
    if problem:
        raise DataError(f"{_where(sample)}: field 'schema' is not plain JSON: it {problem}")
    expected = sample.get("expected", _NOTHING)
    return schema, expected


# "json_schema" in the registry; its worker process starts on the first check.
json_schema_reward = JsonSchemaVerifier()
