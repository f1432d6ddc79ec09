"""The guessing game of guess_env.py written as an OpenEnv environment server, with nothing but
openenv-core's public API (an `Environment` with reset/step/state, pydantic `Action` and
`Observation` models, `create_app`), the way OpenEnv's own template writes one.

    uvicorn openenv_guess:app --app-dir docs/examples --host 127.0.0.1 --port 8000
    rlvr train environment.name=openenv:http://127.0.0.1:8000

or, letting rlvr start the server for the run and stop it at exit:

    rlvr train environment.name=openenv:docs/examples/openenv_guess.py:app

The model answers a sample whose `answer` is an integer (the built-in addition task's are);
rlvr passes the sample's fields to `reset` as keyword arguments. A right answer ends the episode
with reward 1. A wrong one is told "higher" or "lower" and asked the question again; each wrong
guess lowers the reward of a later right answer by 0.25. After three wrong guesses, or a turn
with no answer in it, the episode ends with reward 0.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field

_INTEGER = re.compile(r"-?\d+")


class GuessAction(Action):
    message: str = Field(..., description="the model's turn")


class GuessObservation(Observation):
    prompt: str = Field(default="", description="the text shown to the model next")
    wrong: int = Field(default=0, description="wrong guesses so far")


def last_integer(text: str) -> int | None:
    """The last integer after the reasoning (`<think>...</think>`), None when there is none or
    the reasoning is left open."""
    answer = text.rsplit("</think>", 1)[-1]
    if "<think>" in answer:
        return None
    found = _INTEGER.findall(answer)
    return int(found[-1]) if found else None


class GuessEnvironment(Environment):
    """One session's game: `reset` starts it from a sample, `step` judges each guess."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no state is shared between sessions
    max_guesses = 3
    penalty = 0.25

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.question = ""
        self.answer: int | None = None
        self.wrong = 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        prompt: str = "",
        answer: Any = None,
        **kwargs: Any,
    ) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.question, self.wrong = str(prompt), 0
        try:
            self.answer = int(str(answer).strip())
        except ValueError:
            self.answer = None
        return GuessObservation(prompt="")  # the question is the rollout's prompt already

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any):  # type: ignore[override]
        self._state.step_count += 1
        guess = last_integer(action.message)
        if guess is None or self.answer is None:
            return GuessObservation(done=True, reward=0.0, wrong=self.wrong)
        if guess == self.answer:
            reward = max(0.0, 1.0 - self.penalty * self.wrong)
            return GuessObservation(done=True, reward=reward, wrong=self.wrong)
        self.wrong += 1
        if self.wrong >= self.max_guesses:
            return GuessObservation(done=True, reward=0.0, wrong=self.wrong)
        hint = "higher" if guess < self.answer else "lower"
        return GuessObservation(prompt=f"\n{hint}\n{self.question}", reward=0.0, wrong=self.wrong)

    @property
    def state(self) -> State:
        return self._state


# One session per rollout row is open at once: allow at least the rows of a step and of an
# evaluation (rollout.prompts_per_step x rollout.group_size; eval.size x (1 + eval.t1_samples)).
app = create_app(
    GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=512
)
