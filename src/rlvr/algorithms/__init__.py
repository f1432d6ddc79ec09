"""Algorithm core: advantage estimators, policy losses, KL penalties, entropy, importance weights.

Pure functions of torch tensors; the trainer composes them by name (see the registries
ADVANTAGE_ESTIMATORS, POLICY_LOSSES, AGGREGATION_MODES, KL_ESTIMATORS, and `names` for what each
name means and which config options it reads). `gae` holds PPO's critic-side formulas (GAE,
whitening, the value loss; TOKEN_ADVANTAGE_ESTIMATORS), called by rlvr.training.critic.

The torch modules load on first use (`from rlvr.algorithms import policy_loss` works as always),
so `rlvr.algorithms.names`, which `rlvr.config` reads, is importable without torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# exported name -> the submodule that defines it
_EXPORTS = {
    **dict.fromkeys(
        [
            "ADVANTAGE_ESTIMATORS",
            "dr_grpo",
            "get_advantage_estimator",
            "group_stats",
            "grpo",
            "reinforce_pp",
            "reinforce_pp_baseline",
            "rloo",
            "zero_variance_groups",
        ],
        "advantages",
    ),
    "cispo_loss": "cispo",
    **dict.fromkeys(["clip_cov_loss", "kl_cov_loss", "token_covariance"], "covariance"),
    "entropy_from_logits": "entropy",
    **dict.fromkeys(
        [
            "TOKEN_ADVANTAGE_ESTIMATORS",
            "explained_variance",
            "gae",
            "token_level_rewards",
            "value_loss",
            "whiten",
        ],
        "gae",
    ),
    "gmpo_loss": "gmpo",
    **dict.fromkeys(
        [
            "TOKEN_CORRECTIONS",
            "truncated_importance_weight",
            "masked_token_importance",
            "masked_sequence_importance",
            "sampler_drift",
        ],
        "importance",
    ),
    **dict.fromkeys(["KL_ESTIMATORS", "kl_in_reward", "kl_penalty"], "kl"),
    **dict.fromkeys(["ADVANTAGE_ESTIMATOR_SPECS", "POLICY_LOSS_SPECS", "AlgorithmSpec"], "names"),
    **dict.fromkeys(["AGGREGATION_MODES", "aggregate_loss", "policy_loss"], "policy_loss"),
    **dict.fromkeys(["POLICY_LOSSES", "get_policy_loss"], "registry"),
    **dict.fromkeys(["masked_mean", "masked_sum"], "utils"),
}
_SUBMODULES = (
    "advantages",
    "cispo",
    "covariance",
    "entropy",
    "gae",
    "gmpo",
    "importance",
    "kl",
    "names",
    "policy_loss",
    "registry",
    "utils",
)
__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ADVANTAGE_ESTIMATOR_SPECS",
    "AGGREGATION_MODES",
    "AlgorithmSpec",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "POLICY_LOSS_SPECS",
    "TOKEN_ADVANTAGE_ESTIMATORS",
    "TOKEN_CORRECTIONS",
    "aggregate_loss",
    "cispo_loss",
    "clip_cov_loss",
    "dr_grpo",
    "entropy_from_logits",
    "explained_variance",
    "gae",
    "get_advantage_estimator",
    "get_policy_loss",
    "gmpo_loss",
    "group_stats",
    "grpo",
    "kl_cov_loss",
    "kl_in_reward",
    "kl_penalty",
    "masked_mean",
    "masked_sequence_importance",
    "masked_sum",
    "masked_token_importance",
    "policy_loss",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "sampler_drift",
    "token_covariance",
    "token_level_rewards",
    "truncated_importance_weight",
    "value_loss",
    "whiten",
    "zero_variance_groups",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})


class _Package(types.ModuleType):
    """Importing a submodule binds it on its package under its own name; `policy_loss` names both
    a submodule and the function it defines, and on this package it is the function (as it was
    when this package imported everything eagerly), whichever is imported first."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
