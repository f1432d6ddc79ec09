"""Per-sequence advantage estimators for outcome rewards (GRPO family).

Every estimator has the signature

    estimator(rewards: Tensor[N] float, group_ids: Tensor[N] long, **opts) -> Tensor[N]

Row i is one sampled completion with scalar reward r_i; rows sharing a group id were sampled
from the same prompt. Group ids are arbitrary integers: they need not be contiguous, sorted, or
of equal size. All group reductions are `index_add`/`scatter_reduce` over `torch.unique`'s
inverse index, so there is no Python loop over rows or groups.

A group whose rewards are all exactly equal carries no learning signal; every group-aware
estimator returns EXACTLY 0.0 for its rows (decided by max == min, not by a small std), so
rounding in the group mean can never turn into eps-divided noise. Advantages carry no gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from rlvr.algorithms.names import STD_KINDS

StdKind = Literal["population", "sample"]
AdvantageEstimator = Callable[..., Tensor]


def _check_inputs(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a float tensor, got {rewards.dtype}")
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_ids has shape {tuple(group_ids.shape)}, expected {tuple(rewards.shape)} "
            "(one group id per reward)"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    bad = torch.isnan(rewards).nonzero()
    if bad.numel() > 0:
        raise ValueError(f"rewards[{bad[0].item()}] is NaN; a verifier must return a number")


def _check_std_kind(std: str) -> None:
    if std not in STD_KINDS:
        raise ValueError(f"std must be 'population' or 'sample', got {std!r}")


def _group_index(group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(unique_ids [G], row -> group position [N], group sizes [G])."""
    unique_ids, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    return unique_ids, inverse, counts


