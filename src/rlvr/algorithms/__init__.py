"""Algorithm core: advantage estimators, policy losses, KL penalties, entropy.

Pure functions of torch tensors; the trainer composes them by name (see the registries
ADVANTAGE_ESTIMATORS, AGGREGATION_MODES, KL_ESTIMATORS).
"""

from rlvr.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo,
    get_advantage_estimator,
    group_stats,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    zero_variance_groups,
)
from rlvr.algorithms.entropy import entropy_from_logits
from rlvr.algorithms.kl import KL_ESTIMATORS, kl_in_reward, kl_penalty
from rlvr.algorithms.policy_loss import AGGREGATION_MODES, aggregate_loss, policy_loss
from rlvr.algorithms.utils import masked_mean, masked_sum

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "aggregate_loss",
    "dr_grpo",
    "entropy_from_logits",
    "get_advantage_estimator",
    "group_stats",
    "grpo",
    "kl_in_reward",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "policy_loss",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "zero_variance_groups",
]
