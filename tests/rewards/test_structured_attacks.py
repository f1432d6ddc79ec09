"""Completions and schemas crafted against the structured-output verifiers (`json_schema`,
`regex`), as a policy under RL pressure would find them.

Each reject case would score 1 if the defence it targets were missing; each keep case is a
legitimate answer that must still score 1. A verdict is a reward or a one-line DataError (the
Scorer counts that as a failure scoring 0); never 1 for an attack, never another exception,
never a wait past timeout_s + 1 s.

No network, no filesystem: a local HTTP server on 127.0.0.1 serves a permissive schema at every
path, and a file on disk holds one too; a verifier that fetched either would give the
completions below a 1 (the server records every request: there must be none).
"""

from __future__ import annotations

import http.server
import json
import os
import reprlib
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr.errors import DataError
from rlvr.rewards.json_schema import JsonSchemaVerifier
from rlvr.rewards.regex_match import RegexVerifier

pytest.importorskip("jsonschema")

TIMEOUT_S = 1.0
SLACK_S = 1.0  # a kill and a fork-server respawn
DRAFT_2019 = "https://json-schema.org/draft/2019-09/schema"
# Valid for anything, and holds every anchor the routes below ask for.
PERMISSIVE = {"$anchor": "a", "$dynamicAnchor": "meta", "$recursiveAnchor": True, "$defs": {}}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}
ADA = {"id": "ada", "schema": PERSON, "expected": {"name": "Ada", "age": 36}}
GOOD = '{"name": "Ada", "age": 36}'


@pytest.fixture(scope="module")
def isolated() -> Iterator[JsonSchemaVerifier]:
    v = JsonSchemaVerifier(timeout_s=TIMEOUT_S)
    yield v
    v.close()


@pytest.fixture(scope="module", params=["isolated", "inline"])
def verifier(request: pytest.FixtureRequest, isolated: JsonSchemaVerifier) -> JsonSchemaVerifier:
    """Both ways the verifier runs: in its own killable worker, and inline (the copy a
    VerifierPool worker uses)."""
    return isolated if request.param == "isolated" else isolated.for_worker()


def short(value: Any) -> str:
    """A test id that stays readable for a 10,000-character completion or a 500-level schema."""
    text = ascii(value) if isinstance(value, str) else reprlib.repr(value)
    return text if len(text) <= 48 else f"{text[:40]}...[{len(text)}]"


def verdict(v: Any, completion: str, sample: dict) -> float | str:
    """The reward, or "DataError" (checked to be one line naming the sample); any other
    exception fails the test."""
    try:
        return v(completion, sample)
    except DataError as e:
        assert "\n" not in str(e) and repr(str(sample.get("id", "?"))) in str(e), str(e)
        return "DataError"


