"""Clip-Cov and KL-Cov: restrain the few tokens whose covariance drives entropy collapse.

Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(arXiv:2505.22617), §3-4. Under policy gradient the change of the policy's entropy is about
−Cov(log π(y), A(y)) over the sampled tokens: confident tokens (high log π) with a positive
advantage, and unlikely ones with a negative advantage, make the policy sharper. A small fraction
of tokens carries most of that covariance; both methods act only on those.

Both compute the covariance over the completion tokens of the batch they are given: a trainer
that splits a mini-batch into micro-batches gets it per micro-batch (as the authors' code does),
so the result depends on the split, and rows with zero advantage still change it
(`names.POLICY_LOSS_SPECS[...].couples_rows`).

Shapes as in policy_loss.py: logprobs, old_logprobs, mask [B, T]; advantages [B] or [B, T].
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.algorithms.policy_loss import policy_loss
from rlvr.algorithms.utils import check_loss_inputs, masked_mean, ratio_stats, token_advantages

_SEED_MODULUS = 2**31 - 1


def token_covariance(logprobs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """Each completion token's term of Cov(log π, A) (Cui et al. 2025, eq. 11), [B, T], no gradient.

        Cov_t = (log π_θ(y_t) − mean_j log π_θ(y_j)) · (A_i − mean_j A_j)

    t a token of row i; both means over the N completion tokens j of the batch (so A_j is a row's
    advantage counted once per token). 0 at padding positions.
    """
    on = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    lp = torch.where(on, logprobs.detach(), zero)
    adv = token_advantages(advantages, lp).expand_as(lp)
    cov = (lp - masked_mean(lp, on)) * (adv - masked_mean(adv, on))
    return torch.where(on, cov, zero)


def _selection_count(fraction: float, num_tokens: int) -> int:
    """max(1, ⌊fraction · N⌋), and 0 without tokens: the authors' code never selects none, so a
    small batch (N < 1/fraction) still has one token acted on."""
    return max(1, math.floor(fraction * num_tokens)) if num_tokens else 0


def _seed(logprobs: Tensor, on: Tensor) -> int:
    """Σ_j ((b_j mod M) · (j + 1) mod M), M = 2^31 − 1, b_j the float64 bit pattern of the j-th
    completion token's log-prob (row-major): exact integer arithmetic (no overflow below 2^32
    tokens), so the same inputs give the same seed on every device, different batches different
    ones."""
    bits = logprobs.detach()[on].to(torch.float64).view(torch.int64).remainder(_SEED_MODULUS)
    position = torch.arange(1, bits.numel() + 1, device=bits.device)
    return int((bits * position).remainder(_SEED_MODULUS).sum().item())


def clip_cov_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token Clip-Cov loss, to be minimised (Cui et al. 2025, §4.2, eq. 12-13).

        ℓ_t     = −min(r_t A, clip(r_t, 1 − ε_low, 1 + ε_high) A)      (`policy_loss`, token level)
        I_clip  = ⌊r·N⌋ tokens drawn uniformly without replacement from those with
                  ω_low ≤ Cov_t ≤ ω_high that the clip above leaves unclipped
        loss_t  = 0 for t ∈ I_clip, ℓ_t otherwise

    so the drawn tokens get no gradient. r = clip_cov_ratio, ω_low = clip_cov_lb, ω_high =
    clip_cov_ub, Cov_t from `token_covariance`, N the number of completion tokens; the number
    drawn is at least 1 (see `_selection_count`). As in the authors' code the PPO clip stays in
    place and tokens it already clips are not drawn. Paper defaults: r = 2e-4, ω = [1, 5].

    The draw is deterministic: a CPU torch.Generator seeded from the current log-probs (`_seed`)
    permutes the candidates, so the same inputs drop the same tokens, and the global RNG is left
    untouched.

    Returns (loss [B, T], stats): `policy_loss`'s clip_fraction_low/high, clip_fraction and
    ratio_mean/min/max, plus cov_clip_fraction (fraction of completion tokens in I_clip).
    """
    check_loss_inputs(logprobs, old_logprobs, advantages, mask)
    if not 0.0 < clip_cov_ratio <= 1.0:
        raise ValueError(f"clip_cov_ratio must be in (0, 1], got {clip_cov_ratio}")
    if clip_cov_lb > clip_cov_ub:
        raise ValueError(f"clip_cov_lb ({clip_cov_lb}) must be <= clip_cov_ub ({clip_cov_ub})")
    loss, stats = policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
    )
    del stats["dual_clip_fraction"]
    on = mask != 0
    with torch.no_grad():
        cov = token_covariance(logprobs, advantages, mask)
        adv = token_advantages(advantages, logprobs)
        ratio = torch.exp(torch.where(on, logprobs - old_logprobs, torch.zeros_like(cov)))
        clipped = ((adv < 0) & (ratio < 1.0 - clip_ratio_low)) | (
            (adv > 0) & (ratio > 1.0 + clip_ratio_high)
        )
        candidates = (on & ~clipped & (cov >= clip_cov_lb) & (cov <= clip_cov_ub)).flatten()
        index = candidates.nonzero().squeeze(1)
        count = min(_selection_count(clip_cov_ratio, int(on.sum())), index.numel())
        generator = torch.Generator().manual_seed(_seed(logprobs, on))
        drawn = index[torch.randperm(index.numel(), generator=generator)[:count].to(index.device)]
        dropped = torch.zeros_like(candidates)
        dropped[drawn] = True
        dropped = dropped.view_as(on)
        stats["cov_clip_fraction"] = masked_mean(dropped.to(cov.dtype), on)
    loss = torch.where(dropped, torch.zeros((), dtype=loss.dtype, device=loss.device), loss)
    return loss, stats


