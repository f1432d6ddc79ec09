"""CISPO: clip the importance-sampling weight, not the token's update (MiniMax-M1, 2025).

Shapes as in policy_loss.py: logprobs, old_logprobs, mask [B, T]; advantages [B] or [B, T].
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.algorithms.utils import check_loss_inputs, masked_mean, ratio_stats, token_advantages


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    cispo_clip_low: float = 1.0,
    cispo_clip_high: float = 4.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token CISPO loss, to be minimised (MiniMax 2025, "MiniMax-M1", arXiv:2506.13585,
    eq. 4-5).

        r_t    = exp(log π_θ(y_t) − log π_old(y_t))
        r̂_t    = clip(r_t, 1 − ε_low^IS, 1 + ε_high^IS)
        loss_t = −sg[r̂_t] · A · log π_θ(y_t)                       (sg = stop-gradient)

    so ∂loss_t/∂log π_θ(y_t) = −r̂_t · A: every token keeps a gradient, scaled by its clipped
    importance weight. The PPO clip instead gives a token whose ratio left the clip range (in the
    direction its advantage pushes) a zero gradient, and those are often the rare "reflective"
    tokens that matter (MiniMax-M1 §3.1). The paper normalises by the batch's token count,
    (1/Σ_i |y_i|) Σ_i Σ_t: `aggregate_loss(mode="token_mean")` reproduces it.

    ε_low^IS = cispo_clip_low, ε_high^IS = cispo_clip_high. The paper sets no lower bound
    (ε_low^IS large; with 1.0 the bound is 0, which a ratio never goes below) and tunes only
    ε_high^IS, whose value it does not publish; 4.0 (weights capped at 5) is the default here.

    The loss *value* is −r̂·A·log π, which depends on the size of log π and is not comparable with
    the clipped surrogate's; only its gradient is meaningful. Padding positions may hold any
    value; the loss is exactly 0 there.

    Returns (loss [B, T], stats). Stats are detached scalars over completion tokens:
        clip_fraction_low   fraction of tokens with r < 1 − ε_low^IS (weight raised to the bound)
        clip_fraction_high  fraction of tokens with r > 1 + ε_high^IS (weight capped)
        clip_fraction       their sum
        is_weight_mean      mean of r̂
        ratio_mean, ratio_min, ratio_max   of r; 1.0 when there are no tokens
    """
    check_loss_inputs(logprobs, old_logprobs, advantages, mask)
    if cispo_clip_low < 0.0:
        raise ValueError(f"cispo_clip_low must be >= 0, got {cispo_clip_low}")
    if cispo_clip_high < 0.0:
        raise ValueError(f"cispo_clip_high must be >= 0, got {cispo_clip_high}")

    on = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    advantages = token_advantages(advantages, logprobs)  # [B, 1] or [B, T]
    with torch.no_grad():
        ratio = torch.exp(torch.where(on, logprobs - old_logprobs, zero))
        low, high = 1.0 - cispo_clip_low, 1.0 + cispo_clip_high
        weight = torch.clamp(ratio, low, high)
    loss = torch.where(on, -weight * advantages * torch.where(on, logprobs, zero), zero)

    with torch.no_grad():
        frac_low = masked_mean((ratio < low).to(ratio.dtype), on)
        frac_high = masked_mean((ratio > high).to(ratio.dtype), on)
        stats = {
            "clip_fraction_low": frac_low,
            "clip_fraction_high": frac_high,
            "clip_fraction": frac_low + frac_high,
            "is_weight_mean": masked_mean(weight, on),
            **ratio_stats(ratio, on),
        }
    return loss, stats