class _Recorder(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps(PERMISSIVE).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    httpd.requests = []  # type: ignore[attr-defined]
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


# --- no network, no filesystem --------------------------------------------------------------


def test_the_server_would_see_a_fetch(server):
    """The proof below is only as good as the recorder: a plain fetch is recorded."""
    with urllib.request.urlopen(f"{server.url}/probe.json", timeout=5) as response:
        assert json.load(response) == PERMISSIVE
    assert server.requests == ["/probe.json"]
    server.requests.clear()


def _remote_routes(url: str) -> dict[str, dict]:
    """Schemas that only a fetch of `url` could make `{"a": 1}` valid against."""
    not_a_keyword = {"properties": {"a": {"$id": f"{url}/sub.json", "$recursiveRef": "#"}}}
    return {
        "$ref http": {"$ref": f"{url}/s.json"},
        "$ref with a pointer": {"$ref": f"{url}/s.json#/$defs"},
        "$ref to an anchor": {"$ref": f"{url}/s.json#a"},
        "relative $ref under a remote $id": {"$id": f"{url}/root.json", "$ref": "s.json"},
        "relative $ref under a remote $id, in a subschema": {
            "$id": f"{url}/dir/root.json",
            "properties": {"a": {"$ref": "../s.json"}},
        },
        "$ref inside $defs": {"$defs": {"r": {"$ref": f"{url}/s.json"}}, "$ref": "#/$defs/r"},
        "$ref in an anyOf branch": {"anyOf": [{"type": "string"}, {"$ref": f"{url}/s.json"}]},
        "$ref in not": {"not": {"not": {"$ref": f"{url}/s.json"}}},
        "$dynamicRef": {"$dynamicRef": f"{url}/s.json#meta"},
        "$dynamicRef under a remote $id": {"$id": f"{url}/root.json", "$dynamicRef": "s.json#meta"},
        "$recursiveRef under an $id no one crawled": {
            "$schema": DRAFT_2019,
            "$ref": "#/x-not-a-keyword",
            "x-not-a-keyword": not_a_keyword,
        },
        "$ref draft-07": {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": url},
        "$ref draft-04 with id": {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "id": f"{url}/root.json",
            "allOf": [{"$ref": "s.json"}],
        },
        "$ref to the unbundled $schema": {
            "$schema": f"{url}/meta.json",
            "$ref": f"{url}/meta.json",
        },
        "$ref to an unbundled draft on the server": {"$ref": f"{url}/draft/2099-01/schema"},
        "unevaluatedProperties through a remote $ref": {
            "$ref": f"{url}/s.json",
            "unevaluatedProperties": False,
        },
    }


ROUTES = list(_remote_routes("http://127.0.0.1:0"))


@pytest.mark.parametrize("route", ROUTES)
def test_no_reference_is_fetched_over_http(verifier, server, route):
    schema = _remote_routes(server.url)[route]
    server.requests.clear()
    result = verdict(verifier, '{"a": 1}', {"id": "r", "schema": schema})
    assert server.requests == [], f"{route}: fetched {server.requests}"
    assert result in (0.0, "DataError"), route


def test_an_unbundled_schema_uri_is_not_fetched_but_its_keywords_still_apply(verifier, server):
    """An unknown `$schema` reads as the newest draft; neither it nor a `$vocabulary` URI is
    ever dereferenced."""
    schema = {
        "$schema": f"{server.url}/meta.json",
        "$vocabulary": {f"{server.url}/vocab": True},
        "type": "object",
        "required": ["a"],
    }
    server.requests.clear()
    assert verdict(verifier, '{"b": 1}', {"id": "m", "schema": schema}) == 0.0
    assert verdict(verifier, '{"a": 1}', {"id": "m", "schema": schema}) == 1.0  # keep
    assert server.requests == []


def test_a_reference_in_the_answer_is_data(verifier, server):
    """Validated against the metaschema, an answer that is itself a schema is not resolved."""
    sample = {"id": "a", "schema": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}
    server.requests.clear()
    answer = json.dumps({"$ref": f"{server.url}/s.json", "$schema": f"{server.url}/m.json"})
    assert verdict(verifier, answer, sample) == 1.0
    assert verdict(verifier, '{"type": 5}', sample) == 0.0
    assert server.requests == []


@pytest.mark.parametrize(
    "schema",
    [
        {"$id": "{url}/root.json", "$defs": {"x": {"type": "object"}}, "$ref": "#/$defs/x"},
        {"$id": "{url}/root.json", "$defs": {"x": {"$id": "x.json"}}, "$ref": "x.json"},
        {"$id": "{url}/r.json", "$defs": {"x": {"$anchor": "obj"}}, "$ref": "{url}/r.json#obj"},
        {"$defs": {"x": {"$anchor": "obj", "type": "object"}}, "$ref": "#obj"},
        {"$ref": "https://json-schema.org/draft/2020-12/schema"},  # bundled
        {"$ref": "http://json-schema.org/draft-07/schema#"},  # bundled
        {"$schema": DRAFT_2019, "$id": "{url}/t.json", "$recursiveAnchor": True,
         "properties": {"a": {"$recursiveRef": "#"}}},
    ],
    ids=short,
)  # fmt: skip
def test_references_that_resolve_inside_the_schema_still_work(verifier, server, schema):
    schema = json.loads(json.dumps(schema).replace("{url}", server.url))
    server.requests.clear()
    assert verdict(verifier, '{"a": {}}', {"id": "k", "schema": schema}) == 1.0
    assert server.requests == []


def test_a_local_tree_of_dynamic_references_validates_both_ways(verifier):
    tree = {
        "$dynamicAnchor": "node",
        "type": "object",
        "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
    }
    sample = {"id": "t", "schema": tree}
    assert verdict(verifier, '{"kids": [{"kids": []}, {}]}', sample) == 1.0
    assert verdict(verifier, '{"kids": [{"kids": [5]}]}', sample) == 0.0


@pytest.fixture
def permissive_file(tmp_path: Path) -> Path:
    path = tmp_path / "permissive.json"
    path.write_text(json.dumps(PERMISSIVE))
    return path


@pytest.mark.parametrize("how", ["$ref", "anyOf", "relative to a file $id"])
def test_a_file_reference_is_never_read(verifier, permissive_file, how):
    uri = permissive_file.as_uri()
    schema = {
        "$ref": {"$ref": uri},
        "anyOf": {"anyOf": [{"type": "string"}, {"$ref": uri}]},
        "relative to a file $id": {"$id": permissive_file.parent.as_uri() + "/", "$ref": "p.json"},
    }[how]
    if how.startswith("relative"):
        permissive_file.rename(permissive_file.parent / "p.json")
    assert verdict(verifier, '{"a": 1}', {"id": "f", "schema": schema}) in (0.0, "DataError")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_a_file_reference_is_not_even_opened(verifier, tmp_path):
    """A named pipe shows an open for reading: the writer's open() returns only then."""
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    done, opened = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with open(fifo, "w") as f:  # returns once a reader has opened the pipe
                if not done.is_set():
                    opened.set()
                f.write(json.dumps(PERMISSIVE))
        except BrokenPipeError:  # the test's own reader, gone at once
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    result = verdict(verifier, '{"a": 1}', {"id": "p", "schema": {"$ref": fifo.as_uri()}})
    done.set()
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
    thread.join(5)
    assert not opened.is_set() and result in (0.0, "DataError")


@pytest.mark.parametrize(
    "uri", ["http://127.0.0.1:9/s.json", "https://example.com/s.json", "file:///etc/passwd",
            "urn:example:s", "s.json", "https://json-schema.org/draft/2099-01/schema"],
    ids=short,
)  # fmt: skip
def test_the_registry_refuses_every_uri(uri):
    from referencing.exceptions import NoSuchResource

    from rlvr.rewards.json_schema import local_registry

    with pytest.raises(NoSuchResource):
        local_registry().get_or_retrieve(uri)


@pytest.mark.parametrize(
    "ref",
    ["urn:example:s", "s.json", "#/nowhere", "#missing-anchor", "https://example.com/s"],
    ids=short,
)
def test_an_unresolvable_reference_is_a_one_line_data_error_naming_it(verifier, ref):
    with pytest.raises(DataError) as info:
        verifier('{"a": 1}', {"id": "u", "schema": {"$ref": ref}})
    message = str(info.value)
    assert "'u'" in message and ref in message and "never fetched" in message
    assert "\n" not in message


def test_one_completion_that_reaches_a_broken_reference_does_not_stop_the_run(verifier):
    """The DataError is that completion's failure under the Scorer's policy: 0, counted."""
    from rlvr.rewards.scoring import Scorer

    broken = {"id": "b", "schema": {"properties": {"a": {"$ref": "#/nowhere"}}}}
    loop = {"id": "l", "schema": {"properties": {"a": {"$ref": "#/properties/a"}}}}
    texts = [GOOD, '{"b": 1}', '{"a": 1}', '{"a": 1}', GOOD]
    rewards, failures = Scorer(verifier)(texts, [ADA, broken, broken, loop, ADA])
    assert rewards == [1.0, 1.0, 0.0, 0.0, 1.0] and failures == 2


# --- a schema that breaks only on some answers: DataError or 0, in time, never a crash -------


@pytest.mark.parametrize(
    ("schema", "completion", "expected"),
    [
        ({"$ref": "#"}, '{"a": 1}', "DataError"),
        ({"properties": {"a": {"$ref": "#/properties/a"}}}, '{"a": 1}', "DataError"),
        ({"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"},
         "{}", "DataError"),
        ({"$dynamicAnchor": "n", "$dynamicRef": "#n"}, "{}", "DataError"),
        ({"$schema": DRAFT_2019, "$recursiveAnchor": True, "$recursiveRef": "#"}, "{}",
         "DataError"),
        ({"type": "object", "$ref": "#/type/x"}, "{}", "DataError"),  # a pointer into a string
        ({"type": "object", "$ref": "#/type/0"}, "{}", "DataError"),
        # multipleOf is exact since 2026-12-03 (float division raised on these before).
        ({"properties": {"a": {"multipleOf": 0.5}}}, '{"a": ' + "9" * 4000 + "}", 1.0),
        ({"properties": {"a": {"multipleOf": 10**400}}}, '{"a": 1.5}', 0.0),
        ({"$schema": 5}, "{}", "DataError"),
        ({"properties": {"a": {"minimum": 10**400}}}, '{"a": 1e308}', 0.0),  # compared exactly
        ({"properties": {"a": {"multipleOf": 1e-308}}}, '{"a": 1e308}', 1.0),  # 10**616 times
    ],
    ids=short,
)  # fmt: skip
def test_a_schema_that_breaks_on_this_answer_is_a_data_error_never_an_exception(
    verifier, schema, completion, expected
):
    """The schema is the dataset's, the answer plain bounded JSON: a validation that raises is
    the schema's problem, reported as one (the Scorer counts it, and the run goes on)."""
    assert verdict(verifier, completion, {"id": "x", "schema": schema}) == expected


def test_a_reference_loop_only_shows_on_answers_that_reach_it(verifier):
    sample = {"id": "l", "schema": {"properties": {"a": {"$ref": "#/properties/a"}}}}
    assert verdict(verifier, '{"b": 1}', sample) == 1.0
    assert verdict(verifier, '{"a": 1}', sample) == "DataError"


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"properties": {"a": leaf}}
    return leaf


@pytest.mark.parametrize(
    "schema",
    [
        _nested(500, {"type": "string"}),  # a dict past Python's recursion limit
        '{"properties": {"a": ' * 2000
        + "{}"
        + "}}" * 2000,  # a JSON string json.loads cannot parse
        {"maximum": float("nan")},  # NaN would pass every number
        {"properties": {"age": {"minimum": float("-inf")}}, "maximum": float("inf")},
        '{"maximum": NaN}',
        '{"type": "object", "type": "string"}',  # duplicate keys: which one?
        {"enum": [{1, 2}]},  # not JSON at all
    ],
    ids=short,
)
def test_a_schema_that_is_not_plain_bounded_json_is_a_data_error(verifier, schema):
    assert verdict(verifier, '{"age": 5}', {"id": "j", "schema": schema}) == "DataError"


def test_a_self_containing_schema_is_a_data_error(verifier):
    schema: dict[str, Any] = {"type": "object"}
    schema["properties"] = {"a": schema}
    assert verdict(verifier, '{"a": 1}', {"id": "c", "schema": schema}) == "DataError"


@pytest.mark.parametrize(
    ("schema", "completion"),
    [
        ({"properties": {"s": {"pattern": "^(a+)+$"}}}, '{"s": "' + "a" * 40 + '!"}'),
        ({"properties": {"s": {"pattern": "(x+x+)+y"}}}, '{"s": "' + "x" * 40 + '"}'),
        ({"patternProperties": {"^(a|aa)+$": {}}, "additionalProperties": False},
         '{"' + "a" * 60 + 'b": 1}'),
        ({"properties": {"u": {"uniqueItems": True}}}, '{"u": [' + ",".join(
            f'{{"k":{i}}}' for i in range(8_000)) + "]}"),  # quadratic: objects do not sort
    ],
    ids=short,
)  # fmt: skip
def test_slow_validation_scores_zero_at_the_limit(isolated, schema, completion):
    isolated("{}", {"schema": {}})  # a ready worker: start-up is not the check's time
    started = time.monotonic()
    result = verdict(isolated, completion, {"id": "s", "schema": schema})
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert result == 0.0
    assert isolated('{"s": "aaa"}', {"schema": {"properties": {"s": {"pattern": "^a+$"}}}}) == 1.0


# --- which object is the answer ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        (GOOD + ' or rather {"name": "Ada", "age": NaN}', "a later object with NaN"),
        (GOOD + ' or rather {"name": "Ada", "age": 37, "age": 36}', "a later duplicate key"),
        (GOOD + ' or {"name": "Ada", "age": 1e999}', "a later overflowing number"),
        (GOOD + " or {'name': 'Ada', 'age': 36}", "a later Python dict"),
        (GOOD + ' or {"name": "Ada", "age": 36,}', "a later trailing comma"),
        (GOOD + ' or {"name": "Ada", "age": 37}', "a later valid, wrong object"),
        (GOOD + ' or {"name": "Ada"}', "a later schema-invalid object"),
        (f"```json\n{GOOD}\n```\nwhere {{name}} is a placeholder", "prose braces after it"),
        (f'```json\n{GOOD}\n```\nor: {{"name": "Bob", "age": 36}}', "prose after the fence"),
        ('<think>{"name": "Ada", </think>"age": 36}', "an object split across </think>"),
        (f"<think>{GOOD}</think>", "the object only in the reasoning"),
        (f"</think>{GOOD}<think>", "a reasoning block opened after it"),
        ('{"x": ' * 64 + '{"deep": 1}, "y": ' + GOOD + "}" * 64, "nested in one past 64"),
        ('{"name": "Ada", "age": 36, "k": ' + "[" * 64 + "]" * 64 + "}", "arrays past 64"),
        ('{"name": "Ada", "age": 36, "k": ' + "[" * 5000 + "]" * 5000 + "}", "5000 arrays"),
        ('{"name": "Bob", "n\\u0061me": "Ada", "age": 36}', "a duplicate key by escape"),
        ('{"name": "Ada", "age": 36, "x": {"b": 1, "b": 2}}', "a nested duplicate key"),
        ('{"name": "Ada\\u0000", "age": 36}', "a NUL in the value"),
        ('{"name": "Ada", "age": 36, "n": "\\ud800"}', "a lone surrogate"),
        ('{"name": "Ada",\ufeff "age": 36}', "a BOM inside the object"),
        ('{"\ufeffname": "Ada", "age": 36}', "a BOM in a key"),
        ('{"name": "Ada", "age": Infinity}', "Infinity"),
        ('{"name": "Ada", "age": -Infinity}', "-Infinity"),
        ('{"name": "Ada", "age": -1e999}', "-1e999"),
        ('{"name": "Ada", "age": 36, "big": ' + "9" * 4301 + "}", "past the digit limit"),
        ('{"name": "Ada", "age": 036}', "a leading zero"),
        ('{"name": "Ada", "age": 0x24}', "hex"),
        ('{"name": "Ada", "age": +36}', "a plus sign"),
        ('{"name": "Ada", "age": true}', "true is not 36"),
        ('{"name": "Ada", "age": "36"}', "a string is not a number"),
        ('{"name": "Ada", "age": 36.5}', "36.5 is not an integer"),
        ('{"name": ["Ada"], "age": 36}', "a list is not its element"),
        ('{"name": "Ada", "age": 36, "extra": null}', "an extra key under exact comparison"),
        ('{"name": "ada", "age": 36}', "case"),
        ('{"name": "Ada ", "age": 36}', "trailing space in a value"),
    ],
    ids=short,
)
def test_crafted_answers_score_zero(verifier, completion, why):
    assert verdict(verifier, completion, ADA) == 0.0, why


