"""The tool-call formats (environments/formats.py): what a call is, and parsing in linear time;
and the python tool's observation for every way a call can end (`describe`, no sandbox).

A model turn is text a policy under RL pressure writes, up to `max_tokens`, parsed on every step
while holding the GIL. The old parser was a set of regular expressions; hermes' backtracked
(`<tool_call>{` repeated took 0.7-2.6 s per 192 KB), and so did fenced's on a closing fence
followed by a long run of spaces. The timed tests below feed each format 1 MB turns built to
make a backtracking parser quadratic and bound each parse at `BOUND_S`. Timed bounds are used
here only because they test complexity: the new parser takes at most about 25 ms on these
turns; the old one took from 11 s to hours (extrapolated) on the ones it was quadratic on, 46 s
on `<tool_call>{` repeated, so it is stopped at `DEADLINE_S`, 20 times the bound (the regex
engine checks for signals); a linear parser on a loaded machine stays far below the bound.

The semantic tests pin each documented rule, and a differential test compares every format
with the old regular expressions (the reference semantics) on many small random turns, where
backtracking costs nothing: the parsers agree everywhere but on tags turns whose markers do
not alternate, which now make no call (a documented rule, tested below).
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rlvr.environments import FORMATS
from rlvr.environments.python_tool import describe, python_tool_settings
from rlvr.isolation.sandbox import CaseResult

SIZE = 1 << 20  # 1 MB turns
BOUND_S = 0.25  # a parse of a 1 MB turn, with room for a loaded 2-core machine
DEADLINE_S = 20 * BOUND_S  # when an old, quadratic parser is stopped


def repeat(unit: str, size: int = SIZE) -> str:
    return unit * (size // len(unit))


def short(value: object) -> str:
    """A test id: the turn's repr, cut (some turns are 100 KB)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:45] + f"...({len(text)} chars)"


def hermes(arguments: object, name: str = "python") -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# --- what a call is ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turn, code",
    [
        # the markers must alternate, opener first; nested blocks and stray closers make no call
        ("<python><python>x</python>y</python>", None),  # nested, closed twice
        ("</python><python>print(1)</python>", None),  # a closer before any opener
        ("</python><python><python>x</python>", None),
        ("<python>a</python>b</python>", None),
        ("<python>1</python>text<python>2</python>\n", "2"),  # of complete blocks, the last
        ("<python>print('<pyth')</python>", "print('<pyth')"),  # a partial marker is text
        ("<python>x</python>\u3000\n", "x"),  # any whitespace may follow the call
        ("<python>x</python>\u200b", None),  # a zero-width space is not whitespace
    ],
    ids=short,
)
def test_tags_call_rules(turn, code):
    assert FORMATS["tags"].find_call(turn) == code


@pytest.mark.parametrize(
    "turn, code",
    [
        ("```python\nx\n````", None),  # the code's last backtick makes a fence with the close
        ("```python\nx\n``` \u2028", "x\n"),  # any whitespace may follow the closing fence
        ("````python\nx\n```\n", "x\n"),
        ("```python\t \nx\n```\n", "x\n"),  # spaces and tabs may end the fence line
        ("```python\r\nx\n```\n", None),  # nothing else may
        ("```python3\nx\n```\n", None),
        ("```python\n```", ""),
        ("```python\nx = '``'\n```\n", "x = '``'\n"),
        ("```python\nx = '```'\n```\n", None),  # a fence inside the code
        ("```python\na\n```\ntext\n```python\nb\n```\n", "b\n"),
    ],
    ids=short,
)
def test_fenced_call_rules(turn, code):
    assert FORMATS["fenced"].find_call(turn) == code


CALL = '{"name": "python", "arguments": {"code": "print(1)"}}'


