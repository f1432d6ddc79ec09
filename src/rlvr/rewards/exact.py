"""Exact-answer verifier for integer answers, with strict extraction of one final answer.

A completion is either a direct answer (`632`) or a reasoning trace followed by the answer
(`<think>...</think>632`). Extraction is strict on purpose: a policy under RL will find any
leniency (hedging with two numbers, never closing `<think>`, writing prose around the answer),
so anything that is not exactly one integer after at most one complete think block scores 0.

Decisions:
- Whitespace around the answer and before `<think>` is ignored; whitespace inside it is not.
- Leading zeros are accepted (`0632` == `632`): answers are compared as integers, and the
  embedded model's direct answers are fixed-width, so `052` is a legitimate integer answer.
  The comparison works on normalised decimal digits (sign, no leading zeros, `-0` == `0`), so
  an answer of any length is scored (Python's int() refuses strings over 4300 digits).
- The sample's `answer` must be an integer (an int, an integral float, or a string int() reads,
  of any length); a missing or other answer is a DataError naming the sample, not a 0 reward.
- A leading `+` is not an integer here (regex `^-?[0-9]+$`, ASCII digits only).
- The completion text must not contain the EOS token's text (decode without the final EOS, or
  with skip_special_tokens=True: `<think>`/`</think>` are non-special added tokens in the
  embedded tokenizer and survive that).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlvr.errors import DataError

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_INTEGER = re.compile(r"-?[0-9]+")
_SIGNED_INTEGER = re.compile(r"[+-]?[0-9]+")
_CHUNK_DIGITS = 4000  # under Python's default int <-> str digit limit (4300)


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
    gold = gold_answer(sample)
    answer = extract_final_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if _normalise(answer) == gold else 0.0


def gold_answer(sample: Mapping[str, Any]) -> str:
    """sample["answer"] as normalised decimal digits; DataError when it is not an integer."""
    value = sample.get("answer")
    where = f"exact_answer verifier: sample {str(sample.get('id', '?'))[:80]!r}: field 'answer'"
    if value is None:
        raise DataError(f"{where} is missing (expected an integer)")
    if isinstance(value, str):
        text = value.strip()
        if _SIGNED_INTEGER.fullmatch(text):  # any length, no int() digit limit
            return _normalise(text)
        try:
            value = int(text)  # also reads '1_000' and non-ASCII digits, as int() does
        except ValueError:
            raise DataError(f"{where} must be an integer, got {value[:80]!r}") from None
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DataError(f"{where} must be an integer, got {type(value).__name__}")
    return _normalise(_int_text(value))


def _normalise(text: str) -> str:
    """'-007' -> '-7', '+5' -> '5', '-0' -> '0': equal strings iff equal integers."""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if text.startswith("-") and digits != "0" else digits


def _int_text(value: int) -> str:
    """str(value), also for an int over Python's digit limit (converted in chunks)."""
    try:
        return str(value)
    except ValueError:
        sign, value = ("-" if value < 0 else ""), abs(value)
        chunks = []
        while value:
            value, chunk = divmod(value, 10**_CHUNK_DIGITS)
            chunks.append(chunk)
        head, *rest = reversed(chunks)
        return sign + str(head) + "".join(f"{c:0{_CHUNK_DIGITS}d}" for c in rest)


def is_reasoning(completion: str) -> bool:
    """True if the completion opens a `<think>` block (after optional whitespace)."""
    return completion.lstrip().startswith(THINK_OPEN)
