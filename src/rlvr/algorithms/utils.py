"""Masked reductions shared by the losses: means and sums over completion tokens only.

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
