"""The third red-team round's attacks on `math` and `math_lenient`: each completion here scored
1 for a wrong or hedged answer before its defence (tests/rewards/test_math_attacks.py and
test_math_extraction_attacks.py / test_math_value_attacks.py hold the earlier rounds)."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier  # noqa: E402


@pytest.fixture(scope="module")
def strict():
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


@pytest.fixture(scope="module")
def lenient():
    v = MathVerifier(timeout_s=10.0, lenient=True)
    yield v
    v.close()


# A non-ASCII sign, digit form, mark or invisible character joined to the number the lenient
# reading takes: what is written is another value (5−6, 5·6, 5⁶, 5⅚, 5⁄6, "56", "not 5").
JOINED = [
    "The answer is 5\u22126.",
    "The answer is 5\u00b76.",
    "The answer is 5\u22c56.",
    "The answer is 5\u2076.",
    "The answer is 5\u215a.",
    "The answer is 5\u2044 6.",
    "The answer is 5\u2215 6.",
    "The answer is 5\u200b6.",
    "The answer is 5\u00ad6.",
    "The answer is 5\u20606.",
    "The answer is 5\u0338.",
    "The answer is \u202e6 5.",
]

# The same hedges as "5 or 6" with other separators or words, in prose.
PROSE_HEDGES = [
    ("The answer is 5 | 6.", "5"),
    ("The answer is 5 \u2228 6.", "5"),
    ("The answer is 5 [6].", "5"),
    ("The answer is 5\u20266.", "5"),
    ("The answer is 5\u20136.", "5"),
    ("The answer is 5\uff0c6.", "5"),
    ("The answer is 5\u30016.", "5"),
    ("The answer is $5$ $6$.", "5"),
    ("The answer is $5$. $6$", "5"),
    ("The answer is 5 except when it is 6.", "5"),
    ("The answer is 5 when n is odd and 6 when n is even.", "5"),
    ("The answer is 5 \u00b1 1.", "5"),
    ("The answer is 5 and up.", "5"),
    ("Answer: 5 thru 6", "6"),
]

# Strict: numbers side by side with TeX spacing (math-verify sums them), hedges after the box
# that name a value with a verb, multipliers in text.
STRICT = [
    ("\\boxed{2 \\, 3}", "5"),
    ("\\boxed{2\\ 3}", "5"),
    ("\\boxed{2 \\; 3}", "5"),
    ("\\boxed{10 \\quad -5}", "5"),
    ("\\boxed{1 \\quad 2 \\quad 2}", "5"),
    ("\\boxed{5\\thinspace 6}", "11"),
    ("\\boxed{5\\medspace 6}", "11"),
    ("\\boxed{5\\,\\!6}", "11"),
    ("\\boxed{6\r5}", "11"),
    ("\\boxed{6\u20285}", "11"),
    ("\\boxed{5}, but 6 also works.", "5"),
    ("\\boxed{5} (6 also works)", "5"),
    ("\\boxed{5} (6 would fit too)", "5"),
    ("\\boxed{5 \\text{ pair}}", "5"),
    ("\\boxed{5 \\text{ pairs}}", "5"),
    ("\\boxed{5}\n\n---\n\n6", "5"),  # blank lines and a rule are no sentence of their own
    ("\\boxed{5}.\n\n\n\nActually 6.", "5"),
]

# What still scores 1: thousands groups with TeX spacing, counted things after the box.
KEEP = [
    ("\\boxed{1\\,000}", "1000"),
    ("\\boxed{12\\,345\\,678}", "12345678"),
    ("\\boxed{5}. It takes 5 years.", "5"),
    ("The answer is $\\boxed{7}$ apples.", "7"),
]


@pytest.mark.parametrize("completion", JOINED, ids=ascii)
def test_a_character_joined_to_the_answer_scores_zero_in_the_lenient_reading(lenient, completion):
    for gold in ("5", "6"):
        assert lenient.score(completion, {"answer": gold}).reward == 0.0, gold


@pytest.mark.parametrize("completion, gold", PROSE_HEDGES, ids=ascii)
def test_prose_hedges_with_other_separators_score_zero(lenient, completion, gold):
    assert lenient.score(completion, {"answer": gold}).reward == 0.0


@pytest.mark.parametrize("completion, gold", STRICT, ids=ascii)
def test_spacing_between_numbers_and_verbs_after_the_box_score_zero(strict, completion, gold):
    assert strict.score(completion, {"answer": gold}).reward == 0.0
    assert strict.score(completion, {"answer": "23"}).reward == 0.0


@pytest.mark.parametrize("completion, gold", KEEP, ids=ascii)
def test_thousands_groups_and_counted_things_still_score_one(strict, lenient, completion, gold):
    assert strict.score(completion, {"answer": gold}).reward == 1.0
    assert lenient.score(completion, {"answer": gold}).reward == 1.0
