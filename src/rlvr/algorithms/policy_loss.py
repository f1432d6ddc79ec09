"""Clipped policy-gradient loss (PPO / GRPO / DAPO / GSPO) and its aggregation over tokens.

Shapes: B sequences (completions) padded to T tokens.
    logprobs      [B, T]  log π_θ(y_t | y_<t), nats, with gradient
    old_logprobs  [B, T]  log π_old(y_t | y_<t) from the policy that sampled (no gradient)
    advantages    [B]     one advantage per sequence (see advantages.py), or [B, T] one per
                          token (GAE, gae.py; token-level ratios only)
    mask          [B, T]  nonzero (1 / True) on completion tokens, 0 on prompt and padding

`policy_loss` returns the per-token loss; `aggregate_loss` reduces it to the scalar to call
`.backward()` on. An entropy bonus is applied by the trainer as
`loss − entropy_coef · masked_mean(entropy_from_logits(logits), mask)`, and a KL loss term as
`loss + β · aggregate_loss(kl_penalty(...), mask, mode)` (see kl.py).

The other policy-loss variants (cispo.py, gmpo.py, covariance.py) return the same per-token loss
and are reduced the same way; registry.py names them all (`algorithm.policy_loss`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rlvr.algorithms.names import AGGREGATION_MODES
from rlvr.algorithms.utils import (
    check_loss_inputs,
    check_sequence_advantages,
    masked_mean,
    masked_sum,
    token_advantages,
)

RatioLevel = Literal["token", "sequence"]
AggregationMode = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    dual_clip_c: float | None = None,
    ratio_level: RatioLevel = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token clipped surrogate loss, to be minimised.

    Token level (PPO, Schulman et al. 2017, eq. 7; GRPO, Shao et al. 2024, eq. 3):
        r_t    = exp(log π_θ(y_t) − log π_old(y_t))
        loss_t = −min(r_t · A, clip(r_t, 1 − ε_low, 1 + ε_high) · A)
    Separate ε_low / ε_high is DAPO's "clip-higher" (Yu et al. 2025, §3.1, ε_high = 0.28):
    a larger upper bound lets low-probability tokens grow, which keeps entropy from collapsing.

    Sequence level (GSPO, Zheng et al. 2025, "Group Sequence Policy Optimization", eq. 7 & 13):
        s_i    = exp((1/|y_i|) Σ_t (log π_θ(y_t) − log π_old(y_t)))   (length-normalised ratio)
        s_i,t  = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]                    (sg = stop-gradient)
    s_i,t equals s_i in value, but ∂s_i,t/∂log π_θ(y_t) = s_i, so the gradient of the token mean
    of the loss is exactly GSPO's sequence-level gradient. The same clip is applied to s_i,t
    (GSPO uses much smaller ε, e.g. 3e-4 / 4e-4, because s_i is a geometric mean).

    Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL", eq. 5):
        for A < 0: loss_t = min(loss_t, −c · A) = min(loss_t, c · |A|),   c > 1
    bounds the loss of a negative-advantage token whose ratio has exploded (an off-policy token
    the old policy found unlikely), so one token cannot dominate the update.

    The old log-probs and advantages are detached here. Padding positions may hold any value
    (even -inf); the ratio is computed as 1 there and the loss is exactly 0 there.

    Returns (loss [B, T], stats). Stats are detached scalars over completion tokens:
        clip_fraction_low   fraction of tokens with A < 0 and r < 1 − ε_low (lower clip binds)
        clip_fraction_high  fraction of tokens with A > 0 and r > 1 + ε_high (upper clip binds)
        clip_fraction       clip_fraction_low + clip_fraction_high
        dual_clip_fraction  fraction of tokens with A < 0 and r > c (0 without dual clip)
        ratio_mean, ratio_min, ratio_max   of r_t (or s_i,t); 1.0 when there are no tokens
    """
    check_loss_inputs(logprobs, old_logprobs, advantages, mask)
    if not 0.0 <= clip_ratio_low < 1.0:
        raise ValueError(f"clip_ratio_low must be in [0, 1), got {clip_ratio_low}")
    if clip_ratio_high < 0.0:
        raise ValueError(f"clip_ratio_high must be >= 0, got {clip_ratio_high}")
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (Ye et al. 2020), got {dual_clip_c}")
    if ratio_level not in ("token", "sequence"):
        raise ValueError(f"ratio_level must be 'token' or 'sequence', got {ratio_level!r}")

    if ratio_level == "sequence":
        check_sequence_advantages(advantages, "ratio_level=sequence (GSPO)")

    on = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    advantages = token_advantages(advantages, logprobs)  # [B, 1], or [B, T] per token
    log_ratio = torch.where(on, logprobs - old_logprobs.detach(), zero)
    if ratio_level == "token":
        ratio = torch.exp(log_ratio)
    else:
        seq_log_ratio = masked_mean(log_ratio, on, dim=-1).detach().unsqueeze(-1)  # [B, 1]
        ratio = torch.exp(seq_log_ratio + torch.where(on, logprobs - logprobs.detach(), zero))

    low, high = 1.0 - clip_ratio_low, 1.0 + clip_ratio_high
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, low, high)
    loss = torch.maximum(unclipped, clipped)  # −min(r·A, clip(r)·A)
    if dual_clip_c is not None:
        dual_bound = -advantages * dual_clip_c  # c·|A| where A < 0
        loss = torch.where(advantages < 0, torch.minimum(loss, dual_bound), loss)
    loss = torch.where(on, loss, zero)

    with torch.no_grad():
        r = ratio.detach()
        is_low = (advantages < 0) & (r < low)
        is_high = (advantages > 0) & (r > high)
        if dual_clip_c is None:
            is_dual = torch.zeros_like(r, dtype=torch.bool)
        else:
            is_dual = (advantages < 0) & (r > dual_clip_c)
        frac_low = masked_mean(is_low.to(r.dtype), on)
        frac_high = masked_mean(is_high.to(r.dtype), on)
        has_tokens = on.any()
        one = torch.ones((), dtype=r.dtype, device=r.device)
        inf = torch.full((), float("inf"), dtype=r.dtype, device=r.device)
        stats = {
            "clip_fraction_low": frac_low,
            "clip_fraction_high": frac_high,
            "clip_fraction": frac_low + frac_high,
            "dual_clip_fraction": masked_mean(is_dual.to(r.dtype), on),
            "ratio_mean": torch.where(has_tokens, masked_mean(r, on), one),
            "ratio_min": torch.where(has_tokens, torch.where(on, r, inf).min(), one),
            "ratio_max": torch.where(has_tokens, torch.where(on, r, -inf).max(), one),
        }
    return loss, stats


