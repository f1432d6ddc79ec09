"""Resolve `reward.verifier` to a function (completion, sample) -> float.

Built-in names map to functions in this package; 'module:function' imports a module and
'path/to/file.py:function' loads a file (its directory on the import path while it loads, so it
may import a module beside it; rlvr.plugins), so users plug in their own verifiers without a
registry. A user function may be TRL-shaped (rlvr.rewards.batched); `build_verifier`
(rlvr.rewards.compose) wraps it. 'rm:PATH' (a learned reward model) is not resolved here: a
caller that loads models passes `build_verifier` a resolver for it, and without one it is a
ConfigError. `builtin_needs`: the sample keys a built-in cannot score
without, which a dataset's rows are checked for before training starts.
"""

from __future__ import annotations

from rlvr.errors import ConfigError
from rlvr.plugins import load_attribute
from rlvr.rewards.base import Verifier
from rlvr.rewards.spec import LEARNED_PREFIX


def _builtin() -> dict[str, Verifier]:
    from rlvr.rewards.code import code_reward
    from rlvr.rewards.countdown import countdown_reward
    from rlvr.rewards.environment import environment_reward
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
        "environment": environment_reward,
        "exact_answer": exact_answer_reward,
        "format": format_reward,
        "gym": gym_reward,
        "json_schema": json_schema_reward,
        "language": language_reward,
        "math": math_reward,
        "math_lenient": math_lenient_reward,
        "regex": regex_reward,
    }


# The sample keys a built-in verifier cannot score without (a row lacking one is a DataError at
# start); the others read optional keys or several alternatives (code: tests or HumanEval's).
_NEEDS = {
    "exact_answer": ("answer",),
    "math": ("answer",),
    "math_lenient": ("answer",),
    "countdown": ("numbers", "target"),
}


def builtin_needs(verifier: object) -> dict[str, str]:
    """{sample key: built-in name} for a built-in verifier object, {} for any other."""
    for name, v in _builtin().items():
        if v is verifier:
            return dict.fromkeys(_NEEDS.get(name, ()), name)
    return {}


def get_verifier(spec: str) -> Verifier:
    if spec.startswith("judge:"):  # an LLM judge: judge:URL[#settings] (rlvr.rewards.judge)
        from rlvr.rewards.judge import judge_from_spec

        return judge_from_spec(spec)
    builtin = _builtin()
    if spec in builtin:
        return builtin[spec]
    if spec.startswith(LEARNED_PREFIX):
        raise ConfigError(
            f"reward.verifier: {spec!r} is a learned reward model, which only rlvr train (and "
            "rlvr.train) loads and scores; here use a rule verifier (docs/guides/reward-models.md)"
        )
    if ":" not in spec:
        raise ConfigError(
            f"reward.verifier: unknown verifier {spec!r}; expected one of "
            f"{', '.join(sorted(builtin))}, 'module:function' or 'file.py:function'"
        )
    return load_attribute(spec, "reward.verifier", "function")
