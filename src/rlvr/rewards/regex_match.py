"""Regex verifier (`regex`): the final answer must match the sample's pattern in full.

    reward = 1.0 if re.fullmatch(sample["pattern"], answer) else 0.0

The answer: the text after the reasoning (rewards/structured.py), or the content of its last
`<answer>...</answer>` when it has one, stripped of surrounding whitespace. No answer (an open
`<think>`, an `<answer>` left open), or one over `max_answer_chars`, scores 0.

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

Sample: {"pattern": str}; inline flags (`(?i)`) are the way to set flags.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import DataError
from rlvr.rewards.base import Score
from rlvr.rewards.structured import CheckTimeout, IsolatedCheck, after_reasoning

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


def final_answer(completion: str) -> str | None:
    """The answer text a pattern is matched against, or None."""
    text = after_reasoning(completion)
    if text is None:
        return None
    if ANSWER_OPEN in text or ANSWER_CLOSE in text:
        head, sep, tail = text.rpartition(ANSWER_CLOSE)
        start = head.rfind(ANSWER_OPEN)
        if not sep or start < 0 or ANSWER_OPEN in tail:
            return None
        text = head[start + len(ANSWER_OPEN) :]
    return text.strip()


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
        return "ok", answer is not None and compiled.fullmatch(answer) is not None

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
        return Score(1.0 if result else 0.0, why or answer[:80])

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def for_worker(self) -> RegexVerifier:
        """An inline copy for a worker process that is itself killed on timeout."""
        return RegexVerifier(self.timeout_s, self.max_answer_chars, isolate=False)

    def close(self) -> None:
        self.check.close()


# "regex" in the registry; its worker process starts on the first check.
regex_reward = RegexVerifier()
