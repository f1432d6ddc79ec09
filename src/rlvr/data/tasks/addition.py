"""Multi-digit addition with carries: the task behind `rlvr train`'s embedded default.

A sample is a plain dict::

    {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632", "source": "addition"}

Operands have exactly `digits` digits (3 by default: 100..999). The prompt is a bare base-model
prompt with no chat template; the verifier (`rlvr.rewards.exact`) reads the integer the model
writes after it.

The split between training and held-out problems is a fixed function of the *unordered* pair
{a, b}: `sha256("min+max") mod 10 == 0` marks a pair held out (~10%). It does not depend on the
seed, so a model pretrained with any seed never saw a held-out problem, and because the key is
unordered, neither `a+b` nor `b+a` of a held-out pair is ever trained on (addition commutes).

The two completion styles the embedded base model is pretrained on live here too, so the task,
the pretraining data and the tests agree on one definition:

- `direct_completion`: the answer written at once, *with every carry dropped* (each digit is
  (a_i + b_i) mod 10, always `digits` wide). It is right exactly when no column carries, about
  13% of 3-digit problems. This is the systematic error that RL has to fix.
- `reasoning_completion`: a `<think>` trace of column additions, least-significant column first,
  each step fixed-width `x+y+c=ss` (ss = two-digit column sum, its first digit is the next carry),
  then `</think>` and the correct sum in normal digit order.

Example for 347+285::

    direct:    522
    reasoning: <think>7+5+0=12,4+8+1=13,3+2+1=06</think>632
"""

from __future__ import annotations

import hashlib
import random
import re

from rlvr.errors import DataError
from rlvr.markup import THINK_CLOSE, THINK_OPEN

_PROMPT = re.compile(r"^(\d+)\+(\d+)=$")
HELDOUT_MODULUS = 10  # 1 in HELDOUT_MODULUS unordered pairs is held out


def is_heldout_pair(a: int, b: int) -> bool:
    """True if the unordered pair {a, b} belongs to the held-out split (about 10% of pairs)."""
    lo, hi = min(a, b), max(a, b)
    digest = hashlib.sha256(f"{lo}+{hi}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def has_carry(a: int, b: int) -> bool:
    """True if adding a and b column by column produces at least one carry."""
    while a or b:
        if a % 10 + b % 10 >= 10:
            return True
        a, b = a // 10, b // 10
    return False


def carry_dropped_sum(a: int, b: int, digits: int) -> str:
    """The digit-wise sum (a_i + b_i) mod 10, written `digits` wide in normal order."""
    out = []
    for _ in range(digits):
        out.append(str((a % 10 + b % 10) % 10))
        a, b = a // 10, b // 10
    return "".join(reversed(out))


def column_steps(a: int, b: int, digits: int) -> list[str]:
    """The column additions `x+y+c=ss` from the least-significant column up."""
    steps, carry = [], 0
    for _ in range(digits):
        x, y = a % 10, b % 10
        total = x + y + carry
        steps.append(f"{x}+{y}+{carry}={total:02d}")
        carry = total // 10
        a, b = a // 10, b // 10
    return steps


class AdditionTask:
    """Procedurally generated `digits`-digit + `digits`-digit addition problems.

    sample_train(rng): a random training problem (never a held-out pair).
    heldout(n): the first n held-out problems of a stream seeded by `seed`; deterministic.
    """

    source = "addition"

    def __init__(self, digits: int = 3, seed: int = 0) -> None:
        if digits < 1:
            raise ValueError(f"AdditionTask: digits must be >= 1, got {digits}")
        self.digits = digits
        self.seed = seed
        self.low = 10 ** (digits - 1)
        self.high = 10**digits - 1

    # --- text formats -------------------------------------------------------------------------

    def format_prompt(self, a: int, b: int) -> str:
        return f"{a}+{b}="

    def direct_completion(self, a: int, b: int) -> str:
        """The carry-dropped answer (no EOS; the tokenizer's EOS is appended by the caller)."""
        return carry_dropped_sum(a, b, self.digits)

    def reasoning_completion(self, a: int, b: int) -> str:
        """A correct `<think>` column-addition trace followed by the correct sum (no EOS)."""
        trace = ",".join(column_steps(a, b, self.digits))
        return f"{THINK_OPEN}{trace}{THINK_CLOSE}{a + b}"

    def demonstration(self, sample: dict) -> str:
        """The correct `<think>` trace and answer for `sample` (an SFT target; no EOS).

        The operands are read back from the prompt `a+b=`; each must have exactly `digits`
        digits, since the trace has one column step per digit.
        """
        prompt = sample.get("prompt")
        match = _PROMPT.match(prompt) if isinstance(prompt, str) else None
        if match is None or any(len(g) != self.digits for g in match.groups()):
            raise DataError(
                f"addition sample {sample.get('id', '?')}: prompt {prompt!r} is not "
                f"'a+b=' with two {self.digits}-digit operands"
            )
        return self.reasoning_completion(int(match.group(1)), int(match.group(2)))

    def make_sample(self, a: int, b: int) -> dict:
        return {
            "id": f"addition-{self.digits}d-{a}+{b}",
            "prompt": self.format_prompt(a, b),
            "answer": str(a + b),
            "source": self.source,
        }

    # --- sampling -----------------------------------------------------------------------------

    def sample_train_pair(self, rng: random.Random) -> tuple[int, int]:
        """Uniform over training pairs (rejection of held-out pairs, ~10% rejected)."""
        while True:
            a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high)
            if not is_heldout_pair(a, b):
                return a, b

    def sample_train(self, rng: random.Random) -> dict:
        return self.make_sample(*self.sample_train_pair(rng))

    def heldout(self, n: int) -> list[dict]:
        """n distinct held-out problems, the same list for the same (digits, seed)."""
        available = self.num_heldout_pairs()
        if n > available:
            raise ValueError(
                f"AdditionTask(digits={self.digits}): asked for {n} held-out problems, "
                f"only {available} exist"
            )
        rng = random.Random(f"addition-heldout-{self.digits}-{self.seed}")
        seen: set[tuple[int, int]] = set()
        samples: list[dict] = []
        while len(samples) < n:
            a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high)
            if (a, b) in seen or not is_heldout_pair(a, b):
                continue
            seen.add((a, b))
            samples.append(self.make_sample(a, b))
        return samples

    def num_pairs(self) -> int:
        return (self.high - self.low + 1) ** 2

    def num_heldout_pairs(self) -> int:
        """Ordered held-out pairs: exact for <= 2 digits, a safe lower bound above that.

        Above 2 digits the bound is half the expected count (8e4 -> 4e4 for 3 digits), so
        `heldout(n)` never searches for pairs that may not exist.
        """
        if self.digits <= 2:
            span = range(self.low, self.high + 1)
            return sum(is_heldout_pair(a, b) for a in span for b in span)
        return self.num_pairs() // HELDOUT_MODULUS // 2