def kl_cov_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    kl_cov_ratio: float = 2e-3,
    kl_cov_coef: float = 1.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token KL-Cov loss, to be minimised (Cui et al. 2025, §4.2, eq. 14-15).

        r_t     = exp(δ_t),  δ_t = log π_θ(y_t) − log π_old(y_t)
        I_KL    = the ⌊k·N⌋ completion tokens with the largest Cov_t
        loss_t  = −r_t · A + β · |δ_t|    for t ∈ I_KL
        loss_t  = −r_t · A                otherwise

    k = kl_cov_ratio, β = kl_cov_coef, Cov_t from `token_covariance`, N the number of completion
    tokens; at least 1 token is selected (`_selection_count`), ties go to the earlier position.
    The paper writes the penalty as β·KL(π_old ‖ π_θ) at the token; the authors' code estimates it
    with |δ_t| (its gradient is β·sign(δ_t), 0 on-policy where δ = 0), which is what is
    implemented. There is no ratio clip, as in the authors' code: the penalty on the tokens that
    drive entropy down is the only restraint. Paper defaults: β = 1, k = 2e-3 (Qwen2.5-7B) and
    2e-4 (Qwen2.5-32B).

    Returns (loss [B, T], stats), detached scalars over completion tokens:
        kl_cov_fraction      fraction of tokens in I_KL
        abs_log_ratio_mean   mean |δ_t| over all completion tokens
        ratio_mean, ratio_min, ratio_max   of r_t; 1.0 when there are no tokens
    """
    check_loss_inputs(logprobs, old_logprobs, advantages, mask)
    if not 0.0 < kl_cov_ratio <= 1.0:
        raise ValueError(f"kl_cov_ratio must be in (0, 1], got {kl_cov_ratio}")
    if kl_cov_coef < 0.0:
        raise ValueError(f"kl_cov_coef must be >= 0, got {kl_cov_coef}")
    on = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    adv = token_advantages(advantages, logprobs)  # [B, 1] or [B, T]
    log_ratio = torch.where(on, logprobs - old_logprobs.detach(), zero)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        cov = torch.where(on, token_covariance(logprobs, advantages, mask), -math.inf).flatten()
        count = _selection_count(kl_cov_ratio, int(on.sum()))
        top = torch.sort(cov, descending=True, stable=True).indices[:count]
        selected = torch.zeros_like(cov, dtype=torch.bool)
        selected[top] = True
        selected = selected.view_as(on)
    penalty = torch.where(selected, kl_cov_coef * log_ratio.abs(), zero)
    loss = torch.where(on, -adv * ratio + penalty, zero)

    with torch.no_grad():
        stats = {
            "kl_cov_fraction": masked_mean(selected.to(logprobs.dtype), on),
            "abs_log_ratio_mean": masked_mean(log_ratio.detach().abs(), on),
            **ratio_stats(ratio.detach(), on),
        }
    return loss, stats
