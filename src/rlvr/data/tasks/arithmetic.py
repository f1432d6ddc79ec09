"""Integer arithmetic over + - * whose difficulty grows during training.

A sample is a plain dict::

    {"id": "arithmetic-L5-12*3-45+7", "prompt": "12*3-45+7=", "answer": "-2",
     "level": 5, "source": "arithmetic-L5"}

The prompt is the bare expression followed by `=`, the format of the addition task the embedded
model knows; the answer is an integer (possibly negative), read by the `exact_answer` verifier.
Operands have exactly `digits` digits (1-digit operands are 1..9); each operator is drawn
uniformly from the level's set; `*` binds tighter than + and -, which associate left to right.

    level  operands  digits  operators
      1       2        1      + -
      2       2        2      + -
      3       3        2      + -
      4       3        1      + - *
      5       3        2      + - *
      6       4        2      + - *
      7       4        3      + - *
      8       5        3      + - *

Schedules (`difficulty`), with L0 = `level` and L1 = `max_level`:
- fixed: every problem is at L0.
- linear: the trainer calls `on_step(step, total_steps)` (step counted from 0) and the level is
  min(L1, L0 + floor((L1 - L0 + 1) * step / total_steps)): the run is cut into L1 - L0 + 1
  equal phases, one per level.
- adaptive: start at L0; `observe(samples, rewards)` keeps the rewards of the samples drawn at
  the current level in a window of the last `promote_window`; once the window is full and its
  mean is >= `promote_at`, the level goes up by one (at most L1) and the window is emptied.
  Rewards of samples drawn at an earlier level are ignored.

Train/held-out split: a fixed function of the expression's canonical form, the multiset of its
signed product terms with the factors of each term sorted (`12*3-45+7` -> `+3*12|+7|-45`), so
reorderings with the same value by commutativity (3+4 and 4+3, 2*5 and 5*2, a-b+c and a+c-b)
fall on the same side. `sha256(key) mod 10 == 0` is held out (~10%), whatever the seed.
Held-out problems cycle through the levels L0..L1 (one of each level in turn), carry their
"level", and their "source" is "arithmetic-L<level>" so per-source evaluation gives the
accuracy per level.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rlvr.markup import THINK_CLOSE, THINK_OPEN

HELDOUT_MODULUS = 10
SCHEDULES = ("fixed", "linear", "adaptive")
_ENUMERATE_UP_TO = 20_000  # levels with at most this many expressions are enumerated exactly


@dataclass(frozen=True)
class Level:
    operands: int
    digits: int
    operators: str


LEVELS: dict[int, Level] = {
    1: Level(2, 1, "+-"),
    2: Level(2, 2, "+-"),
    3: Level(3, 2, "+-"),
    4: Level(3, 1, "+-*"),
    5: Level(3, 2, "+-*"),
    6: Level(4, 2, "+-*"),
    7: Level(4, 3, "+-*"),
    8: Level(5, 3, "+-*"),
}
MAX_LEVEL = max(LEVELS)


# --- expressions -------------------------------------------------------------------------------


def format_expression(operands: Sequence[int], operators: Sequence[str]) -> str:
    """`operands[0] operators[0] operands[1] ...` without spaces."""
    parts = [str(operands[0])]
    for op, x in zip(operators, operands[1:]):
        parts += [op, str(x)]
    return "".join(parts)


def signed_terms(operands: Sequence[int], operators: Sequence[str]) -> list[tuple[str, list[int]]]:
    """The expression as signed product terms.

    2+3*4-5 -> [('+', [2]), ('+', [3, 4]), ('-', [5])]."""
    terms = [("+", [operands[0]])]
    for op, x in zip(operators, operands[1:]):
        if op == "*":
            terms[-1][1].append(x)
        else:
            terms.append((op, [x]))
    return terms


def canonical_key(operands: Sequence[int], operators: Sequence[str]) -> str:
    """Order-free form: sorted signed terms, each with sorted factors (see module docstring)."""
    terms = sorted(
        sign + "*".join(map(str, sorted(factors)))
        for sign, factors in signed_terms(operands, operators)
    )
    return "|".join(terms)


def is_heldout_expression(operands: Sequence[int], operators: Sequence[str]) -> bool:
    """True if the expression belongs to the held-out split (about 10% of canonical forms)."""
    digest = hashlib.sha256(canonical_key(operands, operators).encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def evaluation_steps(operands: Sequence[int], operators: Sequence[str]) -> tuple[list[str], int]:
    """The operations in evaluation order as `a<op>b=c` strings, and the value.

    Products first (each term's factors left to right), then the terms added and subtracted
    left to right: 2+3*4-5 -> ['3*4=12', '2+12=14', '14-5=9'], 9."""
    out, values = [], []
    terms = signed_terms(operands, operators)
    for _, factors in terms:
        product = factors[0]
        for f in factors[1:]:
            out.append(f"{product}*{f}={product * f}")
            product *= f
        values.append(product)
    total = values[0]
    for (sign, _), value in zip(terms[1:], values[1:]):
        new = total + value if sign == "+" else total - value
        out.append(f"{total}{sign}{value}={new}")
        total = new
    return out, total


# --- the task ----------------------------------------------------------------------------------


class ArithmeticTask:
    """Arithmetic problems at a level set by a difficulty schedule (module docstring).

    sample_train(rng): a training problem at the current level (never a held-out one).
    heldout(n): n distinct held-out problems over levels `level`..`max_level`; deterministic.
    on_step(step, total_steps), observe(samples, rewards): the schedule's hooks for the trainer.
    demonstration(sample): a correct `<think>` trace and the answer, for SFT.
    """

    def __init__(
        self,
        level: int = 1,
        max_level: int = MAX_LEVEL,
        difficulty: str = "fixed",
        promote_at: float = 0.8,
        promote_window: int = 64,
        seed: int = 0,
    ) -> None:
        if not 1 <= level <= max_level <= MAX_LEVEL:
            raise ValueError(
                f"ArithmeticTask: need 1 <= level <= max_level <= {MAX_LEVEL}, "
                f"got level={level}, max_level={max_level}"
            )
        if difficulty not in SCHEDULES:
            raise ValueError(f"ArithmeticTask: difficulty must be one of {SCHEDULES}")
        self.start_level = level
        self.max_level = max_level
        self.level = level  # the current level: training problems are drawn here
        self.difficulty = difficulty
        self.promote_at = promote_at
        self.window: deque[float] = deque(maxlen=promote_window)
        self.seed = seed

    # --- schedule -----------------------------------------------------------------------------

    def on_step(self, step: int, total_steps: int) -> None:
        """Before drawing step `step`'s prompts (0-based, of `total_steps`)."""
        if self.difficulty == "linear":
            span = self.max_level - self.start_level + 1
            self.level = min(self.max_level, self.start_level + span * step // max(1, total_steps))

    def observe(self, samples: Sequence[dict], rewards: Sequence[float]) -> None:
        """After scoring: one reward per sample (per completion); drives the adaptive schedule."""
        if len(samples) != len(rewards):
            raise ValueError(
                f"ArithmeticTask.observe: {len(samples)} samples but {len(rewards)} rewards"
            )
        if self.difficulty != "adaptive":
            return
        for sample, reward in zip(samples, rewards):
            if sample.get("level") != self.level:
                continue
            self.window.append(float(reward))
            full = len(self.window) == self.window.maxlen
            if full and sum(self.window) / len(self.window) >= self.promote_at:
                if self.level < self.max_level:
                    self.level += 1
                self.window.clear()

    def metrics(self) -> dict[str, float]:
        """Schedule state worth logging each step."""
        return {"data/level": float(self.level)}

    def state_dict(self) -> dict:
        """The schedule's state, stored in training checkpoints so a resumed run keeps its level."""
        return {"level": self.level, "window": list(self.window)}

    def load_state_dict(self, state: dict) -> None:
        self.level = int(state["level"])
        self.window.clear()
        self.window.extend(float(x) for x in state["window"])

    # --- samples ------------------------------------------------------------------------------

    def make_sample(self, level: int, operands: Sequence[int], operators: Sequence[str]) -> dict:
        operands, operators = list(operands), list(operators)
        expression = format_expression(operands, operators)
        _, value = evaluation_steps(operands, operators)
        return {
            "id": f"arithmetic-L{level}-{expression}",
            "prompt": f"{expression}=",
            "answer": str(value),
            "level": level,
            "source": f"arithmetic-L{level}",
        }

    def demonstration(self, sample: dict) -> str:
        """`<think>3*4=12,2+12=14,14-5=9</think>9` for prompt `2+3*4-5=` (no EOS)."""
        operands, operators = parse_prompt(sample["prompt"])
        trace, value = evaluation_steps(operands, operators)
        return f"{THINK_OPEN}{','.join(trace)}{THINK_CLOSE}{value}"

    def draw(self, rng: random.Random, level: int) -> tuple[list[int], list[str]]:
        spec = LEVELS[level]
        low, high = (1, 9) if spec.digits == 1 else (10 ** (spec.digits - 1), 10**spec.digits - 1)
        operands = [rng.randint(low, high) for _ in range(spec.operands)]
        operators = [rng.choice(spec.operators) for _ in range(spec.operands - 1)]
        return operands, operators

    def sample_train(self, rng: random.Random) -> dict:
        while True:
            operands, operators = self.draw(rng, self.level)
            if not is_heldout_expression(operands, operators):
                return self.make_sample(self.level, operands, operators)

    def heldout(self, n: int) -> list[dict]:
        """n held-out problems, one per level of `level`..`max_level` in turn; the same list for
        the same levels and seed. No two share a canonical form. A level whose held-out forms run
        out is skipped; ValueError if all of them do before n."""
        streams = {
            lv: self._heldout_stream(lv) for lv in range(self.start_level, self.max_level + 1)
        }
        samples: list[dict] = []
        while len(samples) < n:
            if not streams:
                raise ValueError(
                    f"ArithmeticTask: asked for {n} held-out problems, levels "
                    f"{self.start_level}..{self.max_level} have only {len(samples)}"
                )
            for lv in list(streams):
                if len(samples) == n:
                    break
                nxt = next(streams[lv], None)
                if nxt is None:
                    del streams[lv]
                else:
                    samples.append(nxt)
        return samples

    def _heldout_stream(self, level: int) -> Iterator[dict]:
        """Distinct (by canonical form) held-out problems of one level, in a seeded order."""
        rng = random.Random(f"arithmetic-heldout-L{level}-{self.seed}")
        seen: set[str] = set()
        if level_size(level) <= _ENUMERATE_UP_TO:
            candidates = list(heldout_expressions(level))
            rng.shuffle(candidates)
            pool: Iterator[tuple[Sequence[int], Sequence[str]]] = iter(candidates)
        else:  # too many to list: sample; held-out forms are plentiful at these levels
            pool = (self.draw(rng, level) for _ in itertools.count())
        for operands, operators in pool:
            key = canonical_key(operands, operators)
            if key in seen or not is_heldout_expression(operands, operators):
                continue
            seen.add(key)
            yield self.make_sample(level, operands, operators)


def level_size(level: int) -> int:
    """The number of distinct (operands, operators) sequences of a level."""
    spec = LEVELS[level]
    per_operand = 9 if spec.digits == 1 else 9 * 10 ** (spec.digits - 1)
    return per_operand**spec.operands * len(spec.operators) ** (spec.operands - 1)


def enumerate_level(level: int) -> list[tuple[list[int], list[str]]]:
    """Every (operands, operators) of a level, in lexicographic order."""
    spec = LEVELS[level]
    low, high = (1, 9) if spec.digits == 1 else (10 ** (spec.digits - 1), 10**spec.digits - 1)
    span = range(low, high + 1)
    return [
        (list(xs), list(ops))
        for xs in itertools.product(span, repeat=spec.operands)
        for ops in itertools.product(spec.operators, repeat=spec.operands - 1)
    ]


@functools.lru_cache(maxsize=len(LEVELS))
def heldout_expressions(level: int) -> tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]:
    """Every held-out (operands, operators) of a level, listed once per process (cached)."""
    return tuple(
        (tuple(xs), tuple(ops))
        for xs, ops in enumerate_level(level)
        if is_heldout_expression(xs, ops)
    )


def parse_prompt(prompt: str) -> tuple[list[int], list[str]]:
    """Operands and operators of a prompt `12*3-45+7=`; ValueError for anything else."""
    text = prompt.strip().removesuffix("=")
    operands, operators, digits = [], [], ""
    for c in text:
        if c.isascii() and c.isdigit():
            digits += c
        elif c in "+-*" and digits:
            operands.append(int(digits))
            operators.append(c)
            digits = ""
        else:
            raise ValueError(f"not an arithmetic prompt: {prompt!r}")
    if not digits:
        raise ValueError(f"not an arithmetic prompt: {prompt!r}")
    operands.append(int(digits))
    return operands, operators