def test_a_lone_surrogate_is_refused_even_without_expected(verifier):
    sample = {"id": "s", "schema": PERSON}
    assert verdict(verifier, '{"name": "\\udc00", "age": 36}', sample) == 0.0
    assert verdict(verifier, '{"name": "\\ud83d\\ude00", "age": 36}', sample) == 1.0  # a pair


def test_deep_arrays_are_not_an_answer_even_for_a_schema_that_accepts_anything(verifier):
    sample = {"id": "d", "schema": {}}
    assert verdict(verifier, '{"a": ' + "[" * 65 + "]" * 65 + "}", sample) == 0.0
    assert verdict(verifier, '{"a": ' + "[" * 63 + "]" * 63 + "}", sample) == 1.0  # keep


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ('I think {"name": "Bob", "age": 1} is wrong.\n```json\n' + GOOD + "\n```", "fence last"),
        ("Here you go:\n```json\n" + GOOD + "\n```\nHope this helps!", "prose around a fence"),
        ('<think>{"name": "Bob", "age": 1}</think>\n' + GOOD, "a draft in the reasoning"),
        ("a set {1, 2} and {x}: " + GOOD, "prose braces before it"),
        (GOOD + " and a set {1, 2", "an unclosed brace after it"),
        ('He typed "{" then ' + GOOD, "a quoted brace in prose"),
        ('{"age": 36.0, "name": "Ada"}', "36.0 equals 36, key order is free"),
        ('{"n\\u0061me": "Ada", "age": 36}', "an escaped key is the same key"),
        ('{"name": "\\u0041da", "age": 36}', "an escaped value is the same value"),
        ("\ufeff" + GOOD, "a BOM before the object"),
        ('{\n  "name": "Ada",\n\t"age": 36\r\n}', "JSON whitespace"),
        ('{"name": "Ada", "age": 3.6e1}', "an exponent"),
    ],
    ids=short,
)
def test_legitimate_answers_score_one(verifier, completion, why):
    assert verdict(verifier, completion, ADA) == 1.0, why


