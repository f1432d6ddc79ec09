"""Truncated importance sampling: correct for rollouts sampled by a policy other than π_old.

Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(fengyao.notion.site/off-policy-rl). When the sampler differs from the learner (a stale copy one
step behind, another inference engine, lower precision), the policy gradient of a token sampled
from π_sampler needs the weight π_old / π_sampler; truncating it at C bounds its variance.
A sequence whose whole ratio is far outside [1/C, C] can instead be dropped (masked importance
sampling), a token whose ratio leaves the band can be masked instead of truncated (IcePop), and
the drift between the two policies' log-probs is the health check of it all.

With π_old the learner's weights at the start of the update (the *proximal* policy) and the
sampler the *behaviour* policy, the clipped loss against π_old times one of these weights is the
decoupled PPO objective (Hilton et al. 2021, *Batch size-invariance for policy optimization*;
AReaL, Fu et al. 2025): the trust region is kept around the proximal policy, however stale the
behaviour policy was.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rlvr.algorithms.utils import masked_mean

WeightAndStats = tuple[Tensor, dict[str, Tensor]]


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


def masked_token_importance(
    old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """IcePop's per-token weight: the importance ratio inside [1/C, C], zero outside, [B, T]
    like the inputs, no gradient.

        k_t = π_old(y_t) / π_sampler(y_t)
        w_t = k_t  if 1/C ≤ k_t ≤ C,  else 0

    C = cap (`algorithm.token_mask_cap` > 1). Where truncation (`truncated_importance_weight`)
    keeps a far-off token's gradient at weight C, this drops it: a token the sampler and the
    learner disagree on that much carries noise, not signal (Ling Team 2025, *Small Leak Can
    Sink a Great Ship: Boost RL Training on MoE with IcePop*, which uses the band [0.5, 5]). The
    masked tokens still count in the loss normalisers, as in IcePop's objective.

    Returns (w, stats): icepop_masked_fraction (the share of tokens outside the band) and
    icepop_weight_mean (mean of w), over the tokens where `mask` is nonzero.
    """
    if cap <= 1.0:
        raise ValueError(f"masked token importance sampling needs cap > 1, got {cap}")
    log_ratio = old_logprobs.detach() - sampler_logprobs.detach()
    inside = log_ratio.abs() <= math.log(cap)
    weight = torch.where(inside, torch.exp(log_ratio), torch.zeros_like(log_ratio))
    stats = {
        "icepop_masked_fraction": masked_mean((~inside).float(), mask),
        "icepop_weight_mean": masked_mean(weight, mask),
    }
    return weight, stats


# algorithm.token_correction -> the per-token weight of a batch another policy sampled:
# (π_old log-probs, π_sampler log-probs, mask, cap) -> (weight [B, T], stats)
TOKEN_CORRECTIONS: dict[str, Callable[[Tensor, Tensor, Tensor, float], WeightAndStats]] = {
    "tis": truncated_importance_weight,
    "icepop": masked_token_importance,
}


def masked_sequence_importance(
    old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sequence-level masked importance sampling: which sequences to keep, [B] bool.

        ρ_i = Π_t π_old(y_t) / π_sampler(y_t) = exp(Σ_t m_it (log π_old − log π_sampler))
        keep_i = 1/C ≤ ρ_i ≤ C

    C = cap (`algorithm.mis_cap` > 1). A sequence whose whole-sequence ratio leaves the band was
    sampled by a policy too far from the learner's to be corrected token by token; the trainer
    masks it out of the loss (as the "masked importance sampling" mode of verl's rollout
    correction and Yao et al. 2025's follow-up analysis describe). The product is evaluated in
    log space (Σ log-ratio vs ±log C), so long sequences do not overflow.

    Returns (keep, stats): mis_masked_fraction, the share of sequences dropped (of those with at
    least one completion token), and mis_log_ratio_mean, the mean |Σ_t log-ratio| per sequence.
    """
    if cap <= 1.0:
        raise ValueError(f"masked importance sampling needs cap > 1, got {cap}")
    on = mask != 0
    zero = torch.zeros((), dtype=old_logprobs.dtype, device=old_logprobs.device)
    log_ratio = torch.where(on, old_logprobs.detach() - sampler_logprobs.detach(), zero).sum(-1)
    bound = math.log(cap)
    keep = log_ratio.abs() <= bound
    has_tokens = on.any(-1)
    counted = has_tokens.sum().clamp(min=1)
    stats = {
        "mis_masked_fraction": ((~keep) & has_tokens).sum() / counted,
        "mis_log_ratio_mean": (log_ratio.abs() * has_tokens).sum() / counted,
    }
    return keep | ~has_tokens, stats


def sampler_drift(
    learner_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor
) -> dict[str, Tensor]:
    """How far the sampler's log-probs are from the learner's on the sampled tokens:

        rollout_logprob_drift_mean = mean_t |log π_learner(y_t) − log π_sampler(y_t)|
        rollout_logprob_drift_max  = max_t  |log π_learner(y_t) − log π_sampler(y_t)|
        rollout_mismatch_kl        = mean_t (k_t − 1 − log k_t),  k_t = π_learner / π_sampler

    over completion tokens (nats). The last is the k3 estimate (Schulman 2020) of
    KL(π_sampler ‖ π_learner) from the sampler's own tokens: unbiased, never negative. Same
    weights and kernels give ~1e-6 drift (fp32); a bf16 sampler ~0.03 mean; a sampler whose
    weights were never synced, far more."""
    on = mask != 0
    log_ratio = learner_logprobs.detach() - sampler_logprobs.detach()
    gap = log_ratio.abs()
    zero = torch.zeros((), dtype=gap.dtype, device=gap.device)
    return {
        "rollout_logprob_drift_mean": masked_mean(gap, on),
        "rollout_logprob_drift_max": torch.where(on, gap, zero).max() if on.any() else zero,
        "rollout_mismatch_kl": masked_mean(torch.expm1(log_ratio) - log_ratio, on),
    }