@pytest.mark.parametrize(
    "turn, code",
    [
        # the markers may appear inside the JSON strings: JSON decides where the payload ends
        (hermes({"code": "print('</tool_call>')"}), "print('</tool_call>')"),
        (hermes({"code": "s = '<tool_call>{'"}), "s = '<tool_call>{'"),
        # an opener not followed by "{" is text; the payload starts after the next one
        ("I use <tool_call> tags.\n" + hermes({"code": "print(1)"}), "print(1)"),
        (f"<tool_call>\u3000{CALL}\u3000</tool_call>\u3000", "print(1)"),
        (f"<tool_call>{CALL}</tool_call>", "print(1)"),
        ('<tool_call>{"name": "python", "arguments": {"code": "x"}, "id": 3}</tool_call>', "x"),
        # two blocks: the payload spans both and is not one JSON object, so no call
        (hermes({"code": "print(1)"}) + "\n" + hermes({"code": "print(2)"}), None),
        (f"<tool_call>{{not json}}</tool_call><tool_call>{CALL}</tool_call>", None),
        (f"<tool_call>{CALL}", None),  # no closer
        (f"{CALL}</tool_call>", None),  # no opener
        (f"<tool_call>{CALL}</tool_call>.", None),  # text after the call
        (f"<tool_call>x{CALL}</tool_call>", None),  # text before the payload
        ("<tool_call></tool_call>", None),
        ("<tool_call>}{</tool_call>", None),
        # values json.loads refuses: too deep (RecursionError), an int of 5000 digits
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", None),
        ('<tool_call>{"name": "python", "arguments": ' + "[" * 100_000 + "}</tool_call>", None),
        (hermes("[" * 100_000), None),
        (hermes({"code": "x", "n": 1}).replace('"n": 1', '"n": ' + "7" * 5000), None),
    ],
    ids=short,
)
def test_hermes_call_rules(turn, code):
    assert FORMATS["hermes"].find_call(turn) == code


def test_a_hermes_payload_nested_a_megabyte_deep_is_no_call():
    """json.loads raises RecursionError on it: caught, so the turn is an answer, not a crash."""
    for turn in (
        '<tool_call>{"name": "python", "arguments": ' + "[" * SIZE + "}</tool_call>",
        '<tool_call>{"name": "python", "arguments": "' + "[" * SIZE + '"}</tool_call>',
        "<tool_call>" + repeat('{"a": ') + "}</tool_call>",
    ):
        assert FORMATS["hermes"].find_call(turn) is None


# --- the old regular expressions, as reference semantics on small turns ---------------------

OLD_PATTERNS = {
    "tags": re.compile(r"<python>((?:(?!<python>).)*?)</python>\s*\Z", re.DOTALL),
    "fenced": re.compile(r"```python[ \t]*\n((?:(?!```).)*?)```[ \t]*\n?\s*\Z", re.DOTALL),
    "hermes": re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>\s*\Z", re.DOTALL),
}


def old_find_call(name: str, turn: str) -> str | None:
    """What the old parser returned (on small turns, where its backtracking costs nothing)."""
    if name == "tags" and turn.count("<python>") != turn.count("</python>"):
        return None
    match = OLD_PATTERNS[name].search(turn)
    if match is None or name != "hermes":
        return None if match is None else match.group(1)
    try:
        call = json.loads(match.group(1))
        args = call.get("arguments") if isinstance(call, dict) else None
        if isinstance(args, str):
            args = json.loads(args)
    except (ValueError, RecursionError):
        return None
    if call.get("name") != "python" or not isinstance(args, dict):
        return None
    return args.get("code") if isinstance(args.get("code"), str) else None


def tags_markers_alternate(turn: str) -> bool:
    markers = re.findall(r"</?python>", turn)
    return len(markers) % 2 == 0 and all(
        marker == ("<python>", "</python>")[i % 2] for i, marker in enumerate(markers)
    )


FRAGMENTS = {
    "tags": ["<python>", "</python>", "x", " ", "\n", "<", ">", "python", "</", "\u3000"],
    "fenced": ["```python", "```python\n", "```", "\n```", "`", "\n", " ", "\t", "x", "\r", "\x0b"],
    "hermes": [
        "<tool_call>",
        "</tool_call>",
        CALL,
        f"<tool_call>{CALL}</tool_call>",
        "{",
        "}",
        " ",
        "\n",
        '"name": "python"',
        '"arguments": {"code": "x"}',
        '"arguments": "{\\"code\\": \\"y\\"}"',
        ", ",
        '"',
        "x",
        "\u3000",
    ],
}


@pytest.mark.parametrize("name", sorted(FRAGMENTS))
def test_the_parser_agrees_with_the_old_regular_expressions_on_small_turns(name):
    rng = random.Random(name)
    calls = 0
    for _ in range(20_000):
        turn = "".join(rng.choice(FRAGMENTS[name]) for _ in range(rng.randint(0, 9)))
        want = old_find_call(name, turn)
        if name == "tags" and not tags_markers_alternate(turn):
            want = None  # the one departure: nested blocks and stray closers make no call
        got = FORMATS[name].find_call(turn)
        assert got == want, turn
        calls += got is not None
    assert calls > 100  # the fragments do make calls, not only refusals


# --- linear time on adversarial turns --------------------------------------------------------

