"""Guess the answer, with hints: a small user environment for multi-turn rollouts.

    rlvr train environment.name=docs/examples/guess_env.py:GuessEnv

The model answers a sample whose `answer` is an integer (the built-in addition task's are).
A right answer ends the row with reward 1. A wrong one is told "higher" or "lower", is asked the
question again, and may guess again; each wrong guess lowers the reward of a later right answer
by `penalty`. After `max_guesses` wrong guesses, or a turn with no answer in it, the row ends
with reward 0. Every step that continues the row already gives reward 0, so a row the rollout
cuts off (environment.max_turns, rollout.max_new_tokens) keeps 0 and the verifier is never
asked. A sample without an integer answer is left to the verifier.

docs/guides/tools.md explains the protocol this class follows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlvr.environments import StepResult

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str) -> int | None:
    """The last integer after the reasoning (`<think>...</think>`), None when there is none or
    the reasoning is left open."""
    answer = text.rsplit("</think>", 1)[-1]
    if "<think>" in answer:
        return None
    found = _INTEGER.findall(answer)
    return int(found[-1]) if found else None


class GuessEnv:
    """One row's game. Made with no arguments; `reset` starts it, `step` judges each turn."""

    max_guesses = 3
    penalty = 0.25

    def __init__(self) -> None:
        self.question = ""
        self.answer: int | None = None
        self.wrong = 0

    def reset(self, sample: Mapping[str, Any]) -> str | None:
        self.question = str(sample.get("prompt", ""))
        try:
            self.answer = int(str(sample.get("answer", "")).strip())
        except ValueError:
            self.answer = None
        self.wrong = 0
        return None  # nothing to add before the model's first turn

    def step(self, text: str) -> StepResult:
        if self.answer is None:
            return StepResult(done=True)  # no reward given: the verifier scores the row
        guess = last_integer(text)
        if guess is None:
            return StepResult(reward=0.0, done=True)
        if guess == self.answer:
            return StepResult(reward=1.0 - self.penalty * self.wrong, done=True)
        self.wrong += 1
        if self.wrong >= self.max_guesses:
            return StepResult(reward=0.0, done=True)
        hint = "higher" if self.answer > guess else "lower"
        # plain text after the model's turn (role None): the hint, then the question again
        return StepResult(observation=f"\n{hint}\n{self.question}", reward=0.0)
