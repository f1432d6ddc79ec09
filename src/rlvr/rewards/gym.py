"""The `gym` verifier: a reasoning-gym dataset's own scorer on the completion's answer.

Needs the optional extra: `pip install 'rlvr[gym]'`; reasoning_gym is imported on first use,
so the registry can list `gym` without it. The prompts come from `data.task=gym`
(rlvr/data/tasks/gym.py), whose samples carry what this verifier needs::

    {"prompt": ..., "answer": ..., "gym": {"name": "basic_arithmetic", "config": {...},
                                           "entry": {"question": ..., "answer": ..., ...}}}

The answer is read like the countdown verifier reads its expression
(`rlvr.rewards.countdown.final_answer_text`): everything up to the last `</think>` is dropped,
an unclosed `<think>` means no answer, the content of one `<answer>...</answer>` pair is the
answer if there are tags, else the stripped remaining text. That string (or None) goes to
the dataset's own `score_answer(answer, entry)`; its result is clipped to [0, 1] (NaN is 0).
An answer over `max_answer_chars` (2000) scores 0 without reaching the scorer. Some
reasoning-gym scorers give partial credit, so gym rewards can lie between 0 and 1.

The dataset is rebuilt in the verifier's process from the sample's stored name and settings
(`create_gym_dataset`, shared with the task), so it works in worker processes and from
`rlvr verify`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from rlvr.errors import ConfigError, DataError, UserError
from rlvr.rewards.base import Score
from rlvr.rewards.countdown import final_answer_text


def import_reasoning_gym(user: str = "data.task=gym") -> Any:
    """The reasoning_gym module, or a one-line UserError naming the extra."""
    try:
        import reasoning_gym
    except ImportError:
        raise UserError(
            f"{user} needs reasoning-gym, which is not installed: pip install 'rlvr[gym]'"
        ) from None
    return reasoning_gym


def create_gym_dataset(name: str, kwargs: Mapping[str, Any], user: str = "data.task=gym") -> Any:
    """`reasoning_gym.create_dataset(name, **kwargs)` with one-line errors naming data.gym_*."""
    rg = import_reasoning_gym(user)
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(name, list(DATASETS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"data.gym_name: unknown reasoning-gym dataset '{name}' "
            f"({len(DATASETS)} exist, e.g. basic_arithmetic, chain_sum){hint}"
        )
    try:
        return rg.create_dataset(name, **kwargs)
    except TypeError as e:
        raise ConfigError(f"data.gym_config: not a setting of '{name}': {e}") from None
    except (AssertionError, ValueError) as e:
        raise ConfigError(f"data.gym_config: invalid for '{name}': {e or 'rejected'}") from None


class GymVerifier:
    """`(completion, sample) -> [0, 1]`: the reasoning-gym dataset's own scorer on the answer.

    Datasets are rebuilt from the sample's stored name and settings (cached per setting), so
    the verifier works in worker processes and from `rlvr verify`."""

    def __init__(self, max_answer_chars: int = 2000) -> None:
        self.max_answer_chars = max_answer_chars
        self._datasets: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _dataset(self, name: str, kwargs: Mapping[str, Any]) -> Any:
        key = json.dumps([name, kwargs], sort_keys=True, default=str)
        with self._lock:
            if key not in self._datasets:
                self._datasets[key] = create_gym_dataset(name, kwargs, "the gym verifier")
            return self._datasets[key]

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        gym = sample.get("gym")
        if not isinstance(gym, Mapping) or not {"name", "config", "entry"} <= set(gym):
            raise DataError(
                "gym verifier: sample has no 'gym' field with name, config and entry "
                "(samples of data.task=gym have it)"
            )
        answer = final_answer_text(completion)
        if answer is not None and len(answer) > self.max_answer_chars:
            return Score(0.0, f"answer longer than {self.max_answer_chars} characters")
        dataset = self._dataset(gym["name"], gym["config"])
        reward = float(dataset.score_answer(answer, dict(gym["entry"])))
        reward = min(1.0, max(0.0, reward)) if reward == reward else 0.0
        shown = "no answer" if answer is None else answer[:80]
        return Score(reward, shown)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def __getstate__(self) -> dict[str, Any]:
        return {"max_answer_chars": self.max_answer_chars}  # datasets are rebuilt on demand

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, **state)


# "gym" in the registry; "rlvr.rewards.gym:gym_reward" as a spec.
gym_reward = GymVerifier()
