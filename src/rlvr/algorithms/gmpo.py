"""GMPO: the geometric mean of token ratios instead of their arithmetic mean (Zhao et al. 2025).

Shapes as in policy_loss.py: logprobs, old_logprobs, mask [B, T]; advantages [B].
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.algorithms.utils import (
    check_loss_inputs,
    check_sequence_advantages,
    masked_mean,
    ratio_stats,
)


def gmpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    gmpo_clip_low: float = 0.4,
    gmpo_clip_high: float = 0.4,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token GMPO loss, to be minimised (Zhao et al. 2025, "Geometric-Mean Policy
    Optimization", arXiv:2507.20673, eq. 4).

    The paper's objective for sequence i with advantage A_i and n_i tokens:
        J_i = sgn(A_i) · ( Π_t | min(r_t A_i, clip(r_t, e^−ε_low, e^ε_high) A_i) | )^(1/n_i)
    With δ_t = log π_θ(y_t) − log π_old(y_t), the clip taken in log space and the pessimistic
    side chosen by the sign of A_i,
        δ̃_t = min(δ_t, clip(δ_t, −ε_low, ε_high))   if A_i >= 0   (only growth is capped)
        δ̃_t = max(δ_t, clip(δ_t, −ε_low, ε_high))   if A_i < 0    (only shrinking is capped)
        s̃_i = exp((1/n_i) Σ_t δ̃_t)                  (geometric mean of the clipped ratios)
    J_i = A_i · s̃_i. Per token, with the stop-gradient trick of GSPO:
        loss_t = −A_i · sg[s̃_i] · exp(δ̃_t − sg[δ̃_t])
    Each loss_t equals −A_i s̃_i in value, and ∂loss_t/∂log π_θ(y_t) = −A_i s̃_i (0 where the clip
    binds). Under `aggregate_loss(mode="seq_mean_token_mean")` (the default aggregation) the
    scalar is −(1/B) Σ_i J_i, the paper's objective negated, in value and in gradient:
    ∂/∂log π_θ(y_t) = −(1/B) · A_i s̃_i / n_i. Another mode reweights sequences (token_mean by
    n_i / mean n), which the paper does not do.

    One extreme token ratio moves a geometric mean much less than an arithmetic one, so GMPO
    keeps updates stable with a wider clip than PPO's: the paper uses (e^−0.4, e^0.4), i.e.
    gmpo_clip_low = gmpo_clip_high = 0.4. Padding positions may hold any value; the loss is
    exactly 0 there.

    Returns (loss [B, T], stats). Stats are detached scalars over completion tokens:
        clip_fraction_low   fraction of tokens with A < 0 and δ < −ε_low (lower clip binds)
        clip_fraction_high  fraction of tokens with A > 0 and δ > ε_high (upper clip binds)
        clip_fraction       their sum
        ratio_mean, ratio_min, ratio_max   of s̃_i over the tokens; 1.0 when there are none
    """
    check_loss_inputs(logprobs, old_logprobs, advantages, mask)
    check_sequence_advantages(advantages, "gmpo")
    if gmpo_clip_low < 0.0:
        raise ValueError(f"gmpo_clip_low must be >= 0, got {gmpo_clip_low}")
    if gmpo_clip_high < 0.0:
        raise ValueError(f"gmpo_clip_high must be >= 0, got {gmpo_clip_high}")

    on = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    advantages = advantages.detach().to(logprobs.dtype).unsqueeze(-1)  # [B, 1]
    log_ratio = torch.where(on, logprobs - old_logprobs.detach(), zero)
    clipped = torch.clamp(log_ratio, -gmpo_clip_low, gmpo_clip_high)
    pessimistic = torch.where(
        advantages < 0, torch.maximum(log_ratio, clipped), torch.minimum(log_ratio, clipped)
    )
    seq_log_ratio = masked_mean(pessimistic, on, dim=-1).detach().unsqueeze(-1)  # [B, 1]
    ratio = torch.exp(seq_log_ratio + (pessimistic - pessimistic.detach()))
    loss = torch.where(on, -advantages * ratio, zero)

    with torch.no_grad():
        r = ratio.detach()
        is_low = (advantages < 0) & (log_ratio < -gmpo_clip_low)
        is_high = (advantages > 0) & (log_ratio > gmpo_clip_high)
        frac_low = masked_mean(is_low.to(r.dtype), on)
        frac_high = masked_mean(is_high.to(r.dtype), on)
        stats = {
            "clip_fraction_low": frac_low,
            "clip_fraction_high": frac_high,
            "clip_fraction": frac_low + frac_high,
            **ratio_stats(r, on),
        }
    return loss, stats