def test_braces_inside_strings_are_data(verifier):
    sample = {"id": "b", "schema": PERSON, "expected": {"name": "A {B} }{", "age": 1}}
    assert verdict(verifier, '{"name": "A {B} }{", "age": 1}', sample) == 1.0
    assert verdict(verifier, '{"name": "A {B} }{", "age": 1} }', sample) == 1.0
    assert verdict(verifier, '{"name": "A {B}", "age": 1}', sample) == 0.0


# --- numbers and booleans against expected and schema keywords -------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "reward"),
    [
        ("1", 1.0, 1.0),
        ("1.0", 1, 1.0),
        ("1e0", 1, 1.0),
        ("true", 1, 0.0),
        ("1", True, 0.0),
        ("0", False, 0.0),
        ("false", 0, 0.0),
        ("null", 0, 0.0),
        ('"1"', 1, 0.0),
        ("[1]", 1, 0.0),
        ("100000000000000000001", 10**20, 0.0),  # ints compare exactly
        ("1e20", 10**20, 1.0),
        ("123456789012345678901234567890", 123456789012345678901234567890, 1.0),
    ],
    ids=short,
)
def test_expected_compares_json_values(verifier, answer, expected, reward):
    sample = {"id": "n", "schema": {"type": "object"}, "expected": {"v": expected}}
    assert verdict(verifier, f'{{"v": {answer}}}', sample) == reward


