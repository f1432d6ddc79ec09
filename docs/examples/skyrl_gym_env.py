"""An addition environment written with SkyRL-Gym's public API only, the way SkyRL's "Creating a
New Environment" tutorial writes its multiplication environment: a `BaseTextEnv` whose `step`
parses the model's answer, gives feedback as a new user message, and ends the episode when the
answer is right or the turns run out. Registering it under an id when the module is imported is
all rlvr needs (docs/environments/skyrl-gym.md):

    rlvr train environment.name=skyrl-gym:docs/examples/skyrl_gym_env.py:addition_hints

The model answers a bare sum ("347+285=", the embedded model's task), with a `<think>` block
or without; a wrong answer gets "higher" or "lower" and the question again. The reward, on the
episode's last step, is 1 for a right first answer and 0.25 less for every wrong one before it.
"""

from __future__ import annotations

import re
from typing import Any

from skyrl_gym import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

ANSWER = re.compile(r"^-?[0-9]+$")


class AdditionHintsEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = extras or {}
        assert "reward_spec" in extras, "reward_spec field is required"
        assert "ground_truth" in extras["reward_spec"], "ground_truth is required in reward_spec"
        self.ground_truth = int(extras["reward_spec"]["ground_truth"])
        self.max_turns = int(extras.get("max_turns", 3))
        self.question = ""

    def init(self, prompt):
        self.question = prompt[-1]["content"]  # shown again after a hint
        return prompt, {}

    def _parse_action(self, action: str) -> int | None:
        """The answer after the reasoning: the text after `</think>`, a whole number."""
        answer = action.rsplit("</think>", 1)[-1].strip()
        return int(answer) if ANSWER.match(answer) else None

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = self._parse_action(action)
        correct = answer == self.ground_truth
        metadata = {"correct": correct, "answered": answer is not None}
        done = correct or answer is None or self.turns >= self.max_turns
        if done:
            reward = 1.0 - 0.25 * (self.turns - 1) if correct else 0.0
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata=metadata
            )
        hint = "higher" if answer < self.ground_truth else "lower"
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"\n{hint}\n{self.question}"}],
            reward=0.0,
            done=False,
            metadata=metadata,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns}


register(id="addition_hints", entry_point=AdditionHintsEnv)
