"""Format verifier: does the completion follow the `<think>..</think><answer>..</answer>` template?

Reward 1.0 if it does, else 0.0. The reward is a bonus whose size is set where verifiers are
composed ("math:1.0,format:0.1" gives 0.1 for a well-formed completion); it says nothing about
correctness, so it must never be the whole reward of a run.

The template must match the whole completion:
- exactly one think block, then exactly one answer block, nothing else;
- ASCII whitespace (spaces, tabs, newlines) is allowed before, between and after the blocks,
  since chat templates and tokenizers add newlines there, and it carries no content; any other
  character there (a zero-width space, U+3000, a \x1c separator) is text outside the blocks;
- no tag inside a block (`<think>` in the answer, a second `<answer>` inside the first);
- both blocks hold at least one visible character (rewards.structured.is_visible: a letter,
  number, punctuation or symbol), so an empty think skips the reasoning and an empty answer is
  no answer, and one made of invisible characters (U+200B, U+FEFF, U+3164, U+2800, a lone
  combining mark, U+00A0) is as empty; `require_think=False` makes the think block optional.
Tags are configurable (`think_tag`, `answer_tag`), or a full-match `pattern` replaces the template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlvr.rewards.structured import ASCII_SPACE, has_visible


class FormatVerifier:
    """`(completion, sample) -> 1.0 | 0.0` for the think/answer template (rules above)."""

    def __init__(
        self,
        think_tag: str = "think",
        answer_tag: str = "answer",
        require_think: bool = True,
        pattern: str | None = None,
    ) -> None:
        self.think = (f"<{think_tag}>", f"</{think_tag}>")
        self.answer = (f"<{answer_tag}>", f"</{answer_tag}>")
        self.require_think = require_think
        self.pattern = re.compile(pattern, re.DOTALL) if pattern is not None else None

    def __call__(self, completion: str, sample: Mapping[str, Any] | None = None) -> float:
        if self.pattern is not None:
            return 1.0 if self.pattern.fullmatch(completion) else 0.0
        rest = completion.strip(ASCII_SPACE)
        blocks = []
        if rest.startswith(self.think[0]) or self.require_think:
            block, rest = _leading_block(rest, *self.think)
            blocks.append(block)
        block, rest = _leading_block(rest.lstrip(ASCII_SPACE), *self.answer)
        blocks.append(block)
        tags = (*self.think, *self.answer)
        ok = rest == "" and all(
            b and has_visible(b) and not any(t in b for t in tags) for b in blocks
        )
        return 1.0 if ok else 0.0


def _leading_block(text: str, open_tag: str, close_tag: str) -> tuple[str | None, str]:
    """(content, text after it) if `text` starts with a whole block, else (None, text).

    The first closing tag ends the block (a block may not contain tags), found with str.find:
    a lazy regex over the template backtracks quadratically on many closing tags."""
    if not text.startswith(open_tag):
        return None, text
    end = text.find(close_tag, len(open_tag))
    if end < 0:
        return None, text
    return text[len(open_tag) : end], text[end + len(close_tag) :]


format_reward = FormatVerifier()