@pytest.mark.parametrize(
    ("keyword", "answer", "reward"),
    [
        ({"const": 1}, "true", 0.0),
        ({"const": 1}, "1.0", 1.0),
        ({"const": False}, "0", 0.0),
        ({"enum": [0, "a"]}, "false", 0.0),
        ({"enum": [None]}, "0", 0.0),
        ({"type": "integer"}, "1.0", 1.0),
        ({"type": "integer"}, "1.5", 0.0),
        ({"type": "integer"}, "true", 0.0),
        ({"type": "number"}, "false", 0.0),
        ({"type": "boolean"}, "1", 0.0),
        ({"uniqueItems": True}, "[1, true]", 1.0),
        ({"uniqueItems": True}, "[1, 1.0]", 0.0),
        ({"maximum": 10}, "1" * 4000, 0.0),
        ({"exclusiveMinimum": 0}, "1e-400", 0.0),  # it reads as 0.0
    ],
    ids=short,
)
def test_schema_keywords_read_json_values(verifier, keyword, answer, reward):
    sample = {"id": "k", "schema": {"properties": {"v": keyword}}}
    assert verdict(verifier, f'{{"v": {answer}}}', sample) == reward


# --- format keywords are checked, and narrowed where jsonschema is lax ------------------------


@pytest.mark.parametrize(
    ("fmt", "value", "reward"),
    [
        ("email", "ada@example.com", 1.0),
        ("email", "ada.lovelace+rl@mail.example.co.uk", 1.0),
        ("email", "ada@localhost", 1.0),
        ("email", "ada@[192.0.2.1]", 1.0),
        ("email", "@", 0.0),
        ("email", "not an email@example.com", 0.0),
        ("email", "ada@", 0.0),
        ("email", "@example.com", 0.0),
        ("email", "ada@@example.com", 0.0),
        ("email", "ada@example.com\n", 0.0),
        ("email", "ada@-example.com", 0.0),
        ("email", "ada..x@example.com", 0.0),
        ("email", "ada@example.com, bob@example.com", 0.0),
        ("email", "ada@[300.0.0.1]", 0.0),
        ("email", "a" * 65 + "@example.com", 0.0),
        ("idn-email", "ада@пример.рф", 1.0),
        ("idn-email", "@", 0.0),
        ("uuid", "12345678-1234-1234-1234-123456789abc", 1.0),
        ("uuid", "12345678-1234-1234-1234-1234-56789abc", 0.0),
        ("uuid", "12345678-1234-1234-1234-123456789abcurn:", 0.0),
        ("uuid", "12345678-1234-1234-1234-123456789abc}", 0.0),
        ("date", "2024-01-05", 1.0),
        ("date", "2024-02-30", 0.0),
        ("date", "20240105", 0.0),
        ("date", "2024-01-05\n", 0.0),
        ("date", "２０２４-01-05", 0.0),
        ("date-time", "2024-01-05T10:00:00Z", 1.0),
        ("date-time", "2024-01-05T10:00:00Z\n", 0.0),
        ("date-time", "2024-01-05 10:00", 0.0),
        ("time", "10:00:00Z", 1.0),
        ("time", "10:00:00Z\n", 0.0),
        ("ipv4", "192.0.2.1", 1.0),
        ("ipv4", "192.0.2.256", 0.0),
        ("ipv4", "192.0.2.1\n", 0.0),
        ("ipv6", "::1", 1.0),
        ("ipv6", "::1%eth0", 0.0),
        ("regex", "^[a-z]+$", 1.0),
        ("regex", "(", 0.0),
        ("regex", "(" * 2000 + ")" * 2000, 0.0),  # past Python's parser: not a usable pattern
    ],
    ids=short,
)
def test_formats_are_checked(verifier, fmt, value, reward):
    import jsonschema

    if fmt not in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers:
        pytest.skip(f"jsonschema checks {fmt} only with an optional package installed")
    sample = {"id": "f", "schema": {"properties": {"v": {"type": "string", "format": fmt}}}}
    assert verdict(verifier, json.dumps({"v": value}), sample) == reward, (fmt, value)


