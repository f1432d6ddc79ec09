"""The policy-loss variants by config name (`algorithm.policy_loss`).

Every variant has the signature

    loss(logprobs [B, T], old_logprobs [B, T], advantages [B], mask [B, T], **options)
        -> (per_token_loss [B, T], stats: dict[str, detached scalar tensor])

with the options named in `names.POLICY_LOSS_SPECS[name].options` (AlgorithmConfig fields of the
same name). The per-token loss is reduced by `aggregate_loss`. Stats: a key ending in `_min` is
reduced over micro-batches by min, one ending in `_max` by max, every other key is a mean over
completion tokens (a trainer weighs each micro-batch's value by its token count).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from rlvr.algorithms.cispo import cispo_loss
from rlvr.algorithms.covariance import clip_cov_loss, kl_cov_loss
from rlvr.algorithms.gmpo import gmpo_loss
from rlvr.algorithms.policy_loss import policy_loss

PolicyLoss = Callable[..., tuple[Tensor, dict[str, Tensor]]]

POLICY_LOSSES: dict[str, PolicyLoss] = {
    "clip": policy_loss,
    "cispo": cispo_loss,
    "gmpo": gmpo_loss,
    "clip_cov": clip_cov_loss,
    "kl_cov": kl_cov_loss,
}


def get_policy_loss(name: str) -> PolicyLoss:
    """Look a policy-loss variant up by its config name."""
    if name not in POLICY_LOSSES:
        valid = ", ".join(sorted(POLICY_LOSSES))
        raise ValueError(f"unknown policy loss {name!r}; expected one of: {valid}")
    return POLICY_LOSSES[name]
