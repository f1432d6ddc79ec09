"""pass@k (Chen et al. 2021 unbiased estimator) and maj@k against hand-computed values."""

from math import comb

import pytest

from rlvr.observe.passk import maj_at_k, majority_vote, pass_at_k


def test_hand_computed_case():
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


@pytest.mark.parametrize("n,c,k", [(10, 3, 4), (20, 1, 5), (16, 7, 8), (4, 1, 4)])
def test_matches_the_binomial_formula(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_edges():
    assert pass_at_k(8, 0, 8) == 0.0  # c = 0: never solved
    assert pass_at_k(8, 8, 1) == 1.0  # c = n: always solved
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k: every 2-subset holds a correct sample
    assert pass_at_k(5, 3, 2) == pytest.approx(1 - comb(2, 2) / comb(5, 2))  # n - c == k


def test_stable_for_large_n():
    value = pass_at_k(10_000, 1, 100)
    assert value == pytest.approx(100 / 10_000)


@pytest.mark.parametrize("n,c,k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_rejects_invalid_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_majority_vote_ignores_none_and_breaks_ties_by_first_occurrence():
    assert majority_vote(["3", None, "4", "4", None, None]) == "4"
    assert majority_vote(["5", "4", "4", "5"]) == "5"  # tie: "5" came first
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_maj_at_k_with_rewards_and_with_a_callable():
    answers = ["12", "12", "13", None]
    assert maj_at_k(answers, [1.0, 1.0, 0.0, 0.0])
    assert not maj_at_k(answers, [0.0, 0.0, 1.0, 0.0])  # pass@k would count this one
    assert maj_at_k(answers, lambda a: a == "12")
    assert not maj_at_k([None, None], lambda a: True)
    with pytest.raises(ValueError):
        maj_at_k(answers, [1.0])