def test_a_draft_without_a_format_leaves_it_unchecked(verifier):
    """Draft 4 has no uuid format: the schema's author asked for nothing."""
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#"}
    sample = {"id": "4", "schema": {**draft4, "properties": {"v": {"format": "uuid"}}}}
    assert verdict(verifier, '{"v": "x"}', sample) == 1.0


# --- `$` in a schema's patterns is the end of the string ---------------------------------------


@pytest.mark.parametrize(
    ("schema", "completion", "reward"),
    [
        ({"properties": {"s": {"pattern": "^[a-z]+$"}}}, '{"s": "abc\\n"}', 0.0),
        ({"properties": {"s": {"pattern": "^[a-z]+$"}}}, '{"s": "abc"}', 1.0),
        ({"properties": {"s": {"pattern": "^[0-9]{3}$|^none$"}}}, '{"s": "123\\n"}', 0.0),
        ({"properties": {"s": {"pattern": "^\\$[0-9]+$"}}}, '{"s": "$5"}', 1.0),  # escaped $
        ({"properties": {"s": {"pattern": "^[$]$"}}}, '{"s": "$"}', 1.0),  # $ in a class
        ({"properties": {"s": {"pattern": "^a$"}}}, '{"s": "a\\n"}', 0.0),
        # Python's inline flags are not ECMA-262: the schema is refused (read until 2026-12-03).
        ({"properties": {"s": {"pattern": "(?m)^a$"}}}, '{"s": "a\\nb"}', "DataError"),
        ({"patternProperties": {"^x$": {}}, "additionalProperties": False}, '{"x\\n": 1}', 0.0),
        ({"patternProperties": {"^x$": {}}, "additionalProperties": False}, '{"x": 1}', 1.0),
        ({"patternProperties": {"^x$": {"type": "string"}}}, '{"x\\n": 1}', 1.0),  # no match
        ({"propertyNames": {"pattern": "^[a-z]+$"}}, '{"ab\\n": 1}', 0.0),
        ({"$defs": {"p": {"pattern": "^a$"}}, "properties": {"s": {"$ref": "#/$defs/p"}}},
         '{"s": "a\\n"}', 0.0),
        ({"properties": {"s": {"items": {"pattern": "^a$"}}}}, '{"s": ["a", "a\\n"]}', 0.0),
        ({"$schema": "http://json-schema.org/draft-04/schema#",
          "properties": {"s": {"pattern": "^a$"}}}, '{"s": "a\\n"}', 0.0),
        ({"const": {"pattern": "a$"}}, '{"pattern": "a$"}', 1.0),  # data, not the keyword
        ({"properties": {"pattern": {"const": "b$"}}}, '{"pattern": "b$"}', 1.0),
    ],
    ids=short,
)  # fmt: skip
def test_dollar_in_a_schema_pattern_is_the_end_of_the_string(verifier, schema, completion, reward):
    assert verdict(verifier, completion, {"id": "p", "schema": schema}) == reward


