"""The `environment` verifier: the environment's own reward is the only reward.

With a multi-turn environment that gives each row its reward (`StepResult.reward`; another
library's environment through its adapter, docs/environments/), the verifier scores only the
rows the environment did not: those cut off (by `rollout.max_new_tokens` or
`environment.max_turns`) before it decided. `reward.verifier=environment` gives them 0 and
reads no field of the sample, so rows without an `answer` (a game's seeds) need none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def environment_reward(completion: str, sample: Mapping[str, Any]) -> float:
    """0.0: a row the environment did not score earns nothing."""
    return 0.0
