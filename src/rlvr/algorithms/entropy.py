"""Entropy of the policy's next-token distribution, from logits.

The trainer logs it (entropy collapse is the usual failure of GRPO runs, Yu et al. 2025 §3.1)
and may add a bonus: loss = policy_loss − entropy_coef · masked_mean(entropy, mask).
"""

from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy in nats over the last (vocabulary) dimension.

    H = −Σ_v p_v log p_v,  log p = log_softmax(z) = z − logsumexp(z),  p = exp(log p)

    log_softmax subtracts the max logit before exponentiating, so logits of any finite size
    (e.g. ±1e4 in float32) give an accurate H with no overflow; computing H as
    logsumexp(z) − Σ p z instead would lose precision to cancellation when |z| is large.
    Memory: two [..., V] temporaries (log p and p) beyond the input, plus the product.
    Logits must be finite (a −inf logit gives 0 · −inf = NaN); shape [..., V] -> [...].
    Differentiable, and computed in the input's dtype (upcast bf16 logits first if needed).
    """
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