# --- regex ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def regex() -> Iterator[RegexVerifier]:
    v = RegexVerifier(timeout_s=TIMEOUT_S)
    yield v
    v.close()


@pytest.fixture(scope="module", params=["isolated", "inline"])
def regex_verifier(request: pytest.FixtureRequest, regex: RegexVerifier) -> RegexVerifier:
    return regex if request.param == "isolated" else regex.for_worker()


DATE = "[0-9]{4}-[0-9]{2}-[0-9]{2}"


@pytest.mark.parametrize(
    ("pattern", "completion", "why"),
    [
        ("^\\d+$", "123\nabc", "$ before a newline, then more"),
        ("\\d+$", "<answer>123\nabc</answer>", "the same inside the tag"),
        ("(?m)^\\d+$", "123\n456", "multiline $ still needs the whole answer"),
        ("\\d+", "123abc", "a prefix is not a full match"),
        ("\\d+", "abc123", "a suffix is not a full match"),
        ("yes|no", "yes no", "alternation without a group"),
        ("^yes$|^no$", "yes\nno", "anchored alternation across lines"),
        (".*", "a\nb", "dot does not cross a newline"),
        (DATE, "2024-01-05\x00", "a trailing NUL is not whitespace"),
        (DATE, "2024-01-05\u200b", "a zero-width space is not whitespace"),
        (DATE, "2024\u201001\u201005", "a Unicode hyphen"),
        (DATE, "２０２４-０１-０５", "full-width digits"),
        ("(?a)\\d+", "١٢٣", "(?a): ASCII digits only"),
        (DATE, "<answer>2024-01-05</answer></answer>", "a stray closing tag in the answer"),
        (DATE, "<answer>wrong</answer> 2024-01-05", "after the tag is not the answer"),
        (DATE, "<answer>2024-01-05</answer><answer>x", "an unclosed later tag"),
        (DATE, "<think>2024-01-05</think>", "only in the reasoning"),
        (DATE, "2024-01-05</think>no", "before the end of the reasoning"),
        (DATE, "</think><answer>2024-01-05</answer><think>", "a reasoning opened after it"),
        (DATE, "</think><answer>2024-</think>01-05</answer>", "an answer split across </think>"),
        (".*", "x" * 10_001, "past max_answer_chars"),
        (".*", "<answer>" + "x" * 10_001 + "</answer>", "past max_answer_chars in a tag"),
        (".*", "<think>" + "x" * 2_000_000, "a huge unclosed reasoning"),
    ],
    ids=short,
)
def test_regex_attacks_score_zero(regex_verifier, pattern, completion, why):
    assert verdict(regex_verifier, completion, {"id": "r", "pattern": pattern}) == 0.0, why


