"""Resolve `reward.verifier` to a function (completion, sample) -> float.

Built-in names map to functions in this package; 'module:function' imports a module and
'path/to/file.py:function' loads a file, so users plug in their own verifiers without a registry.
"""

from __future__ import annotations

from rlvr.errors import ConfigError
from rlvr.plugins import load_attribute
from rlvr.rewards.base import Verifier


def _builtin() -> dict[str, Verifier]:
    from rlvr.rewards.code import code_reward
    from rlvr.rewards.countdown import countdown_reward
    from rlvr.rewards.exact import exact_answer_reward
    from rlvr.rewards.format import format_reward
    from rlvr.rewards.gym import gym_reward  # reasoning-gym itself loads on first use
    from rlvr.rewards.json_schema import json_schema_reward  # jsonschema: in its worker
    from rlvr.rewards.language import language_reward
    from rlvr.rewards.math import math_lenient_reward, math_reward
    from rlvr.rewards.regex_match import regex_reward

    return {
        "code": code_reward,
        "countdown": countdown_reward,
        "exact_answer": exact_answer_reward,
        "format": format_reward,
        "gym": gym_reward,
        "json_schema": json_schema_reward,
        "language": language_reward,
        "math": math_reward,
        "math_lenient": math_lenient_reward,
        "regex": regex_reward,
    }


def get_verifier(spec: str) -> Verifier:
    builtin = _builtin()
    if spec in builtin:
        return builtin[spec]
    if ":" not in spec:
        raise ConfigError(
            f"reward.verifier: unknown verifier {spec!r}; expected one of "
            f"{', '.join(sorted(builtin))}, 'module:function' or 'file.py:function'"
        )
    return load_attribute(spec, "reward.verifier", "function")
