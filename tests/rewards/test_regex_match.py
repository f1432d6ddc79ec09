"""The regex verifier: which text is the answer, full matching, and the time limit."""

from __future__ import annotations

import time

import pytest

from rlvr.errors import DataError
from rlvr.rewards.regex_match import RegexVerifier, final_answer
from rlvr.rewards.registry import get_verifier

DATE = {"id": "d", "pattern": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}


@pytest.fixture(scope="module")
def verifier() -> RegexVerifier:
    return get_verifier("regex")


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("2024-01-05", 1.0),
        ("  2024-01-05 \n", 1.0),  # surrounding whitespace is not the answer
        ("<think>hmm</think><answer>2024-01-05</answer>", 1.0),
        # Two answers that differ are a hedge (until 2026-12-03 the last one was read).
        ("<answer>1999-12-31</answer> wait <answer>2024-01-05</answer>", 0.0),
        ("<answer>2024-01-05</answer> so <answer> 2024-01-05 </answer>", 1.0),  # the same
        ("The date is 2024-01-05", 0.0),  # a full match, not a search
        ("2024-01-05 or 2024-01-06", 0.0),
        ("2024-01-05\n", 1.0),
        ("2024-01-05\nX", 0.0),
        ("<think>2024-01-05</think>", 0.0),  # the answer only in the reasoning
        ("<think>2024-01-05", 0.0),  # unclosed reasoning
        ("<answer>2024-01-05", 0.0),  # unclosed answer tag
        ("<answer>2024-01-05</answer><answer>", 0.0),
        ("２０２４-０１-０５", 0.0),  # full-width digits are not [0-9]
    ],
)
def test_the_final_answer_must_match_in_full(verifier, completion, reward):
    assert verifier(completion, DATE) == reward


def test_python_syntax_lookarounds_and_inline_flags_work(verifier):
    password = {"pattern": r"(?=.*\d)(?=.*[a-z])\w{8,}"}
    assert verifier("abcdefg1", password) == 1.0 and verifier("abcdefgh", password) == 0.0
    assert verifier("YES", {"pattern": "(?i)yes"}) == 1.0
    assert verifier("abab", {"pattern": r"(ab)\1"}) == 1.0


def test_catastrophic_backtracking_scores_zero_at_the_limit_and_the_next_check_runs():
    v = RegexVerifier(timeout_s=1.0)
    started = time.monotonic()
    score = v.score("a" * 40 + "!", {"pattern": r"(a+)+"})
    assert score.reward == 0.0 and "timeout" in score.detail
    assert time.monotonic() - started < 1.0 + 2.0
    assert v("aaa", {"pattern": r"(a+)+"}) == 1.0
    v.close()


def test_an_answer_over_the_limit_scores_zero():
    assert RegexVerifier(max_answer_chars=5)("123456", {"pattern": r"\d+"}) == 0.0


def test_an_inline_copy_matches_the_same(verifier):
    inline = verifier.for_worker()
    assert inline("2024-01-05", DATE) == 1.0 and inline("x", DATE) == 0.0


def test_the_answer_text():
    assert final_answer("<think>a</think> b ") == "b"
    assert final_answer("x</think>y<think>") is None


@pytest.mark.parametrize(
    ("sample", "message"),
    [({"id": "r"}, "is missing"), ({"id": "r", "pattern": 5}, "is a int"),
     ({"id": "r", "pattern": "("}, "does not compile")],
)  # fmt: skip
def test_malformed_samples_are_one_line_data_errors(verifier, sample, message):
    with pytest.raises(DataError) as info:
        verifier("x", sample)
    assert message in str(info.value) and "'r'" in str(info.value)
    assert "\n" not in str(info.value)
