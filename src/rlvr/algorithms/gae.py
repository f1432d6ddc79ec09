"""PPO's critic side for language models: per-token rewards, GAE, whitening, the value loss.

GRPO estimates one advantage per completion from a group of samples; PPO (Schulman et al. 2017)
as used for RLHF (Stiennon et al. 2020, Ouyang et al. 2022) learns a value model V instead and
gives every token its own advantage by Generalized Advantage Estimation (Schulman et al. 2016,
*High-Dimensional Continuous Control Using Generalized Advantage Estimation*,
arXiv:1506.02438). The functions here are the formulas only; the value model and the trainer
that calls them are not part of this module.

Shapes: N completions padded to T tokens.
    rewards       [N]     the verifier's reward of each completion
    mask          [N, T]  nonzero on the tokens the policy sampled; 0 on padding and on tokens an
                          environment inserted (tool output in a multi-turn row, loss mask 0)
    values        [N, T]  V(s_t): the value model's estimate at completion position t, read
                          where the token y_t is about to be chosen
    token_rewards [N, T]  from `token_level_rewards`

The LM conventions (as in verl's `compute_gae_advantage_return` and OpenRLHF's
`get_advantages_and_returns`): one MDP step per sampled token, the state being the prompt and
the tokens so far; the verifier's reward arrives at the last sampled token; the episode ends
there, so the value after the last sampled token is 0 (no bootstrap).

**A masked gap in the middle of a row** (tool output between two sampled turns) is skipped:
the recursion runs over the sampled tokens only, and the next value of the sampled token just
before the gap is the value at the first sampled token after it,

    δ_t = r_t + γ · V_next(t) − V_t,   next(t) = the next position s > t with mask_s ≠ 0

(verl's rule). The inserted tokens are not actions of the policy but part of the environment's
transition from one sampled token to the next, so they take no discount step, get no TD error
and do not bootstrap from a value the critic never learns (its loss is masked there too). The
alternative, OpenRLHF's, zeroes the values and rewards at masked positions and runs the
recursion through them; the token before a gap then bootstraps from V = 0, and a k-token tool
output discounts everything after it by γ^k, so the advantage depends on how long the tool's
output happened to be.

**Registry.** `gae` is registered in `TOKEN_ADVANTAGE_ESTIMATORS`, not in
`ADVANTAGE_ESTIMATORS`: those map (rewards [N], group_ids [N]) to one advantage per sequence,
this maps (token_rewards [N, T], values [N, T], mask [N, T], **opts) to per-token
(advantages, returns), and needs a value model. Like `ADVANTAGE_ESTIMATORS` the dict lives
beside its functions (advantages.py, importance.py's `TOKEN_CORRECTIONS`); its `names.py` spec
says `needs_critic`, and `algorithm.advantage=gae` makes the trainer build the value model
(rlvr.training.critic). Defaults γ = λ = 1, as verl's and Open-Reasoner-Zero's: with the only
reward at the end, A_t = R − V_t, the critic a per-token baseline. The value loss is one
function (its clipping an option), so it has no registry of its own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlvr.algorithms.utils import masked_mean

TokenAdvantageEstimator = Callable[..., tuple[Tensor, Tensor]]


def _check_2d(mask: Tensor, **tensors: Tensor) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be [N, T], got shape {tuple(mask.shape)}")
    for name, x in tensors.items():
        if x.shape != mask.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}, expected {tuple(mask.shape)} like mask"
            )


def _float_dtype(*tensors: Tensor) -> torch.dtype:
    """The promoted dtype of the inputs, at least float32 (a bf16 recursion over thousands of
    tokens would accumulate its rounding)."""
    dtype = torch.float32
    for x in tensors:
        dtype = torch.promote_types(dtype, x.dtype)
    return dtype


def token_level_rewards(
    rewards: Tensor, mask: Tensor, kl: Tensor | None = None, kl_coef: float = 0.0
) -> Tensor:
    """The per-token reward of PPO-RLHF: the sequence reward at the last sampled token, minus a
    per-token KL penalty at every sampled token.

        r_t = R · [t = last sampled token] − β · sg[kl_t]   where mask_t ≠ 0,   0 elsewhere

    R = rewards [N], β = kl_coef, kl [N, T] a per-token estimate of KL(π_θ ‖ π_ref)
    (`kl_penalty`, usually k1 = log π_θ − log π_ref: Stiennon et al. 2020, *Learning to
    summarize from human feedback*, eq. 1; Ouyang et al. 2022, *Training language models to
    follow instructions with human feedback*, eq. 2, put −β log(π/π_ref) in the reward of
    every token). Unlike `kl_in_reward`, which sums the penalty into the one sequence reward,
    each token here is charged its own KL, so GAE credits the penalty to where it was incurred.

    The last sampled token is the last position with mask ≠ 0 (a row may end with padding or
    with inserted tokens). A row with no sampled token is all 0. Values of kl at masked
    positions are ignored (they may be inf or NaN). Returns [N, T] with no gradient, in the
    promoted dtype of rewards and kl.
    """
    if rewards.dim() != 1 or mask.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and mask {tuple(mask.shape)} must be [N] and [N, T]"
        )
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl is None and kl_coef > 0:
        raise ValueError("kl_coef > 0 needs the per-token kl")
    on = mask != 0
    dtype = rewards.dtype if kl is None else torch.promote_types(rewards.dtype, kl.dtype)
    zero = torch.zeros((), dtype=dtype, device=rewards.device)
    n, t = mask.shape
    # positions numbered 1..T where sampled, 0 elsewhere: the argmax is the last sampled token
    numbered = torch.where(on, torch.arange(1, t + 1, device=mask.device), 0)
    last = numbered.argmax(dim=1)
    has_tokens = on.any(dim=1)
    out = torch.zeros((n, t), dtype=dtype, device=rewards.device)
    out[torch.arange(n, device=mask.device), last] = torch.where(
        has_tokens, rewards.detach().to(dtype), zero
    )
    if kl is not None:
        _check_2d(mask, kl=kl)
        if kl_coef > 0:
            out = out - kl_coef * torch.where(on, kl.detach().to(dtype), zero)
    return torch.where(on, out, zero)


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation over the sampled tokens of each row (Schulman et al.
    2016, eq. 16), computed backwards:

        δ_t = r_t + γ · V_next(t) − V_t
        A_t = δ_t + γλ · A_next(t)
        G_t = A_t + V_t                      (the value model's regression target, "returns")

    next(t) is the next sampled position of the row (mask ≠ 0), skipping masked gaps (see the
    module docstring); after the row's last sampled token V = 0 and A = 0. Limits:
    λ = 1 gives A_t = Σ_{k≥0} γ^k r_{t+k} − V_t (Monte Carlo; with γ = 1 and only the end
    reward, R − V_t; k counts sampled tokens); λ = 0 gives the one-step TD error A_t = δ_t.

    token_rewards, values, mask: [N, T] (values at masked positions may hold anything, even
    NaN). 0 ≤ gamma ≤ 1, 0 ≤ lam ≤ 1. Returns (advantages, returns), [N, T] each, 0 at masked
    positions, no gradient, in the inputs' promoted dtype and at least float32. Advantages are
    not whitened here (`whiten` does that, as a separate step).

    Vectorised over rows, a loop over T; each step is a few [N]-sized operations.
    """
    _check_2d(mask, token_rewards=token_rewards, values=values)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    dtype = _float_dtype(token_rewards, values)
    with torch.no_grad():
        on = mask != 0
        zero = torch.zeros((), dtype=dtype, device=values.device)
        rewards = torch.where(on, token_rewards.detach().to(dtype), zero)
        values = torch.where(on, values.detach().to(dtype), zero)
        n, t_len = mask.shape
        next_value = torch.zeros(n, dtype=dtype, device=values.device)
        next_advantage = torch.zeros(n, dtype=dtype, device=values.device)
        advantages = torch.zeros((n, t_len), dtype=dtype, device=values.device)
        for t in reversed(range(t_len)):
            sampled = on[:, t]
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            advantage = delta + gamma * lam * next_advantage
            # a masked position leaves the carried value and advantage as they were
            next_value = torch.where(sampled, values[:, t], next_value)
            next_advantage = torch.where(sampled, advantage, next_advantage)
            advantages[:, t] = torch.where(sampled, advantage, zero)
        returns = torch.where(on, advantages + values, zero)
    return advantages, returns