def aggregate_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    mode: AggregationMode,
    *,
    max_tokens: int | None = None,
    num_sequences: float | None = None,
    num_tokens: float | None = None,
) -> Tensor:
    """Reduce a [B, T] per-token loss to the scalar to differentiate.

    With m_it the mask, n_i = Σ_t m_it the completion length, B the number of sequences (rows):

    "seq_mean_token_mean" (original GRPO, Shao et al. 2024, eq. 3):
        L = (1/B) Σ_i (1/n_i) Σ_t m_it ℓ_it
        Every sequence weighs the same, so each token of a long completion weighs less.
    "token_mean" (DAPO, Yu et al. 2025, §3.3 "token-level policy gradient loss"):
        L = Σ_i Σ_t m_it ℓ_it / Σ_i n_i
        Every token weighs the same.
    "seq_mean_token_sum_norm" (Dr. GRPO, Liu et al. 2025, §3.1):
        L = Σ_i Σ_t m_it ℓ_it / (B · max_tokens)
        max_tokens is a constant (the generation budget, e.g. max_new_tokens) and is required;
        no length-dependent weight, so long wrong answers are not penalised less per token.

    A sequence with n_i = 0 contributes 0 (never NaN) and still counts in B; a batch with no
    completion tokens at all gives 0 (every denominator is at least 1).

    Gradient accumulation: when a mini-batch is split into micro-batches and each micro-batch's
    loss is backpropagated separately, pass the mini-batch's global counts to every micro-batch
        num_sequences = B of the whole mini-batch
        num_tokens    = Σ_i n_i over the whole mini-batch
    and do NOT divide by the number of micro-batches; the summed gradients then equal the
    gradient of one pass over the whole mini-batch. "seq_mean_token_mean" reads only
    num_sequences (each 1/n_i is local to a sequence); "token_mean" reads only num_tokens;
    "seq_mean_token_sum_norm" reads only num_sequences. An override a mode does not read is
    ignored, so a trainer may always pass both.
    """
    if mode not in AGGREGATION_MODES:
        valid = ", ".join(AGGREGATION_MODES)
        raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of: {valid}")
    if per_token_loss.shape != mask.shape or per_token_loss.dim() != 2:
        raise ValueError(
            f"per_token_loss {tuple(per_token_loss.shape)} and mask {tuple(mask.shape)} "
            "must both be [B, T]"
        )
    for name, value in (("num_sequences", num_sequences), ("num_tokens", num_tokens)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")

    batch_sequences = num_sequences if num_sequences is not None else per_token_loss.shape[0]
    if mode == "seq_mean_token_mean":
        per_sequence = masked_mean(per_token_loss, mask, dim=-1)
        return per_sequence.sum() / max(batch_sequences, 1)
    if mode == "token_mean":
        if num_tokens is None:
            return masked_mean(per_token_loss, mask)
        return masked_sum(per_token_loss, mask) / max(num_tokens, 1)
    if max_tokens is None or max_tokens <= 0:
        raise ValueError(
            f"mode 'seq_mean_token_sum_norm' needs max_tokens > 0 (the generation budget), "
            f"got {max_tokens}"
        )
    return masked_sum(per_token_loss, mask) / (max(batch_sequences, 1) * max_tokens)
