"""pass@k and maj@k from n samples per problem.

pass_at_k(n, c, k)
    The unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
    Code", the Codex paper): the probability that at least one of k samples drawn *without
    replacement* from n samples, c of them correct, is correct:

        pass@k = 1 - C(n - c, k) / C(n, k)

    computed in the numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k / i), which
    never forms the (huge) binomial coefficients.

maj_at_k(answers, correct)
    Majority vote (self-consistency) over the extracted final answers of k samples; the problem
    counts as solved iff the voted answer is correct.

Decisions (maj@k):
- None answers (nothing could be extracted) never vote; if every answer is None the vote is
  None and the problem counts as unsolved.
- Ties are broken by first occurrence: among the answers with the highest count, the one that
  appears earliest in `answers` wins. Sample order is the engine's order, so this is
  deterministic for a given seed.
- `correct` is either a callable answer -> bool, or a sequence aligned with `answers` (booleans
  or rewards, correct meaning reward >= 1): the voted answer is correct iff some sample that
  gave it is correct. With a verifier that scores only the extracted answer the samples giving
  one answer are all correct or all wrong, so "some" and "all" agree.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if n < 1 or k < 1 or not 0 <= c <= n or k > n:
        raise ValueError(f"pass_at_k: need n >= 1, 0 <= c <= n, 1 <= k <= n; got {n=} {c=} {k=}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The most frequent non-None answer; ties go to the one seen first; None if none."""
    counts: dict[Hashable, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    # dicts keep insertion order, i.e. first occurrence
    return next(a for a, count in counts.items() if count == best)


def maj_at_k(
    answers: Sequence[Hashable | None],
    correct: Callable[[Hashable], bool] | Sequence[float | bool],
) -> bool:
    """True iff the majority-voted answer among `answers` is correct (see module docstring)."""
    voted = majority_vote(answers)
    if voted is None:
        return False
    if callable(correct):
        return bool(correct(voted))
    if len(correct) != len(answers):
        raise ValueError(f"maj_at_k: {len(answers)} answers but {len(correct)} correctness values")
    return any(a == voted and float(r) >= 1.0 for a, r in zip(answers, correct))
