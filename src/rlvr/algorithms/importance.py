"""Truncated importance sampling: correct for rollouts sampled by a policy other than π_old.

Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(fengyao.notion.site/off-policy-rl). When the sampler differs from the learner (a stale copy one
step behind, another inference engine, lower precision), the policy gradient of a token sampled
from π_sampler needs the weight π_old / π_sampler; truncating it at C bounds its variance.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.algorithms.utils import masked_mean


def truncated_importance_weight(
    old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token weight of the policy loss, [B, T] like the inputs, no gradient.

        w_t = min(π_old(y_t) / π_sampler(y_t), C) = min(exp(log π_old − log π_sampler), C)

    C = cap (`algorithm.tis_cap`). The trainer multiplies the per-token loss by w before
    aggregating. Values at padding positions are meaningless (mask them when reducing, as
    `aggregate_loss` does).

    Returns (w, stats); stats are detached scalars over the tokens where `mask` is nonzero:
        tis_weight_mean     mean of w
        tis_clip_fraction   fraction of tokens whose ratio exceeds C (w truncated)
    """
    ratio = torch.exp(old_logprobs.detach() - sampler_logprobs.detach())
    weight = ratio.clamp(max=cap)
    stats = {
        "tis_weight_mean": masked_mean(weight, mask),
        "tis_clip_fraction": masked_mean((ratio > cap).float(), mask),
    }
    return weight, stats
