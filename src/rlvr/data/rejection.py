"""Rejection sampling and pass-rate curricula over scored completions: pure functions, no model.

The second stage of the DeepSeek-R1 recipe samples k completions per prompt from an RL-trained
policy, keeps the verified ones as SFT data, and measures how hard each prompt is. A row here is
one scored completion::

    {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632",
     "completion": "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632", "reward": 1.0,
     "num_tokens": 34, "finish_reason": "eos"}

`id` names the prompt (all k completions of a prompt share it); `num_tokens` counts generated
tokens, the EOS token included; `finish_reason` is the rollout engine's ("eos", "stop", or
"length" for a completion cut at the token limit).

`rejection_sample` checks each row in this order and counts a dropped row under the first check
it fails, so every dropped row is counted exactly once (`DROP_REASONS`):

  1. incorrect    reward < min_reward
  2. truncated    finish_reason == "length"                           (drop_truncated)
  3. format       no well-formed leading <think>...</think> block     (require_format)
  4. too_short    num_tokens < min_tokens                             (min_tokens > 0)
  5. too_long     num_tokens > max_tokens                             (max_tokens > 0)
  6. duplicate    same prompt id and same completion after whitespace normalisation as an
                  earlier kept row                                    (dedup)
  7. over_cap     the prompt already has max_per_prompt kept rows     (max_per_prompt > 0)

Correctness comes first so that the other counts describe correct completions lost to a
filter; duplicates and the cap come last so that they only count rows that would otherwise
be kept. Kept rows keep their input order, and the earliest of several duplicates is the one
kept, so the result is a deterministic function of the input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.config import option
from rlvr.errors import ConfigError, DataError
from rlvr.rewards.format import FormatVerifier

DROP_REASONS = (
    "incorrect",
    "truncated",
    "format",
    "too_short",
    "too_long",
    "duplicate",
    "over_cap",
)

# A completion is well formed when it is exactly: optional whitespace, one <think> block with
# non-whitespace content and no think tag inside, then a non-empty final answer with no think
# tag in it ("<think>7+5+0=12,...</think>632", or "...</think><answer>632</answer>" for the
# think/answer template). Every repetition is greedy and cannot cross a tag, so matching is
# linear in the completion length (no backtracking blow-up on adversarial text).
_NO_TAG = r"(?!</?think>)"
THINK_BLOCK_PATTERN = (
    rf"\s*<think>\s*{_NO_TAG}\S(?:{_NO_TAG}.)*</think>\s*{_NO_TAG}\S(?:{_NO_TAG}.)*"
)
think_block_format = FormatVerifier(pattern=THINK_BLOCK_PATTERN)


@dataclass
class RejectionOptions:
    """Which scored completions are kept as SFT data (checks in the module docstring's order)."""

    min_reward: float = option(1.0, "a completion is correct (kept) when reward >= min_reward")
    dedup: bool = option(
        True, "keep identical completions of a prompt once (whitespace-normalised)"
    )
    max_per_prompt: int = option(
        0, "at most this many kept completions per prompt (0 = no cap)", ge=0
    )
    min_tokens: int = option(0, "drop completions shorter than this many tokens (0 = off)", ge=0)
    max_tokens: int = option(0, "drop completions longer than this many tokens (0 = off)", ge=0)
    require_format: bool = option(
        False, "keep only completions that open with a well-formed <think>...</think> block"
    )
    drop_truncated: bool = option(True, "drop completions cut at the token limit")

    def check(self, prefix: str = "RejectionOptions.") -> None:
        """One-line ConfigError for a value out of range; `prefix` names the section."""
        if not math.isfinite(self.min_reward):
            raise ConfigError(f"{prefix}min_reward: must be a finite number, got {self.min_reward}")
        for name in ("max_per_prompt", "min_tokens", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{prefix}{name}: must be an integer >= 0, got {value!r}")
        if self.min_tokens and self.max_tokens and self.min_tokens > self.max_tokens:
            raise ConfigError(
                f"{prefix}min_tokens: must be <= max_tokens = {self.max_tokens}, "
                f"got {self.min_tokens}"
            )


def normalize_whitespace(text: str) -> str:
    """Runs of whitespace become one space; leading and trailing whitespace is removed."""
    return " ".join(text.split())


def _field(row: Mapping[str, Any], index: int, name: str, kinds: type | tuple, expected: str):
    value = row.get(name) if isinstance(row, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise DataError(f"row {index + 1}: field {name!r} must be {expected}, got {value!r}")
    return value


def _reward(row: Mapping[str, Any], index: int) -> float:
    reward = float(_field(row, index, "reward", (int, float), "a number"))
    if not math.isfinite(reward):
        raise DataError(f"row {index + 1}: field 'reward' must be a finite number, got {reward}")
    return reward


def _prompt_id(row: Mapping[str, Any], index: int) -> str:
    return str(_field(row, index, "id", (str, int), "a string or integer prompt id"))


def rejection_sample(
    rows: Iterable[Mapping[str, Any]], opts: RejectionOptions | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Keep the correct, clean completions; count every dropped row under one reason.

    Returns (kept rows as dicts, in input order; {reason: count} for every reason of
    DROP_REASONS, zeros included). len(kept) + sum(counts) == len(rows). A malformed row is a
    DataError naming its 1-based position in `rows` (the line of a samples.jsonl) and field.
    """
    opts = opts or RejectionOptions()
    opts.check()
    drops = dict.fromkeys(DROP_REASONS, 0)
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    per_prompt: dict[str, int] = {}
    for index, row in enumerate(rows):
        prompt_id = _prompt_id(row, index)
        completion = _field(row, index, "completion", str, "a string")
        reward = _reward(row, index)
        reason = None
        if reward < opts.min_reward:
            reason = "incorrect"
        elif (
            opts.drop_truncated
            and _field(row, index, "finish_reason", str, "a string (eos, stop or length)")
            == "length"
        ):
            reason = "truncated"
        elif opts.require_format and think_block_format(completion) != 1.0:
            reason = "format"
        elif opts.min_tokens or opts.max_tokens:
            tokens = _field(row, index, "num_tokens", int, "an integer token count")
            if opts.min_tokens and tokens < opts.min_tokens:
                reason = "too_short"
            elif opts.max_tokens and tokens > opts.max_tokens:
                reason = "too_long"
        if reason is None and opts.dedup:
            key = (prompt_id, normalize_whitespace(completion))
            if key in seen:
                reason = "duplicate"
            else:
                seen.add(key)
        if reason is None and opts.max_per_prompt:
            if per_prompt.get(prompt_id, 0) >= opts.max_per_prompt:
                reason = "over_cap"
        if reason is not None:
            drops[reason] += 1
            continue
        per_prompt[prompt_id] = per_prompt.get(prompt_id, 0) + 1
        kept.append(dict(row))
    return kept, drops


def pass_rates(rows: Iterable[Mapping[str, Any]], min_reward: float = 1.0) -> list[dict[str, Any]]:
    """Per prompt id, in order of first appearance: how many of its completions are correct.

    Each result is {id, prompt, answer, source, n, correct, pass_rate} where correct counts the
    completions with reward >= min_reward and pass_rate = correct / n; `answer` and `source`
    appear when the prompt's first row has them.
    """
    out: dict[str, dict[str, Any]] = {}
    for index, row in enumerate(rows):
        prompt_id = _prompt_id(row, index)
        reward = _reward(row, index)
        entry = out.get(prompt_id)
        if entry is None:
            entry = {"id": prompt_id, "prompt": _field(row, index, "prompt", str, "a string")}
            for key in ("answer", "source"):
                if row.get(key) is not None:
                    entry[key] = row[key]
            entry.update(n=0, correct=0)
            out[prompt_id] = entry
        entry["n"] += 1
        entry["correct"] += int(reward >= min_reward)
    for entry in out.values():
        entry["pass_rate"] = entry["correct"] / entry["n"]
    return list(out.values())


def curriculum_band(
    rates: Iterable[Mapping[str, Any]], low: float = 0.1, high: float = 0.9
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Split prompts by pass rate: (kept, dropped_too_easy, dropped_too_hard), input order kept.

    Both edges are inclusive: a prompt is kept when low <= pass_rate <= high, too easy when
    pass_rate > high and too hard when pass_rate < low. With the defaults a prompt the policy
    always solves (1.0) or never solves (0.0) carries no GRPO signal and is dropped, while 1 of
    10 (0.1) and 9 of 10 (0.9) are kept.
    """
    if not (0.0 <= low <= high <= 1.0):
        raise ConfigError(f"curriculum band: expected 0 <= low <= high <= 1, got [{low}, {high}]")
    kept, too_easy, too_hard = [], [], []
    for index, rate in enumerate(rates):
        value = _field(rate, index, "pass_rate", (int, float), "a number in [0, 1]")
        if value > high:
            too_easy.append(dict(rate))
        elif value < low:
            too_hard.append(dict(rate))
        else:
            kept.append(dict(rate))
    return kept, too_easy, too_hard


def pass_rate_histogram(rates: Iterable[Mapping[str, Any]], bins: int = 10) -> dict[str, list]:
    """Prompt counts per pass-rate bin [i/bins, (i+1)/bins), the last bin closed at 1.0.

    The bin is computed from the integer counts (bins * correct // n), so a pass rate that sits
    exactly on an edge (3 of 10 = 0.3) always lands in the bin it starts.
    """
    counts = [0] * bins
    for rate in rates:
        counts[min(bins - 1, bins * rate["correct"] // rate["n"])] += 1
    return {"edges": [i / bins for i in range(bins + 1)], "counts": counts}