def whiten(values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Masked whitening over all sampled tokens of the batch (PPO's advantage normalisation):

        μ = mean_{mask≠0}(x),   σ² = mean_{mask≠0}((x − μ)²)        (population variance)
        y = (x − μ) / sqrt(σ² + eps)              shift_mean=True  (mean 0, std 1)
        y = (x − μ) / sqrt(σ² + eps) + μ          shift_mean=False (std 1, mean kept)

    OpenAI baselines' ppo2 divides by std + 1e-8 over the batch; verl's and TRL's
    `masked_whiten` take sqrt(σ² + 1e-8) as here, with σ² Bessel-corrected (÷(n − 1)). Over a
    batch's thousands of tokens the two differ by a factor n/(n − 1); the population variance
    is also defined for a single token.

    0 at masked positions (which may hold anything, even NaN), no gradient. When every sampled
    value is exactly equal (a single token, or a constant batch; decided by max == min, not by
    a small σ, so mean rounding cannot become eps-divided noise) the result is exactly 0, or
    the values unchanged with shift_mean=False. No sampled token: all 0. The statistics are
    those of the tensor given: under data parallelism, of one rank's share.
    """
    _check_2d(mask, values=values)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    with torch.no_grad():
        on = mask != 0
        x = values.detach()
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        if not bool(on.any()):
            return torch.zeros_like(x)
        selected = x[on]
        if bool(selected.max() == selected.min()):
            return torch.zeros_like(x) if shift_mean else torch.where(on, x, zero)
        mean = masked_mean(x, on)
        var = masked_mean((x - mean).square(), on)
        y = (x - mean) * torch.rsqrt(var + eps)
        if not shift_mean:
            y = y + mean
        return torch.where(on, y, zero)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token value loss of PPO's critic, to be minimised.

    Without clipping:  ℓ_t = ½ (V_t − G_t)²
    With clip = ε:     ℓ_t = ½ max((V_t − G_t)², (clip(V_t, V_old,t − ε, V_old,t + ε) − G_t)²)

    V = values (the value model's output, with gradient), V_old = old_values (its output when
    the batch was scored, detached), G = returns (from `gae`, detached). The clipped form is
    OpenAI baselines' ppo2 value clipping, the critic's analogue of the ratio clip: the
    pessimistic max stops rewarding a move of V more than ε away from V_old, so a token's
    gradient is 0 once V has left [V_old − ε, V_old + ε] on the side that lowers the loss.
    Engstrom et al. 2020 (*Implementation Matters in Deep Policy Gradients*, arXiv:2005.12729)
    found it does not help and can hurt in MuJoCo; it is kept as an option because RLHF
    implementations (OpenRLHF's `value_clip`, verl's `cliprange_value`) use it. ε is in the
    units of the reward, not a ratio.

    Returns (loss [N, T], stats); 0 at masked positions (which may hold anything). The loss is
    per token: reduce it with `aggregate_loss`, as the policy losses are. Stats are detached
    scalars over the tokens where mask ≠ 0:
        value_clip_fraction  share of tokens whose clipped term is strictly the larger (0
                             without clipping)
        value_mean           mean of V
        value_error          mean |V − G|
        explained_variance   `explained_variance(V, G)`: 1 for a perfect critic, 0 for one that
                             predicts the mean or when the returns are equal. Not a token mean:
                             over micro-batches a token-weighted average of it is an
                             approximation (the trainer logs the whole batch's instead).
    """
    _check_2d(mask, values=values, old_values=old_values, returns=returns)
    if clip is not None and clip < 0:
        raise ValueError(f"clip must be >= 0 or None, got {clip}")
    on = mask != 0
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    # masked positions are made finite before any arithmetic, so NaN padding cannot reach a
    # gradient through torch.maximum's backward
    v = torch.where(on, values, zero)
    target = torch.where(on, returns.detach().to(values.dtype), zero)
    unclipped = (v - target).square()
    if clip is None:
        loss = 0.5 * unclipped
        clipped_larger = torch.zeros_like(on)
    else:
        old = torch.where(on, old_values.detach().to(values.dtype), zero)
        v_clipped = old + (v - old).clamp(-clip, clip)
        clipped = (v_clipped - target).square()
        loss = 0.5 * torch.maximum(unclipped, clipped)
        clipped_larger = clipped.detach() > unclipped.detach()
    loss = torch.where(on, loss, zero)

    with torch.no_grad():
        vd = v.detach()
        stats = {
            "value_clip_fraction": masked_mean(clipped_larger.to(vd.dtype), on),
            "value_mean": masked_mean(vd, on),
            "value_error": masked_mean((vd - target).abs(), on),
            "explained_variance": explained_variance(vd, target, on),
        }
    return loss, stats


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """1 − Var(G − V) / Var(G) over the tokens where mask ≠ 0 (population variances), no
    gradient: 1 for a perfect critic, 0 for one that predicts the mean, < 0 for a worse one.

    0 when the returns are equal to within rounding, so Var(G) measures float error and not
    returns: Var(G) ≤ (64 · ε · max|G|)² with ε the dtype's machine epsilon (γ = λ = 1 with one
    reward at the end gives G_t = (R − V_t) + V_t, equal to R only to the last bits; dividing
    by such a variance made ~1e13 of nothing). Also 0 for fewer than two tokens.
    """
    _check_2d(mask, values=values, returns=returns)
    on = mask != 0
    with torch.no_grad():
        v, g = values.detach(), returns.detach().to(values.dtype)
        zero = torch.zeros((), dtype=v.dtype, device=v.device)
        if int(on.sum()) < 2:
            return zero
        var_returns = masked_mean((g - masked_mean(g, on)).square(), on)
        floor = (64 * torch.finfo(v.dtype).eps * g[on].abs().max()).square()
        if not bool(var_returns > floor):
            return zero
        error = g - v
        var_error = masked_mean((error - masked_mean(error, on)).square(), on)
        return 1.0 - var_error / var_returns


# algorithm.advantage names that need a value model -> (token_rewards [N, T], values [N, T],
# mask [N, T], **opts) -> (advantages [N, T], returns [N, T])
TOKEN_ADVANTAGE_ESTIMATORS: dict[str, TokenAdvantageEstimator] = {"gae": gae}
