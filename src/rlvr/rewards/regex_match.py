"""Regex verifier (`regex`): the final answer must match the sample's pattern in full.

    reward = 1.0 if re.fullmatch(sample["pattern"], answer) else 0.0

The answer: the text after the reasoning (rewards/structured.py), or, when that text has answer
tags, the content of its `<answer>...</answer>` blocks; stripped of the ASCII spaces, tabs and
newlines around it (only those: `yes\\x1c`, `yes\\u00a0` and `\\ufeffyes` keep the character,
and the pattern decides). A tag is what a reader takes for one: any case, spaces inside the
brackets, attributes (`<ANSWER>`, `< answer >`, `</answer >`). No answer (score 0): an open
`<think>`, tags that do not alternate open, close (`<answer><answer>yes</answer>`, a stray
`</answer>`, one left open, a self-closing `<answer/>`), several blocks that do not all say the
same (`<answer>no</answer><answer>yes</answer>` is a hedge), an answer over `max_answer_chars`.
Text outside the blocks is not read.

A full match, not `re.match` or `re.search`: `re.match(r"^\\d+$", "123\\n")` succeeds (Python's
`$` also matches before a final newline), and so does `re.match(r"(?m)^\\d+$", "123\\nabc")`;
fullmatch needs the match to end where the answer ends, whatever the pattern's anchors and
flags say. A final newline is whitespace around the answer, stripped before matching.

The pattern is Python's `re` syntax (what dataset authors write and test with), compiled and
matched in a worker process killed after `timeout_s`: a backtracking pattern such as `(a+)+$`
on a crafted answer scores 0 after the limit instead of hanging the run. Why not a linear-time
engine (google-re2): it refuses backreferences and lookarounds, which real patterns use
(`(?=.*\\d)`), and would read the same pattern differently from the dataset's own tests.
A pattern `re` cannot compile is a DataError naming the sample.

Case-insensitive matching of an ASCII pattern is ASCII: Python folds U+017F (ſ) onto `s`, the
Kelvin sign U+212A onto `k` and U+0130/U+0131 onto `i`, so `(?i)^yes$` would pass "yeſ"; an
answer holding one of these four does not match an ASCII pattern that is case-insensitive.

Sample: {"pattern": str}; inline flags (`(?i)`) are the way to set flags.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import DataError
from rlvr.rewards.base import Score
from rlvr.rewards.structured import ASCII_SPACE, CheckTimeout, IsolatedCheck, after_reasoning

# Anything a reader takes for an answer tag: any case, spaces inside the brackets, attributes.
# Bounded, so that text full of "<answer" without ">" is scanned in linear time.
_TAG = re.compile(r"<\s{0,16}(/?)\s{0,16}answer(?=[\s/>])[^<>]{0,200}>", re.IGNORECASE)
# The non-ASCII characters that Python's case-insensitive matching takes for ASCII letters
# (U+0130 İ and U+0131 ı for i, U+017F ſ for s, U+212A Kelvin sign for k).
_ASCII_FOLDS = re.compile("[\u0130\u0131\u017f\u212a]")
_IGNORECASE_GROUP = re.compile(r"\(\?[a-zA-Z]*i")


def final_answer(completion: str) -> str | None:
    """The answer text a pattern is matched against, or None (see the module docstring)."""
    text = after_reasoning(completion)
    if text is None:
        return None
    tags = list(_TAG.finditer(text))
    if not tags:
        return text.strip(ASCII_SPACE)
    answers: set[str] = set()
    for i, tag in enumerate(tags):
        closing = tag.group(1) == "/"
        if tag.group()[:-1].rstrip().endswith("/") or closing != (i % 2 == 1):
            return None  # a self-closing tag, or tags that do not alternate open, close
        if closing:
            answers.add(text[tags[i - 1].end() : tag.start()].strip(ASCII_SPACE))
    if len(tags) % 2 or len(answers) != 1:  # an unclosed tag, or answers that differ: a hedge
        return None
    return answers.pop()


def folds_into_ascii(compiled: re.Pattern[str], answer: str) -> bool:
    """Whether `answer` may match the ASCII pattern only through Unicode case folding: the
    pattern is case-insensitive (its flags, or a scoped `(?i:...)`) and the answer holds a
    character that Python folds onto an ASCII letter. Checked instead of compiling with
    re.ASCII, which would also narrow `\\w` and `\\d` in patterns that mean them as Unicode."""
    pattern = compiled.pattern
    if not pattern.isascii() or not _ASCII_FOLDS.search(answer):
        return False
    return bool(compiled.flags & re.IGNORECASE) or bool(_IGNORECASE_GROUP.search(pattern))


def _matcher(_: Any) -> Callable[[tuple[str, str | None]], tuple[str, bool | str]]:
    """Worker side: (pattern, answer or None) -> ("ok", matched) or ("bad_pattern", message);
    the pattern is compiled even without an answer, so a bad one is always reported."""
    cache: dict[str, re.Pattern[str]] = {}

    def match(payload: tuple[str, str | None]) -> tuple[str, bool | str]:
        pattern, answer = payload
        compiled = cache.get(pattern)
        if compiled is None:
            try:
                compiled = re.compile(pattern)
            except (re.error, RecursionError, OverflowError, ValueError) as e:
                return "bad_pattern", " ".join(str(e).split())[:200]
            if len(cache) > 1000:
                cache.clear()
            cache[pattern] = compiled
        if answer is None or folds_into_ascii(compiled, answer):
            return "ok", False
        return "ok", compiled.fullmatch(answer) is not None

    return match


class RegexVerifier:
    """`(completion, sample) -> 1.0 | 0.0`: full match of the final answer against
    sample["pattern"]. timeout_s: the limit for compiling and matching one answer;
    max_answer_chars: longer answers score 0; isolate: False runs inline (no time limit: for
    code already inside a killable worker, like VerifierPool)."""

    def __init__(
        self, timeout_s: float = 2.0, max_answer_chars: int = 10_000, isolate: bool = True
    ) -> None:
        self.timeout_s, self.max_answer_chars = timeout_s, max_answer_chars
        self.check = IsolatedCheck(
            f"{__name__}:_matcher", None, timeout_s, isolate=isolate, on_crash=("ok", False)
        )

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        pattern = sample.get("pattern")
        where = f"regex verifier: sample {str(sample.get('id', '?'))[:80]!r}: field 'pattern'"
        if not isinstance(pattern, str):
            what = "is missing" if pattern is None else f"is a {type(pattern).__name__}"
            raise DataError(f"{where} {what} (expected a regular expression string)")
        answer = final_answer(completion)
        why = "no answer" if answer is None else ""
        if answer is not None and len(answer) > self.max_answer_chars:
            answer, why = None, f"answer longer than {self.max_answer_chars} characters"
        try:
            kind, result = self.check((pattern, answer))
        except CheckTimeout as e:
            return Score(0.0, f"{e}: {(answer or '')[:80]!r}")
        if kind == "bad_pattern":
            raise DataError(f"{where} does not compile: {result}")
        return Score(1.0 if result else 0.0, why or (answer or "")[:80])

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def for_worker(self) -> RegexVerifier:
        """An inline copy for a worker process that is itself killed on timeout."""
        return RegexVerifier(self.timeout_s, self.max_answer_chars, isolate=False)

    def close(self) -> None:
        self.check.close()


# "regex" in the registry; its worker process starts on the first check.
regex_reward = RegexVerifier()