@pytest.mark.parametrize(
    ("pattern", "completion", "why"),
    [
        (DATE, "2024-01-05\n", "a final newline is whitespace around the answer"),
        (DATE, "<answer>\n2024-01-05\n</answer>", "so is whitespace inside the tag"),
        ("\\d+$", "<answer>123\n</answer>", "$ with the whitespace stripped"),
        ("(?i)yes|no", "NO", "inline flags"),
        (".*", "x" * 10_000, "at max_answer_chars"),
        (DATE, "<think>" + "x" * 2_000_000 + "</think>2024-01-05", "a huge closed reasoning"),
        (DATE, "x" * 2_000_000 + "<answer>2024-01-05</answer>", "a huge preamble to the tag"),
    ],
    ids=short,
)
def test_regex_legitimate_answers_score_one(regex_verifier, pattern, completion, why):
    started = time.monotonic()
    assert verdict(regex_verifier, completion, {"id": "r", "pattern": pattern}) == 1.0, why
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize(
    ("pattern", "answer"),
    [
        ("(a+)+", "a" * 40 + "!"),
        ("(a|aa)+", "a" * 60 + "!"),
        ("(x+x+)+y", "x" * 40),
        ("(?:a*)*b", "a" * 10_000),
        ("(\\w+\\s?)+$", "word " * 20 + "!"),
        ("^(([a-z])+.)+[A-Z]([a-z])+$", "a" * 36 + "!"),
    ],
    ids=short,
)
def test_regex_backtracking_scores_zero_at_the_limit(regex, pattern, answer):
    regex("1", {"pattern": "\\d"})  # a ready worker
    started = time.monotonic()
    assert verdict(regex, answer, {"id": "b", "pattern": pattern}) == 0.0
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert regex("aaa", {"pattern": "a+"}) == 1.0  # and the next check runs


def test_a_regex_too_deep_to_compile_is_a_data_error(regex_verifier):
    sample = {"id": "d", "pattern": "(" * 5000 + ")" * 5000}
    assert verdict(regex_verifier, "x", sample) == "DataError"
