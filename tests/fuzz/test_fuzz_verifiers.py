"""Fuzz the verifiers: random completions (odd unicode, NULs, lone surrogates, nested and
unbalanced think/answer tags, digits of every script, up to 1 MB) and random samples through
each built-in verifier resolved by `rlvr.rewards.registry.get_verifier(name)`.

Pass: a finite float in the verifier's documented range ([0, 1]; exactly 0.0 or 1.0 for the
binary ones) returned within a wall-clock bound, or, for a malformed sample, a `UserError`
whose message is one line. A traceback or a case over its time bound fails.

The bugs the fuzz found are fixed; each keeps a regression test with its minimal reproducer
(`test_fixed_*`, listed in docs/reliability.md), and the generators cover those inputs again.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.errors import DataError, UserError
from rlvr.rewards.exact import extract_final_answer
from rlvr.rewards.language import LANGUAGES, SCRIPTS
from rlvr.rewards.registry import get_verifier

CASES = 500
# No hypothesis deadline: the per-case wall-clock bounds below are the limit (math's first case
# starts its worker process, which takes seconds).
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BINARY = frozenset(["exact_answer", "format", "countdown", "math", "code", "regex"])
ISOLATED = ("math", "code", "json_schema", "regex")  # they time themselves out in a worker
IN_PROCESS_BOUND_S = 5.0  # exact, format, language, countdown: ~1 s for 1 MB of text here
MATH = get_verifier("math")
MATH_BOUND_S = getattr(MATH, "timeout_s", 5.0) + 15.0  # its kill + respawn of the worker


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Turn a hang of in-process code into a failure (SIGALRM) instead of a stuck suite."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def score(name: str, completion: str, sample: Mapping[str, Any], bound_s: float) -> float | None:
    """The verifier's reward, checked; None after a one-line UserError (a malformed sample)."""
    verifier: Callable[[str, Mapping[str, Any]], float] = get_verifier(name)
    start = time.perf_counter()
    try:
        if name in ISOLATED:
            reward = verifier(completion, sample)
        else:
            with hang_guard(2 * bound_s):
                reward = verifier(completion, sample)
    except UserError as e:
        message = str(e)
        assert message.strip() and not any(c in message for c in "\n\r"), repr(message)
        return None
    elapsed = time.perf_counter() - start
    assert elapsed <= bound_s, f"{name}: {elapsed:.1f} s for {len(completion)} characters"
    assert isinstance(reward, float), f"{name} returned {type(reward).__name__}"
    assert math.isfinite(reward) and 0.0 <= reward <= 1.0, f"{name} returned {reward}"
    if name in BINARY:
        assert reward in (0.0, 1.0), f"{name} returned {reward}"
    return reward


# --- completions ------------------------------------------------------------------------------

TAGS = ["<think>", "</think>", "<answer>", "</answer>", "<think><think>", "</think></think>"]
MATH_PIECES = [
    "\\boxed{",
    "\\fbox{",
    "\\boxed ",
    "{",
    "}",
    "$",
    "$$",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
    "Answer:",
    "Final answer: ",
    "**Answer:**",
    "\\frac{1}{2}",
    "\\sqrt{2}",
    "x = ",
    "1,000",
    "3.14",
    "1e-3",
    "50%",
    "\\%",
    "π",
    "∞",
    "√2",
    "^",
    "!",
    "\\pi",
    "\\infty",
    "{1, 2}",
    "(1, 2]",
    "\\text{Monday}",
    "\\\\",
    "\\",
    "\\left(",
    "\\right)",
    "\\cdot",
    "\\times",
    "\\div",
]
# The digit five (or three) in many scripts: ASCII-only answers must not be fooled by them.
DIGITS = ["٣", "۳", "३", "৩", "๓", "３", "𝟑", "³", "Ⅲ", "〇", "三", "፫", "߃", "᠓", "5", "٥", "𝟓"]
WORDS = ["hello", "привет", "γεια", "你好", "こんにちは", "안녕", "مرحبا", "שלום", "नमस्ते", "สวัสดี"]
ODD = ["\x00", "\x01", "\x7f", "\ufffd", "\ud800", "\udfff", "\u202e", "\u200b", "\ufeff", "\r"]
EXPR = ["+", "-", "*", "/", "(", ")", "=", " ", "\n", "\t", "**", "//", "%", "e", "_", "."]

