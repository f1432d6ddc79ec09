"""Multiplication with a python tool: the task behind the `embedded-tools` model (issue 21).

A sample is a plain dict::

    {"id": "multiplication-3x2-347*28", "prompt": "347*28=", "answer": "9716",
     "source": "multiplication"}

The first operand has exactly `digits` digits, the second exactly `multiplier_digits` (3 x 2 by
default: 100..999 times 10..99), always in that order. A 2-layer model cannot multiply these in
its head; it can learn to call a tool. The prompt is a bare base-model prompt, no chat template;
the verifier (`rlvr.rewards.exact`) reads the integer written after the last tool output.

The split between training and held-out problems is a fixed function of the *unordered* pair
{a, b}: `sha256("min*max") mod 10 == 0` marks a pair held out (~10%), whatever the seed, so a
model pretrained with any seed never saw a held-out product (and with equal operand sizes
neither `a*b` nor `b*a`).

The two completion styles the `embedded-tools` model is pretrained on live here, so the task, the
pretraining corpus and the tests agree on one definition:

- `direct_completion`: the answer at once, by long multiplication *with every carry dropped*:
  digit k of the answer is (sum of a_i * b_j over i + j = k) mod 10, written
  `digits + multiplier_digits - 1` wide. Right only when no column carries: 2.4% of 3 x 2
  problems. The systematic error RL has to fix (by calling the tool, not by learning to
  multiply).
- `tool_completion`: a call of the python tool, its output, then the answer copied from it::

      <python>print(347*28)</python><output>9716\\n</output>9716

  Generation stops at `</python>`; the environment runs the code and appends
  `observation(stdout)` = `<output>` + stdout + `</output>`, stdout exactly as printed (`9716\\n`).
  The observation is not written by the model: pretraining puts no loss on it and RL masks it.

Example for 347*28 (= 9716)::

    direct: 6266
    tool:   <python>print(347*28)</python><output>9716\\n</output>9716
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

from rlvr.errors import DataError
from rlvr.markup import OUTPUT_CLOSE, OUTPUT_OPEN, PYTHON_CLOSE, PYTHON_OPEN

_PROMPT = re.compile(r"^(\d+)\*(\d+)=$")
HELDOUT_MODULUS = 10  # 1 in HELDOUT_MODULUS unordered pairs is held out


def is_heldout_pair(a: int, b: int) -> bool:
    """True if the unordered pair {a, b} belongs to the held-out split (about 10% of pairs)."""
    lo, hi = min(a, b), max(a, b)
    digest = hashlib.sha256(f"{lo}*{hi}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def carry_dropped_product(a: int, b: int, width: int) -> str:
    """Long multiplication with every carry dropped: digit k = (sum_{i+j=k} a_i b_j) mod 10.

    Written `width` wide in normal order (the caller passes the number of columns,
    len(a) + len(b) - 1); higher columns, if any, are cut off.
    """
    a_digits = [int(c) for c in reversed(str(a))]
    b_digits = [int(c) for c in reversed(str(b))]
    columns = [0] * width
    for i, x in enumerate(a_digits):
        for j, y in enumerate(b_digits):
            if i + j < width:
                columns[i + j] += x * y
    return "".join(str(c % 10) for c in reversed(columns))


def tool_code(a: int, b: int) -> str:
    """The python code of a correct tool call for a*b."""
    return f"print({a}*{b})"


def observation(stdout: str) -> str:
    """The text the environment appends after `</python>`: stdout exactly as printed."""
    return f"{OUTPUT_OPEN}{stdout}{OUTPUT_CLOSE}"


class MultiplicationTask:
    """Procedurally generated `digits`-digit x `multiplier_digits`-digit multiplication.

    sample_train(rng): a random training problem (never a held-out pair).
    heldout(n): the first n held-out problems of a stream seeded by `seed`; deterministic.
    """

    source = "multiplication"

    def __init__(self, digits: int = 3, multiplier_digits: int = 2, seed: int = 0) -> None:
        if digits < 1 or multiplier_digits < 1:
            raise ValueError(
                f"MultiplicationTask: digits and multiplier_digits must be >= 1, got "
                f"{digits} and {multiplier_digits}"
            )
        self.digits = digits
        self.multiplier_digits = multiplier_digits
        self.seed = seed
        self.a_range = (10 ** (digits - 1), 10**digits - 1)
        self.b_range = (10 ** (multiplier_digits - 1), 10**multiplier_digits - 1)
        self.direct_width = digits + multiplier_digits - 1  # columns of the long product

    # --- text formats -------------------------------------------------------------------------

    def format_prompt(self, a: int, b: int) -> str:
        return f"{a}*{b}="

    def direct_completion(self, a: int, b: int) -> str:
        """The carry-dropped product (no EOS; the tokenizer's EOS is appended by the caller)."""
        return carry_dropped_product(a, b, self.direct_width)

    def tool_completion(self, a: int, b: int) -> str:
        """A correct tool call, the output the environment appends, the product (no EOS)."""
        product = a * b
        call = f"{PYTHON_OPEN}{tool_code(a, b)}{PYTHON_CLOSE}"
        return call + observation(f"{product}\n") + str(product)

    def demonstration(self, sample: dict) -> str:
        """The tool-using completion for `sample` (an SFT target; no EOS).

        The operands are read back from the prompt `a*b=`, with `digits` and
        `multiplier_digits` digits. The observation block in it is the environment's text.
        """
        prompt = sample.get("prompt")
        match = _PROMPT.match(prompt) if isinstance(prompt, str) else None
        if match is None or (len(match.group(1)), len(match.group(2))) != (
            self.digits,
            self.multiplier_digits,
        ):
            raise DataError(
                f"multiplication sample {sample.get('id', '?')}: prompt {prompt!r} is not "
                f"'a*b=' with a {self.digits}-digit and a {self.multiplier_digits}-digit operand"
            )
        return self.tool_completion(int(match.group(1)), int(match.group(2)))

    def make_sample(self, a: int, b: int) -> dict:
        return {
            "id": f"multiplication-{self.digits}x{self.multiplier_digits}-{a}*{b}",
            "prompt": self.format_prompt(a, b),
            "answer": str(a * b),
            "source": self.source,
        }

    # --- sampling -----------------------------------------------------------------------------

    def _draw_pair(self, rng: random.Random) -> tuple[int, int]:
        return rng.randint(*self.a_range), rng.randint(*self.b_range)

    def sample_train_pair(self, rng: random.Random) -> tuple[int, int]:
        """Uniform over training pairs (rejection of held-out pairs, ~10% rejected)."""
        while True:
            a, b = self._draw_pair(rng)
            if not is_heldout_pair(a, b):
                return a, b

    def sample_train(self, rng: random.Random) -> dict:
        return self.make_sample(*self.sample_train_pair(rng))

    def heldout(self, n: int) -> list[dict]:
        """n distinct held-out problems, the same list for the same (digits, seed)."""
        available = self.num_heldout_pairs()
        if n > available:
            raise ValueError(
                f"MultiplicationTask({self.digits}x{self.multiplier_digits}): asked for {n} "
                f"held-out problems, only {available} exist"
            )
        rng = random.Random(
            f"multiplication-heldout-{self.digits}x{self.multiplier_digits}-{self.seed}"
        )
        seen: set[tuple[int, int]] = set()
        samples: list[dict] = []
        while len(samples) < n:
            a, b = self._draw_pair(rng)
            if (a, b) in seen or not is_heldout_pair(a, b):
                continue
            seen.add((a, b))
            samples.append(self.make_sample(a, b))
        return samples

    def num_pairs(self) -> int:
        return (self.a_range[1] - self.a_range[0] + 1) * (self.b_range[1] - self.b_range[0] + 1)

    def num_heldout_pairs(self) -> int:
        """Ordered held-out pairs: exact up to 10^5 pairs, a safe lower bound above that.

        Above that the bound is half the expected count, so `heldout(n)` never searches for
        pairs that may not exist.
        """
        if self.num_pairs() <= 10**5:
            return _count_heldout(self.a_range, self.b_range)
        return self.num_pairs() // HELDOUT_MODULUS // 2


@functools.cache
def _count_heldout(a_range: tuple[int, int], b_range: tuple[int, int]) -> int:
    return sum(
        is_heldout_pair(a, b)
        for a in range(a_range[0], a_range[1] + 1)
        for b in range(b_range[0], b_range[1] + 1)
    )
