"""Questions about a model's modules that more than one part asks."""

from __future__ import annotations

import torch

_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


def is_plain(module: torch.nn.Module, kind: type[torch.nn.Module]) -> bool:
    """Exactly a `kind` (not a subclass or wrapper) that nothing runs around: its parameters
    alone define what it computes, so a caller may use them directly instead of calling it.

    Not plain: a subclass or wrapper (peft LoRA, quantized, parametrised modules), hooks on the
    module, process-wide module hooks, or a replaced instance `forward` (accelerate's offloading
    wrappers)."""
    if type(module) is not kind or "forward" in vars(module):
        return False
    own = (
        module._forward_hooks,
        module._forward_pre_hooks,
        module._backward_hooks,
        module._backward_pre_hooks,
    )
    shared = (getattr(torch.nn.modules.module, name, None) for name in _GLOBAL_HOOKS)
    return not any(own) and not any(shared)


def is_plain_linear(module: torch.nn.Module) -> bool:
    """`is_plain(module, nn.Linear)`: the fast rollout engine fuses and packs plain
    projections; the training log-prob path runs a plain output head through its fused autograd
    function."""
    return is_plain(module, torch.nn.Linear)


def is_plain_tensor(tensor: torch.Tensor) -> bool:
    """A plain tensor or Parameter, not a tensor subclass such as an FSDP-sharded DTensor."""
    return type(tensor) in (torch.nn.Parameter, torch.Tensor)