pieces = st.one_of(
    st.sampled_from(TAGS + MATH_PIECES + DIGITS + WORDS + ODD + EXPR),
    st.integers(-(10**30), 10**30).map(str),
    st.text(max_size=12),
    st.text(st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp", "Mn"]), max_size=6),
)
completions = st.one_of(
    st.lists(pieces, max_size=30).map("".join),
    st.builds(lambda p, n: p * n, pieces, st.integers(1, 3000)),  # repetition, up to ~40 kB
    st.builds(  # nested think blocks around an answer
        lambda k, inner, close: "<think>" * k + inner + "</think>" * close,
        st.integers(0, 50),
        st.lists(pieces, max_size=8).map("".join),
        st.integers(0, 50),
    ),
)


# --- exact_answer, format, language -----------------------------------------------------------

# Sample answers exact_answer must refuse (a one-line DataError), not score.
MALFORMED_ANSWERS = ["abc", None, [1], "1.5", True, "12\n34"]


@FUZZ
@given(
    completion=completions,
    answer=st.one_of(
        st.integers(-(10**40), 10**40),
        st.integers(-(10**40), 10**40).map(str),
        st.sampled_from(["007", "-0", " 12 ", "+5", "1" * 5000, "-" + "0" * 5000 + "3"]),
        st.sampled_from(MALFORMED_ANSWERS),
    ),
)
def test_exact_answer_scores_any_completion(completion: str, answer: Any) -> None:
    found = extract_final_answer(completion)
    reward = score("exact_answer", completion, {"answer": answer}, IN_PROCESS_BOUND_S)
    if any(answer is bad for bad in MALFORMED_ANSWERS):  # a one-line DataError
        assert reward is None
        return
    assert reward == (1.0 if found is not None and _as_int(found) == _as_int(answer) else 0.0)


def _as_int(text: Any) -> int:
    """int(), also past Python's 4300-digit limit: leading zeros dropped, and an integer that
    long is over 10**4000, far from every answer drawn here (a 5000-digit one is 11...1)."""
    if isinstance(text, int):
        return text
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 4000:
        return sign * (10**4000 + len(digits) + int(digits[:10]) + int(digits[-10:]))
    return sign * int(digits)


@FUZZ
@given(completion=completions, sample=st.dictionaries(st.text(max_size=5), st.text(max_size=5)))
def test_format_scores_any_completion(completion: str, sample: dict) -> None:
    reward = score("format", completion, sample, IN_PROCESS_BOUND_S)
    if "<answer>" not in completion:
        assert reward == 0.0


languages = st.one_of(
    st.sampled_from(sorted(LANGUAGES) + sorted(SCRIPTS)),
    st.sampled_from(["EN", "zh-CN", "pt_BR", "Latin", "sr-Latn"]),
)


MALFORMED_LANGUAGES = ["xx", "klingon", 5, ["en"], "en\n"]


@FUZZ
@given(
    completion=completions,
    language=st.one_of(st.none(), languages, st.sampled_from(MALFORMED_LANGUAGES)),
)
def test_language_scores_any_completion(completion: str, language: Any) -> None:
    sample = {} if language is None else {"language": language}
    reward = score("language", completion, sample, IN_PROCESS_BOUND_S)
    if any(language is bad for bad in MALFORMED_LANGUAGES):  # a one-line DataError
        assert reward is None


# --- countdown --------------------------------------------------------------------------------


@st.composite
def countdown_cases(draw: st.DrawFn) -> tuple[str, dict]:
    numbers = draw(st.lists(st.integers(1, 100), min_size=2, max_size=6))
    target = draw(st.integers(-10, 1000))
    sample: dict[str, Any] = {"numbers": numbers, "target": target}
    if draw(st.integers(0, 9)) == 0:  # malformed: must be a one-line DataError
        sample = draw(
            st.sampled_from(
                [
                    {},
                    {"numbers": [], "target": 1},
                    {"numbers": [1, True], "target": 1},
                    {"numbers": "1 2", "target": 3},
                    {"numbers": [1, 2], "target": "3"},
                    {"numbers": [1.0, 2], "target": 3},
                    {"numbers": [1, 2], "target": None},
                ]
            )
        )
    if draw(st.booleans()):  # an expression over the numbers, wrapped in random ways
        ops = draw(
            st.lists(
                st.sampled_from(EXPR + ["+", "-", "*", "/"]),
                min_size=len(numbers),
                max_size=len(numbers),
            )
        )
        expr = "".join(f"{n}{op}" for n, op in zip(numbers, ops)).rstrip("+-*/=. \n\t%_e")
        if draw(st.booleans()):
            expr = f"({expr})" * draw(st.integers(1, 3))
        if draw(st.booleans()):
            expr += f" = {draw(st.sampled_from([target, target + 1, 10**300]))}"
        before, after = draw(
            st.sampled_from(
                [
                    ("", ""),
                    ("<answer>", "</answer>"),
                    ("<think>x</think>", ""),
                    ("<think>", ""),
                    ("<answer><answer>", "</answer>"),
                    ("</think>", ""),
                ]
            )
        )
        completion = before + expr + after
    else:
        completion = draw(completions)
    return completion, sample


@FUZZ
@given(case=countdown_cases())
def test_countdown_scores_any_completion(case: tuple[str, dict]) -> None:
    completion, sample = case
    reward = score("countdown", completion, sample, IN_PROCESS_BOUND_S)
    malformed = not (
        isinstance(sample.get("numbers"), list)
        and sample["numbers"]
        and all(type(n) is int for n in sample["numbers"])
        and type(sample.get("target")) is int
    )
    assert (reward is None) == malformed


# --- math -------------------------------------------------------------------------------------

GOLDS = [
    "42",
    "-7",
    "1/2",
    "\\frac{1}{2}",
    "0.5",
    "3.14",
    "\\pi",
    "x = 5",
    "{1, 2}",
    "(1, 2)",
    "[0, 1)",
    "50%",
    "1,000",
    "Monday",
    "2\\sqrt{2}",
    "e",
    "\\infty",
    "10^{100}",
    "1e-3",
    "",
]


@st.composite
def math_cases(draw: st.DrawFn) -> tuple[str, dict]:
    gold = draw(st.one_of(st.sampled_from(GOLDS), st.text(max_size=10)))
    if draw(st.booleans()):  # a well-formed answer, maybe the gold itself
        answer = draw(st.one_of(st.sampled_from(GOLDS + DIGITS), st.text(max_size=8)))
        wrap = draw(
            st.sampled_from(
                [
                    "\\boxed{%s}",
                    "<answer>%s</answer>",
                    "Answer: %s",
                    "$\\boxed{%s}$",
                    "<think>\\boxed{1}</think>\\boxed{%s}",
                ]
            )
        )
        completion = wrap % answer
    else:
        completion = draw(completions)
    if draw(st.integers(0, 19)) == 0:  # malformed: must be a one-line DataError
        return completion, draw(st.sampled_from([{}, {"answer": None}, {"answer": [1]}]))
    return completion, {"answer": gold}


@FUZZ
@given(case=math_cases())
def test_math_scores_any_completion(case: tuple[str, dict]) -> None:
    completion, sample = case
    reward = score("math", completion, sample, MATH_BOUND_S)
    if not isinstance(sample.get("answer"), str):
        assert reward is None


@pytest.mark.slow  # each case runs into the math verifier's 5 s timeout
@settings(max_examples=3, deadline=None, derandomize=True, database=None)
@given(answer=st.sampled_from(["5^{5^{5^{5^5}}}", "(10^{100})!", "10^{10^{10^{10}}}"]))
def test_math_pathological_answers_score_zero_within_the_timeout(answer: str) -> None:
    assert score("math", f"\\boxed{{{answer}}}", {"answer": "1"}, MATH_BOUND_S) == 0.0


# --- huge completions (all in-process verifiers and math) -------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    name=st.sampled_from(
        ["exact_answer", "format", "language", "countdown", "math", "json_schema", "regex"]
    ),
    piece=st.sampled_from(
        [
            "a",
            "٣",
            "\x00",
            "<think>",
            "</think>",
            "\\boxed{",
            "$",
            "\\(",
            "1",
            "Answer: 1\n",
            "<answer>",
            "你好 ",
            "e\u0301",
            "\ud800",
        ]
    ),
    size=st.sampled_from([100_000, 1_000_000]),
)
def test_megabyte_completions_score_in_bounded_time(name: str, piece: str, size: int) -> None:
    completion = piece * (size // len(piece))
    sample = {"answer": "1", "numbers": [1, 2], "target": 3, "language": "en"}
    sample.update(schema={"type": "object"}, pattern=r"\d+")
    bound = MATH_BOUND_S if name in ISOLATED else IN_PROCESS_BOUND_S
    score(name, completion, sample, bound)


# --- json_schema and regex (each check is a call into their worker process) ------------------

STRUCTURED_BOUND_S = 5.0 + 15.0  # json_schema's timeout, plus a kill and a respawn
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
SCHEMAS = [
    {},
    True,
    False,
    {"type": "object"},
    {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
    {"properties": {"s": {"type": "string", "pattern": "^[a-z]*$", "maxLength": 5}}},
    {"properties": {"d": {"format": "date"}, "e": {"format": "email"}}},
    {"additionalProperties": False, "properties": {"a": {"enum": [1, "1", None]}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    '{"type": "object"}',
]
MALFORMED_SCHEMAS = [None, [1], "{not json", {"type": 5}, {"$ref": "#/nowhere"}]


@st.composite
def json_schema_cases(draw: st.DrawFn) -> tuple[str, dict]:
    sample: dict[str, Any] = {"schema": draw(st.sampled_from(SCHEMAS))}
    if draw(st.booleans()):
        sample["expected"] = draw(json_values)
    if draw(st.integers(0, 19)) == 0:
        sample["schema"] = draw(st.sampled_from(MALFORMED_SCHEMAS))
    if draw(st.booleans()):
        obj = draw(st.dictionaries(st.text(max_size=4), json_values, max_size=5))
        text = draw(st.sampled_from(["%s", "```json\n%s\n```", "<think>x</think>%s", "a {b %s"]))
        completion = text.replace("%s", json.dumps(obj, ensure_ascii=draw(st.booleans())))
    else:
        completion = draw(completions)
    return completion, sample


@pytest.mark.slow
@FUZZ
@given(case=json_schema_cases())
def test_json_schema_scores_any_completion(case: tuple[str, dict]) -> None:
    completion, sample = case
    reward = score("json_schema", completion, sample, STRUCTURED_BOUND_S)
    if any(sample["schema"] is bad for bad in MALFORMED_SCHEMAS) and reward is not None:
        assert reward == 0.0  # a malformed schema may go unnoticed only if no object was found


PATTERNS = [r"\d+", r"[0-9]{4}-[0-9]{2}", r"(?i)yes|no", r"(a|b)*c?", r"(?=.*\d).{3,}", r"", r".*"]
MALFORMED_PATTERNS = ["(", "[a-", "*", None, 5]


@FUZZ
@given(
    completion=st.one_of(completions, st.sampled_from(["123", "<answer>yes</answer>", "abab"])),
    pattern=st.one_of(st.sampled_from(PATTERNS), st.sampled_from(MALFORMED_PATTERNS)),
)
def test_regex_scores_any_completion(completion: str, pattern: Any) -> None:
    reward = score("regex", completion, {"pattern": pattern}, STRUCTURED_BOUND_S)
    if any(pattern is bad for bad in MALFORMED_PATTERNS):
        assert reward is None  # refused (DataError), whatever the completion


# --- code (each case runs a sandboxed program: a few dozen only) ------------------------------

# HumanEval and MBPP rows, well-formed and not (a malformed one is a one-line DataError).
ASSERT_STYLE = [
    {"prompt": "def f(x):\n", "entry_point": "f", "test": "def check(c):\n    assert c(1) == 1\n"},
    {"prompt": "", "entry_point": "f", "test": "def check(c):\n    assert c(1) is None\n"},
    {"test_list": ["assert f(1) == 1", "assert f('a') == 'a'"], "test_setup_code": "import os"},
    {"prompt": "def f(x):\n", "entry_point": "f", "test": "assert True"},
    {"test_list": ["assert f(1) =="]},
    {"test_list": []},
]
PROGRAMS = [
    "def f(x):\n    return x",
    "    return x",
    "print(input())",
    "print(1)",
    "import sys; print(sys.stdin.read().upper())",
    "x = ",
    "raise SystemExit(3)",
    "print('\\x00' * 10)",
    "print('é' * 1000)",
    "import os; os.getpid()",
    "def f(a): return a\nprint(f(input()))",
    "print(''.join(map(chr, range(32))))",
]


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    program=st.one_of(st.sampled_from(PROGRAMS), st.text(max_size=20)),
    fence=st.sampled_from(["```python\n%s\n```", "```\n%s\n```", "%s", "```py\n%s", "<think>%s"]),
    tests=st.one_of(
        st.lists(
            st.fixed_dictionaries({"input": st.text(max_size=6), "output": st.text(max_size=6)}),
            min_size=1,
            max_size=3,
        ),
        st.sampled_from([[], "x", [1], [{"input": 1, "output": "1"}], [{"args": 1}]]),
        st.sampled_from(ASSERT_STYLE),
    ),
)
def test_code_scores_any_completion(program: str, fence: str, tests: Any) -> None:
    sample = tests if isinstance(tests, dict) else {"tests": tests}
    score("code", fence % program, sample, MATH_BOUND_S)


# --- fixed bugs: the fuzz's minimal reproducers, kept as regression tests ---------------------


def _expect_data_error(name: str, completion: str, sample: dict, field: str) -> None:
    with pytest.raises(DataError) as info:
        get_verifier(name)(completion, sample)
    message = str(info.value)
    assert "\n" not in message and f"'{field}'" in message, message


def test_fixed_exact_huge_number() -> None:
    """exact_answer('1' * 5000, ...) raised ValueError (int max str digits); now it compares."""
    verifier = get_verifier("exact_answer")
    assert verifier("1" * 5000, {"answer": "1"}) == 0.0
    assert verifier("1" * 5000, {"answer": "1" * 5000}) == 1.0
    assert verifier("0" * 5000 + "7", {"answer": 7}) == 1.0
    assert verifier("-" + "0" * 5000, {"answer": "0"}) == 1.0
    assert verifier("<think>x</think>" + "9" * 6000, {"answer": 10**6000 - 1}) == 1.0


@pytest.mark.parametrize("sample", [{"answer": "abc"}, {}, {"answer": [1]}, {"answer": "1.5"}])
def test_fixed_exact_malformed_answer(sample: dict) -> None:
    """A non-integer or missing answer raised ValueError/KeyError; now a DataError."""
    _expect_data_error("exact_answer", "12", sample, "answer")


def test_fixed_math_sample_without_answer() -> None:
    """math('\\boxed{1}', {}) raised KeyError; now a DataError."""
    _expect_data_error("math", "\\boxed{1}", {}, "answer")


@pytest.mark.parametrize("language", ["xx", 5, "en\nfr"])
def test_fixed_language_malformed_target(language: Any) -> None:
    """An unknown or non-string sample["language"] raised ValueError/AttributeError."""
    _expect_data_error("language", "hello world", {"language": language}, "language")


def test_malformed_countdown_sample_is_a_one_line_data_error() -> None:
    with pytest.raises(DataError) as info:
        get_verifier("countdown")("1+2", {"numbers": "1 2", "target": 3})
    assert "\n" not in str(info.value) and "numbers" in str(info.value)
