"""Questions about a model's modules that more than one part asks."""

from __future__ import annotations

import torch

_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


def is_plain_linear(module: torch.nn.Module) -> bool:
    """An unwrapped nn.Linear that nothing runs around: its weight (and bias) alone define what
    it computes, so a caller may multiply by them directly instead of calling the module.

    Not plain: a subclass or wrapper (peft LoRA, quantized, parametrised linears), hooks on the
    module, process-wide module hooks, or a replaced instance `forward` (accelerate's offloading
    wrappers). The fast rollout engine fuses and packs plain projections; the training log-prob
    path runs a plain output head through its fused autograd function.
    """
    if type(module) is not torch.nn.Linear or "forward" in vars(module):
        return False
    own = (
        module._forward_hooks,
        module._forward_pre_hooks,
        module._backward_hooks,
        module._backward_pre_hooks,
    )
    shared = (getattr(torch.nn.modules.module, name, None) for name in _GLOBAL_HOOKS)
    return not any(own) and not any(shared)
