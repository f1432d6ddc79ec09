"""The Bradley-Terry preference loss of a scalar reward model, and its pairwise accuracy.

Bradley & Terry (1952, "Rank analysis of incomplete block designs") model the probability that
item i is preferred to item j as sigma(r_i - r_j). A reward model r(x, y) fitted to pairs
(x, y_chosen, y_rejected) by maximum likelihood minimises

    L = mean over pairs of  -log sigma(r(x, y_c) - r(x, y_r) - m)
                            + c * (r(x, y_c) + r(x, y_r))^2

the loss of Stiennon et al. (2020, "Learning to summarize from human feedback", eq. 1) and
Ouyang et al. (2022, InstructGPT, eq. 1), with m = 0 and c = 0. Two optional terms, as TRL's
RewardTrainer has them:
- m, a per-pair margin (Llama 2, Touvron et al. 2023, eq. 2): the chosen reward must exceed the
  rejected one by m before the loss flattens;
- c, center_rewards_coefficient (Eisenstein et al. 2023, "Helping or herding?"): pulls the
  pair's rewards toward 0, so their scale stays identifiable (the BT likelihood depends on the
  difference only).

-log sigma(d) is computed as softplus(-d) (`F.logsigmoid`), exact for any d without overflow.
Rewards are in the model's own units (logits); the loss is in nats.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_losses(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_coef: float = 0.0,
) -> torch.Tensor:
    """Each pair's loss [P]: -log sigma(r_c - r_r - m) + c * (r_c + r_r)^2 (module docstring).

    chosen, rejected: [P] rewards; margin: [P] or None (0)."""
    if chosen.shape != rejected.shape or chosen.dim() != 1:
        raise ValueError(
            f"bradley_terry_losses: chosen {tuple(chosen.shape)} and rejected "
            f"{tuple(rejected.shape)} must both be [P]"
        )
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin.to(diff.dtype)
    losses = -F.logsigmoid(diff)
    if center_coef:
        losses = losses + center_coef * (chosen + rejected) ** 2
    return losses


def bradley_terry_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_coef: float = 0.0,
) -> torch.Tensor:
    """The mean over pairs of `bradley_terry_losses`: TRL's RewardTrainer loss, a scalar."""
    return bradley_terry_losses(chosen, rejected, margin, center_coef).mean()


def pairwise_accuracy(chosen: torch.Tensor, rejected: torch.Tensor) -> float:
    """The share of pairs whose chosen reward is strictly above the rejected one (a tie counts
    as wrong, as in TRL's RewardTrainer)."""
    if chosen.numel() == 0:
        return float("nan")
    return int((chosen > rejected).sum()) / chosen.numel()
