"""Masked reductions shared by the losses (means and sums over completion tokens only), the input
check every policy loss makes and the ratio statistics the new variants report.

Padding positions may hold anything (0, -inf, NaN from a padded forward pass); every reduction
here selects with `torch.where` before summing, so a non-finite padding value never leaks into a
result or a gradient (`x * mask` would turn `nan * 0` into NaN).
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of `x` over positions where `mask` is nonzero.

    sum = Σ_{t : mask_t ≠ 0} x_t · mask_t   (over `dim`, or over everything when dim is None).

    A float mask acts as a weight; a bool mask as 0/1.
    """
    weight = mask.to(x.dtype)
    selected = torch.where(mask != 0, x * weight, torch.zeros((), dtype=x.dtype, device=x.device))
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over positions where `mask` is nonzero.

    mean = Σ_t mask_t · x_t / max(Σ_t mask_t, 1)

    An all-zero mask gives 0, not NaN (the denominator is clamped to 1), so a sequence with no
    completion tokens contributes nothing instead of poisoning the batch.
    """
    count = mask.to(x.dtype)
    count = count.sum() if dim is None else count.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp_min(1.0)


def check_loss_inputs(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor
) -> None:
    """ValueError unless logprobs, old_logprobs, mask are [B, T] and advantages is [B] (one per
    sequence) or [B, T] (one per token, as GAE gives)."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    for name, x in (("old_logprobs", old_logprobs), ("mask", mask)):
        if x.shape != logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}, expected {tuple(logprobs.shape)} like logprobs"
            )
    if advantages.shape != logprobs.shape[:1] and advantages.shape != logprobs.shape:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}, expected ({logprobs.shape[0]},) "
            f"(one advantage per sequence) or {tuple(logprobs.shape)} (one per token)"
        )


def token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """The advantages detached in `like`'s dtype, shaped to broadcast over its [B, T] tokens:
    [B, 1] for one advantage per sequence, [B, T] as given for one per token. A per-sequence
    advantage and the same value repeated at every token give the same loss, bit for bit."""
    adv = advantages.detach().to(like.dtype)
    return adv.unsqueeze(-1) if adv.dim() == 1 else adv


def check_sequence_advantages(advantages: Tensor, who: str) -> None:
    """ValueError for per-token advantages where a loss needs one advantage per sequence."""
    if advantages.dim() != 1:
        raise ValueError(
            f"{who} weighs one ratio per sequence and needs one advantage per sequence [B], got "
            f"per-token advantages of shape {tuple(advantages.shape)}"
        )


def ratio_stats(ratio: Tensor, on: Tensor) -> dict[str, Tensor]:
    """ratio_mean, ratio_min, ratio_max of a detached ratio over the tokens where `on` (bool) is
    True; each is 1.0 when there are no such tokens."""
    has_tokens = on.any()
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    inf = torch.full((), float("inf"), dtype=ratio.dtype, device=ratio.device)
    return {
        "ratio_mean": torch.where(has_tokens, masked_mean(ratio, on), one),
        "ratio_min": torch.where(has_tokens, torch.where(on, ratio, inf).min(), one),
        "ratio_max": torch.where(has_tokens, torch.where(on, ratio, -inf).max(), one),
    }
