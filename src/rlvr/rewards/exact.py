"""Exact-answer verifier for integer answers, with strict extraction of one final answer.

A completion is either a direct answer (`632`) or a reasoning trace followed by the answer
(`<think>...</think>632`). Extraction is strict on purpose: a policy under RL will find any
leniency (hedging with two numbers, never closing `<think>`, writing prose around the answer),
so anything that is not exactly one integer after at most one complete think block scores 0.

Decisions:
- Whitespace around the answer and before `<think>` is ignored; whitespace inside it is not.
- Leading zeros are accepted (`0632` == `632`): answers are compared as integers, and the
  embedded model's direct answers are fixed-width, so `052` is a legitimate integer answer.
- A leading `+` is not an integer here (regex `^-?[0-9]+$`, ASCII digits only).
- The completion text must not contain the EOS token's text (decode without the final EOS, or
  with skip_special_tokens=True: `<think>`/`</think>` are non-special added tokens in the
  embedded tokenizer and survive that).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_INTEGER = re.compile(r"-?[0-9]+")


def extract_final_answer(completion: str) -> str | None:
    """The single integer a completion answers with, or None.

    The answer is the text after a complete leading `<think>...</think>` block if there is one,
    else the whole completion, stripped of surrounding whitespace; it must match ^-?[0-9]+$.
    None for: no answer, several numbers or any other text, an unclosed `<think>`, a stray
    `</think>`, a think block that does not start the completion, or more than one think block.
    """
    text = completion.strip()
    opens, closes = text.count(THINK_OPEN), text.count(THINK_CLOSE)
    if opens or closes:
        if opens != 1 or closes != 1 or not text.startswith(THINK_OPEN):
            return None
        text = text.split(THINK_CLOSE, 1)[1].strip()
    return text if _INTEGER.fullmatch(text) else None


def exact_answer_reward(completion: str, sample: Mapping[str, Any]) -> float:
    """1.0 iff the extracted final answer equals sample["answer"] as integers, else 0.0."""
    answer = extract_final_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if int(answer) == int(sample["answer"]) else 0.0


def is_reasoning(completion: str) -> bool:
    """True if the completion opens a `<think>` block (after optional whitespace)."""
    return completion.lstrip().startswith(THINK_OPEN)
