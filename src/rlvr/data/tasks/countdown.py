"""Countdown: combine the given numbers with + - * / to reach a target.

A sample is a plain dict::

    {"id": "countdown-3,4,84->32",
     "prompt": "Using the numbers 3, 4, 84, each exactly once, and the operations + - * / with "
               "parentheses, write an expression equal to 32. Think inside <think> </think>, "
               "then write only the expression.\n",
     "numbers": [3, 4, 84], "target": 32, "answer": "4+(84/3)", "source": "countdown"}

and its demonstration (a correct completion for SFT) is `<think>84/3=28,4+28=32</think>4+(84/3)`.

Rule (as in TinyZero's Countdown): every given number is used **exactly once** (a number given
twice is used twice), with binary + - * / and parentheses; intermediate values may be fractions.
The verifier is `countdown` (rlvr.rewards.countdown), which reads "numbers" and "target";
"answer" holds the generating expression, so `exact_answer` can never reward a bare target.

Generation guarantees a solution: draw k numbers (k uniform in [min_numbers, max_numbers],
each uniform in 1..max_value), then repeatedly combine two random items of the pool with a random
operator until one expression is left. Only operators that keep every intermediate value a
positive integer are drawn (a - b with a > b, a / b when b divides a), and a target outside
1..max_target is redrawn. The target is that expression's value and the expression is the
sample's "answer".

Train/held-out split: `sha256("sorted numbers->target") mod 10 == 0` marks a problem held out
(~10%), independent of the seed and of the order the numbers are listed in.
"""

from __future__ import annotations

import hashlib
import random

from rlvr.markup import THINK_CLOSE, THINK_OPEN
from rlvr.rewards.countdown import parse_expression, steps

HELDOUT_MODULUS = 10
_MAX_TRIES = 10_000


def problem_key(numbers: list[int], target: int) -> str:
    """The order-free identity of a problem: sorted numbers and the target."""
    return ",".join(map(str, sorted(numbers))) + f"->{target}"


def is_heldout_problem(numbers: list[int], target: int) -> bool:
    """True if the problem belongs to the held-out split (about 10% of problems)."""
    digest = hashlib.sha256(problem_key(numbers, target).encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def _combine(rng: random.Random, a: int, b: int) -> tuple[str, int]:
    """A random operator over (a, b) that keeps the result a positive integer, as (op, value);
    the caller writes the larger operand first for - and /."""
    hi, lo = max(a, b), min(a, b)
    options = [("+", a + b), ("*", a * b)]
    if hi != lo:
        options.append(("-", hi - lo))
    if hi % lo == 0 and lo > 1:
        options.append(("/", hi // lo))
    return rng.choice(options)


class CountdownTask:
    """Procedurally generated countdown problems that always have a solution.

    sample_train(rng): a random training problem (never a held-out one).
    heldout(n): n distinct held-out problems from a stream seeded by `seed`; deterministic.
    demonstration(sample): a short `<think>` trace of the generating expression, then it.
    """

    source = "countdown"

    def __init__(
        self,
        min_numbers: int = 3,
        max_numbers: int = 4,
        max_value: int = 100,
        max_target: int = 1000,
        seed: int = 0,
    ) -> None:
        if not 2 <= min_numbers <= max_numbers:
            raise ValueError(
                f"CountdownTask: need 2 <= min_numbers <= max_numbers, got {min_numbers}, "
                f"{max_numbers}"
            )
        if max_value < 1 or max_target < 1:
            raise ValueError("CountdownTask: max_value and max_target must be >= 1")
        self.min_numbers = min_numbers
        self.max_numbers = max_numbers
        self.max_value = max_value
        self.max_target = max_target
        self.seed = seed

    # --- text formats -------------------------------------------------------------------------

    def format_prompt(self, numbers: list[int], target: int) -> str:
        listed = ", ".join(map(str, numbers))
        return (
            f"Using the numbers {listed}, each exactly once, and the operations + - * / with "
            f"parentheses, write an expression equal to {target}. Think inside <think> </think>, "
            "then write only the expression.\n"
        )

    def make_sample(self, numbers: list[int], target: int, expression: str) -> dict:
        return {
            "id": f"countdown-{problem_key(numbers, target)}",
            "prompt": self.format_prompt(numbers, target),
            "numbers": list(numbers),
            "target": target,
            "answer": expression,
            "source": self.source,
        }

    def demonstration(self, sample: dict) -> str:
        """`<think>a+b=c,...</think>EXPR` for the sample's generating expression (no EOS)."""
        tree = parse_expression(sample["answer"])
        return f"{THINK_OPEN}{','.join(steps(tree))}{THINK_CLOSE}{sample['answer']}"

    # --- generation ---------------------------------------------------------------------------

    def generate(self, rng: random.Random) -> tuple[list[int], int, str]:
        """(numbers, target, expression) with value(expression) == target, all numbers used."""
        for _ in range(_MAX_TRIES):
            k = rng.randint(self.min_numbers, self.max_numbers)
            numbers = [rng.randint(1, self.max_value) for _ in range(k)]
            pool = [(str(n), n) for n in numbers]  # (expression text, value)
            while len(pool) > 1:
                i, j = rng.sample(range(len(pool)), 2)
                (ea, a), (eb, b) = pool[i], pool[j]
                op, value = _combine(rng, a, b)
                if op in "-/" and a < b:
                    (ea, a), (eb, b) = (eb, b), (ea, a)
                text = f"{_wrap(ea)}{op}{_wrap(eb)}"
                pool = [p for m, p in enumerate(pool) if m not in (i, j)] + [(text, value)]
            expression, target = pool[0]
            if 1 <= target <= self.max_target:
                return numbers, target, expression
        raise ValueError(
            f"CountdownTask: no target within 1..{self.max_target} after {_MAX_TRIES} tries; "
            "raise data.countdown_max_target"
        )

    def sample_train(self, rng: random.Random) -> dict:
        while True:
            numbers, target, expression = self.generate(rng)
            if not is_heldout_problem(numbers, target):
                return self.make_sample(numbers, target, expression)

    def heldout(self, n: int) -> list[dict]:
        """n distinct held-out problems, the same list for the same settings and seed."""
        rng = random.Random(
            f"countdown-heldout-{self.min_numbers}-{self.max_numbers}-{self.max_value}-"
            f"{self.max_target}-{self.seed}"
        )
        seen: set[str] = set()
        samples: list[dict] = []
        misses = 0
        while len(samples) < n:
            numbers, target, expression = self.generate(rng)
            key = problem_key(numbers, target)
            if key in seen or not is_heldout_problem(numbers, target):
                misses += 1
                if misses > 1000 * (n + 10):
                    raise ValueError(
                        f"CountdownTask: found only {len(samples)} of {n} held-out problems; "
                        "the settings allow too few distinct problems"
                    )
                continue
            seen.add(key)
            samples.append(self.make_sample(numbers, target, expression))
        return samples


def _wrap(text: str) -> str:
    """Parenthesise a compound sub-expression so the written expression keeps the tree's order."""
    return text if text.isdigit() else f"({text})"