def _group_sum(values: Tensor, inverse: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add(
        0, inverse, values
    )


def _group_is_constant(rewards: Tensor, inverse: Tensor, num_groups: int) -> Tensor:
    """Bool [G]: max_g(r) == min_g(r), i.e. every reward in the group is identical."""
    empty = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    hi = empty.scatter_reduce(0, inverse, rewards, reduce="amax", include_self=False)
    lo = empty.scatter_reduce(0, inverse, rewards, reduce="amin", include_self=False)
    return hi == lo


def _batch_std(centred: Tensor, std: StdKind) -> Tensor:
    """sqrt(Σ c² / N) (population) or sqrt(Σ c² / (N−1)) (sample; N = 1 gives 0)."""
    n = centred.numel()
    denom = n if std == "population" else max(n - 1, 1)
    return (centred.square().sum() / denom).sqrt()


def _centre_by_group(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """r_i − mean_g(r), exactly 0 in constant groups. Also returns inverse, sizes, num_groups."""
    _, inverse, counts = _group_index(group_ids)
    num_groups = counts.numel()
    mean = _group_sum(rewards, inverse, num_groups) / counts.to(rewards.dtype)
    constant_row = _group_is_constant(rewards, inverse, num_groups)[inverse]
    centred = torch.where(constant_row, torch.zeros_like(rewards), rewards - mean[inverse])
    return centred, inverse, counts, num_groups


def grpo(
    rewards: Tensor, group_ids: Tensor, *, std: StdKind = "population", eps: float = 1e-6
) -> Tensor:
    """GRPO group-normalised advantage (Shao et al. 2024, "DeepSeekMath", eq. 3 / §4.1.2).

    A_i = (r_i − mean_g(r)) / (std_g(r) + eps)

    std="population": std_g = sqrt(Σ_{j∈g} (r_j − mean_g)² / n_g)
    std="sample":     std_g = sqrt(Σ_{j∈g} (r_j − mean_g)² / (n_g − 1))   (torch.std's default)

    A group whose rewards are all equal (including a group of size 1) gives exactly 0.
    Example: one group [1,0,0,1,0,0,0,1] has mean 0.375, population std 0.4841, so correct
    completions get +1.291 and wrong ones −0.775.
    """
    _check_inputs(rewards, group_ids)
    _check_std_kind(std)
    rewards = rewards.detach()
    centred, inverse, counts, num_groups = _centre_by_group(rewards, group_ids)
    denom = counts if std == "population" else (counts - 1).clamp_min(1)
    var = _group_sum(centred.square(), inverse, num_groups) / denom.to(rewards.dtype)
    # centred is exactly 0 in constant groups, so 0 / (0 + eps) = 0 there.
    return centred / (var.sqrt()[inverse] + eps)


def dr_grpo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Dr. GRPO advantage: group mean baseline, no std division.

    A_i = r_i − mean_g(r)

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective", §3.1:
    dividing by std_g up-weights groups that are almost all right or all wrong (question-level
    difficulty bias). Pair with `aggregate_loss(mode="seq_mean_token_sum_norm")` to also drop
    the per-sequence length normalisation.
    """
    _check_inputs(rewards, group_ids)
    centred, _, _, _ = _centre_by_group(rewards.detach(), group_ids)
    return centred


def rloo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE Leave-One-Out advantage (Ahmadian et al. 2024, "Back to Basics", eq. 6).

    A_i = r_i − (1 / (n_g − 1)) Σ_{j∈g, j≠i} r_j  =  n_g / (n_g − 1) · (r_i − mean_g(r))

    The baseline excludes the sample itself, so it is independent of r_i and the estimator is
    unbiased. Every group needs at least 2 samples (ValueError otherwise).
    """
    _check_inputs(rewards, group_ids)
    rewards = rewards.detach()
    unique_ids, inverse, counts = _group_index(group_ids)
    too_small = (counts < 2).nonzero()
    if too_small.numel() > 0:
        g = int(too_small[0])
        raise ValueError(
            f"rloo needs at least 2 samples per group; group id {unique_ids[g].item()} "
            f"has {counts[g].item()}"
        )
    num_groups = counts.numel()
    total = _group_sum(rewards, inverse, num_groups)[inverse]
    n = counts.to(rewards.dtype)[inverse]
    leave_one_out_mean = (total - rewards) / (n - 1)
    constant_row = _group_is_constant(rewards, inverse, num_groups)[inverse]
    return torch.where(constant_row, torch.zeros_like(rewards), rewards - leave_one_out_mean)


def reinforce_pp(
    rewards: Tensor, group_ids: Tensor, *, std: StdKind = "population", eps: float = 1e-6
) -> Tensor:
    """REINFORCE++ advantage: batch-level normalisation, groups ignored (Hu 2025, "REINFORCE++").

    A_i = (r_i − mean_batch(r)) / (std_batch(r) + eps)

    `group_ids` is only checked for shape, so the estimator stays swappable with the others.
    A batch whose rewards are all equal gives exactly 0. (For a batch of one row the sample std
    is defined as 0, which gives 0 too.)
    """
    _check_inputs(rewards, group_ids)
    _check_std_kind(std)
    rewards = rewards.detach()
    if rewards.numel() == 0 or bool(rewards.max() == rewards.min()):
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean()
    return centred / (_batch_std(centred, std) + eps)


def reinforce_pp_baseline(
    rewards: Tensor, group_ids: Tensor, *, std: StdKind = "population", eps: float = 1e-6
) -> Tensor:
    """REINFORCE++-baseline: group-mean baseline, then batch-std normalisation (Hu 2025).

    c_i = r_i − mean_g(r)              (exactly 0 in groups whose rewards are all equal)
    A_i = c_i / (std_batch(c) + eps),  std_batch(c) = sqrt(Σ_i (c_i − mean(c))² / N)

    mean(c) is 0 up to rounding (each group's centred values sum to 0), so c is not re-centred:
    re-centring would add rounding noise to the rows of constant groups, which must stay 0.
    std="sample" divides by N − 1 instead of N.
    """
    _check_inputs(rewards, group_ids)
    _check_std_kind(std)
    centred, _, _, _ = _centre_by_group(rewards.detach(), group_ids)
    if bool((centred == 0).all()):
        return centred
    spread = _batch_std(centred - centred.mean(), std)
    return centred / (spread + eps)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """Look an estimator up by its config name."""
    if name not in ADVANTAGE_ESTIMATORS:
        valid = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(f"unknown advantage estimator {name!r}; expected one of: {valid}")
    return ADVANTAGE_ESTIMATORS[name]


def zero_variance_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Bool [N]: row i belongs to a group whose rewards are all exactly equal.

    Such rows get zero advantage from every group-aware estimator, so they contribute no policy
    gradient (DAPO's dynamic sampling, Yu et al. 2025 §3.2, filters them out).
    """
    _check_inputs(rewards, group_ids)
    _, inverse, counts = _group_index(group_ids)
    return _group_is_constant(rewards.detach(), inverse, counts.numel())[inverse]


def group_stats(rewards: Tensor, group_ids: Tensor) -> dict[str, float]:
    """Counts of groups that carry no learning signal, for logging.

    num_groups:                 number of distinct group ids G.
    zero_std_group_fraction:    fraction of groups whose rewards are all exactly equal.
    all_correct_group_fraction: fraction of groups whose rewards are all equal AND > 0
                                (every completion solved the prompt: the prompt is too easy).
    all_wrong_group_fraction:   fraction of groups whose rewards are all equal AND <= 0
                                (no completion solved the prompt: too hard).
    The last two sum to zero_std_group_fraction.
    """
    _check_inputs(rewards, group_ids)
    rewards = rewards.detach()
    _, inverse, counts = _group_index(group_ids)
    num_groups = counts.numel()
    constant = _group_is_constant(rewards, inverse, num_groups)
    # In a constant group every row holds the same value, so any row's reward is the group's.
    group_value = torch.zeros(
        num_groups, dtype=rewards.dtype, device=rewards.device
    ).scatter_reduce(0, inverse, rewards, reduce="amax", include_self=False)
    g = float(max(num_groups, 1))
    return {
        "num_groups": float(num_groups),
        "zero_std_group_fraction": constant.sum().item() / g,
        "all_correct_group_fraction": (constant & (group_value > 0)).sum().item() / g,
        "all_wrong_group_fraction": (constant & (group_value <= 0)).sum().item() / g,
    }
