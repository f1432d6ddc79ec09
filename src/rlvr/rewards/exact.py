"""Exact-answer verifier for integer answers, with strict extraction of one final answer.

A completion is a direct answer (`632`), a reasoning trace followed by the answer
(`<think>...</think>632`), or tool calls followed by the answer: zero or more complete pairs of
a python call and the environment's output, then the answer::

    <python>print(347*28)</python><output>9716\n</output>9716

optionally after one leading think block. Extraction is strict on purpose: a policy under RL
will find any leniency (hedging with two numbers, never closing `<think>`, writing prose around
the answer, leaving the answer inside a tool's output), so anything that is not exactly one
integer after at most one complete think block and complete tool pairs scores 0.

Grammar (whitespace = Python's str.strip() set):

    completion := ws [THINK ws] (CALL ws OUTPUT ws)* INTEGER ws
    THINK      := "<think>" text "</think>"        text without <think>
    CALL       := "<python>" body "</python>"      body without any of the six tags
    OUTPUT     := "<output>" body "</output>"
    INTEGER    := -?[0-9]+

Decisions:
- Whitespace around the answer, before `<think>` and between blocks is ignored; whitespace
  inside the answer is not. Any other text between blocks is malformed.
- Every output block must follow a call, every call must be followed by its output, and the
  answer must come after the last output: an answer that appears only inside an output block,
  an unclosed block, a stray closing tag, or a tag inside a call or an output (e.g. a program
  that prints `</output>`) gives None. Tool tags inside the think block are plain text.
- Leading zeros are accepted (`0632` == `632`): answers are compared as integers, and the
  embedded model's direct answers are fixed-width, so `052` is a legitimate integer answer.
  The comparison works on normalised decimal digits (sign, no leading zeros, `-0` == `0`), so
  an answer of any length is scored (Python's int() refuses strings over 4300 digits).
- The sample's `answer` must be an integer (an int, an integral float, or a string int() reads,
  of any length); a missing or other answer is a DataError naming the sample, not a 0 reward.
- A leading `+` is not an integer here (regex `^-?[0-9]+$`, ASCII digits only).
- The completion text must not contain the EOS token's text (decode without the final EOS, or
  with skip_special_tokens=True: `<think>`/`</think>` and the tool tags are non-special added
  tokens in the embedded tokenizers and survive that).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlvr.errors import DataError
from rlvr.markup import (
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    PYTHON_CLOSE,
    PYTHON_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
)

_TOOL_TAGS = (THINK_OPEN, THINK_CLOSE, PYTHON_OPEN, PYTHON_CLOSE, OUTPUT_OPEN, OUTPUT_CLOSE)
_INTEGER = re.compile(r"-?[0-9]+")
_SIGNED_INTEGER = re.compile(r"[+-]?[0-9]+")
_CHUNK_DIGITS = 4000  # under Python's default int <-> str digit limit (4300)


def extract_final_answer(completion: str) -> str | None:
    """The single integer a completion answers with, or None.

    After an optional complete leading `<think>...</think>` block and zero or more complete
    `<python>...</python><output>...</output>` pairs, the rest, stripped of surrounding
    whitespace, must match ^-?[0-9]+$ (the module docstring has the grammar). None for: no
    answer, several numbers or any other text, an unclosed `<think>`, a stray `</think>`, a
    think block that does not start the completion, more than one think block, an unclosed or
    unpaired tool block, text between blocks, or an answer before the last output.
    """
    text = completion.strip()
    if text.startswith(THINK_OPEN):
        think = _split_block(text, THINK_OPEN, THINK_CLOSE)
        if think is None or THINK_OPEN in think[0]:
            return None
        text = think[1].lstrip()
    if THINK_OPEN in text or THINK_CLOSE in text:
        return None
    while text.startswith(PYTHON_OPEN):
        call = _split_block(text, PYTHON_OPEN, PYTHON_CLOSE)
        if call is None or _has_tag(call[0]):
            return None
        output = _split_block(call[1].lstrip(), OUTPUT_OPEN, OUTPUT_CLOSE)
        if output is None or _has_tag(output[0]):
            return None
        text = output[1].lstrip()
    text = text.rstrip()
    return text if _INTEGER.fullmatch(text) else None


def _split_block(text: str, open_tag: str, close_tag: str) -> tuple[str, str] | None:
    """(body, rest) when `text` starts with a complete open_tag...close_tag block, else None."""
    if not text.startswith(open_tag):
        return None
    end = text.find(close_tag, len(open_tag))
    if end < 0:
        return None
    return text[len(open_tag) : end], text[end + len(close_tag) :]


def _has_tag(body: str) -> bool:
    return any(tag in body for tag in _TOOL_TAGS)


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
            number = int(text)  # also reads '1_000' and non-ASCII digits, as int() does
        except ValueError:
            raise DataError(f"{where} must be an integer, got {value[:80]!r}") from None
        value = number
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


def calls_tool(completion: str) -> bool:
    """True if the completion opens a `<python>` tool call anywhere."""
    return PYTHON_OPEN in completion
