"""Per-token estimators of KL(π_θ ‖ π_ref) from tokens sampled from π_θ.

Schulman 2020, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html). With
d_t = log π_ref(y_t) − log π_θ(y_t) (a log-ratio ref/policy at a token sampled from π_θ):

    k1 = −d_t                 = log π_θ − log π_ref       unbiased, high variance, can be < 0
    k2 = ½ d_t²               = ½ (log π_θ − log π_ref)²  biased (low bias near π_ref), >= 0
    k3 = exp(d_t) − d_t − 1                               unbiased, >= 0, low variance

Two ways to use the penalty with weight β:

* As a loss term (GRPO, Shao et al. 2024, eq. 4, uses k3):
      loss = policy_loss + β · aggregate_loss(kl_penalty(logprobs, ref_logprobs, "k3"), mask, mode)
  Here the estimator's *gradient* matters, not its value (Tang & Munos 2025, "On a few pitfalls
  in KL divergence gradient estimation for RL"): on-policy, E[∇k1] = E[∇log π_θ] = 0 (no
  signal); E[∇k2] = ∇KL(π_θ ‖ π_ref) (the intended gradient); E[∇k3] = ∇KL(π_ref ‖ π_θ) (the
  reverse KL's gradient, still pulls toward π_ref).
* Folded into the reward, detached (PPO-RLHF style, Ouyang et al. 2022, eq. 2):
      r̃_i = r_i − β · Σ_t sg[kl_t]          see `kl_in_reward`
  then advantages are computed from r̃. The penalty then acts through the policy gradient, so
  the unbiased k1 is the usual choice.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rlvr.algorithms.names import KL_ESTIMATORS
from rlvr.algorithms.utils import masked_sum

KLEstimator = Literal["k1", "k2", "k3"]


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator) -> Tensor:
    """Per-token KL(π_θ ‖ π_ref) estimate in nats, same shape as the inputs.

    k1 = log π_θ − log π_ref
    k2 = ½ (log π_θ − log π_ref)²
    k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1

    The reference log-probs are detached. Values at padding positions are meaningless; mask
    them when reducing (`aggregate_loss`, `masked_mean`, `kl_in_reward` do).
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"ref_logprobs has shape {tuple(ref_logprobs.shape)}, expected {tuple(logprobs.shape)}"
        )
    log_ratio = logprobs - ref_logprobs.detach()
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        d = -log_ratio
        # expm1(d) − d is exp(d) − 1 − d without cancellation when d is small.
        return torch.expm1(d) - d
    raise ValueError(
        f"unknown KL estimator {estimator!r}; expected one of: {', '.join(KL_ESTIMATORS)}"
    )


def kl_in_reward(rewards: Tensor, kl_per_token: Tensor, mask: Tensor, beta: float) -> Tensor:
    """Sequence rewards shaped by a detached KL penalty.

    r̃_i = r_i − β · Σ_t m_it · sg[kl_it]

    rewards [B], kl_per_token [B, T] (from `kl_penalty`), mask [B, T] nonzero on completion
    tokens. Returns [B] with no gradient.
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if kl_per_token.shape != mask.shape or kl_per_token.dim() != 2:
        raise ValueError(
            f"kl_per_token {tuple(kl_per_token.shape)} and mask {tuple(mask.shape)} must be [B, T]"
        )
    if rewards.shape != kl_per_token.shape[:1]:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)}, expected ({kl_per_token.shape[0]},)"
        )
    kl_sum = masked_sum(kl_per_token.detach().to(rewards.dtype), mask, dim=-1)
    return rewards.detach() - beta * kl_sum