BIG_CODE = repeat("x = 1\n")
ADVERSARIAL: dict[str, dict[str, tuple[str, str | None]]] = {
    "tags": {
        "openers": (repeat("<python>"), None),
        "closers": (repeat("</python>"), None),
        "openers, then closers": (
            repeat("<python>", SIZE // 2) + repeat("</python>", SIZE // 2),
            None,
        ),
        "closers, then openers": (
            repeat("</python>", SIZE // 2) + repeat("<python>", SIZE // 2),
            None,
        ),
        "blocks": (repeat("<python></python>"), ""),
        "blocks, then text": (repeat("<python>x</python>") + " so", None),
        "blocks with whitespace after, then text": (
            repeat("<python></python>" + " " * 64) + "x",
            None,
        ),
        "a call, then 1 MB of whitespace and text": ("<python>x</python>" + " " * SIZE + "x", None),
        "one opener, many closers": ("<python>" + repeat("</python>"), None),
        "a 1 MB call": ("<python>" + BIG_CODE + "</python>", BIG_CODE),
    },
    "fenced": {
        "fences": (repeat("```"), None),
        "opening fences": (repeat("```python\n"), None),
        "a closing fence, then 1 MB of spaces and text": (
            "```python\n```" + " " * SIZE + "x",
            None,
        ),
        "closing fences followed by spaces": (repeat("```python\n```" + " " * 2048 + "x"), None),
        "blocks, then text": (repeat("```python\n```\n") + "x", None),
        "backticks": ("```python\n" + "`" * SIZE, None),
        "tabs on the fence line": ("```python" + "\t" * SIZE + "x\n```", None),
        "a 1 MB call": ("```python\n" + BIG_CODE + "```\n", BIG_CODE),
    },
    "hermes": {
        "openers with a brace, then a closer": (repeat("<tool_call>{") + "</tool_call>", None),
        "openers with a brace": (repeat("<tool_call>{"), None),
        "openers with a brace, then closers after braces": (
            repeat("<tool_call>{", SIZE // 2) + repeat("} </tool_call>", SIZE // 2) + "x",
            None,
        ),
        "openers": (repeat("<tool_call>") + "{}</tool_call>", None),
        "closers": (repeat("</tool_call>"), None),
        "blocks": (repeat("<tool_call>{}</tool_call>"), None),
        "braces": ("<tool_call>" + "{" * SIZE + "}</tool_call>", None),
        "deep arrays": ('<tool_call>{"arguments": ' + "[" * SIZE + "}</tool_call>", None),
        "whitespace after an opener": ("<tool_call>" + " " * SIZE + "x}</tool_call>", None),
        "a 1 MB call": (hermes({"code": BIG_CODE}), BIG_CODE),
    },
}


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the main thread after `seconds` (a backtracking regex is
    interrupted too: the engine checks for signals)."""

    def expire(signum, frame):
        raise TimeoutError(f"still parsing after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "name, case", [(name, case) for name, cases in ADVERSARIAL.items() for case in cases]
)
def test_a_1_mb_adversarial_turn_parses_in_linear_time(name, case):
    turn, code = ADVERSARIAL[name][case]
    assert len(turn) >= SIZE // 2
    with deadline(DEADLINE_S):
        started = time.perf_counter()
        found = FORMATS[name].find_call(turn)
        seconds = time.perf_counter() - started
    assert seconds < BOUND_S, f"{seconds:.3f} s"
    assert found == code


# --- the observation of every way a call can end (python_tool.describe) ----------------------

SETTINGS = python_tool_settings(max_output_chars=64)


def outcomes() -> Iterator[CaseResult]:
    for status in ("exited", "output_limit", "timeout", "crashed", "unknown"):
        for signal_number in [None, *range(1, 65), 0, 65, 255, -1]:
            for exit_code in (None, 0, 1, 2, 127, 255, -1, 256):
                yield CaseResult(status, exit_code, signal_number, b"out\xff", "", 0.1)
        yield CaseResult(status, None, None, b"", "Traceback\n  boom\nValueError: x\n", 9.0)


def test_every_way_a_call_ends_has_a_readable_observation():
    for result in outcomes():
        text, failed, timed_out = describe(result, SETTINGS)
        assert isinstance(text, str) and text.strip(), result
        assert len(text) <= 64 + 80, result  # within the limit, plus the cut marker
        if result.status != "exited" or result.exit_code != 0:
            assert failed, result
        elif result.signal is None:
            assert not failed and text == "out\ufffd", result
        assert timed_out == (result.status == "timeout" or result.signal == signal.SIGXCPU)


def test_a_realtime_signal_or_no_exit_status_is_said_plainly():
    text, failed, _ = describe(CaseResult("exited", None, 40), SETTINGS)
    assert failed and text == "killed by signal 40\n"
    text, failed, _ = describe(CaseResult("exited", None, None), SETTINGS)
    assert failed and text == "(no exit status)\n"
