"""FSDP2 learners (`distributed.strategy=fsdp` under torchrun).

Each decoder layer is its own FSDP unit; the root unit is `LogprobRoot`, a module whose forward
runs a log-prob function over the policy. The trainer's packed path calls the decoder and the
output head separately (to project only completion positions to the vocabulary, in chunks), so
the policy's own forward never runs: wrapping that call in the root's forward is what makes FSDP
gather the root's parameters (embeddings, final norm, output head, tied or not) around it and
reduce-scatter their gradients after backward. FSDP averages gradients over ranks; as in the DDP
path every rank's loss is already divided by the mini-batch's global normaliser, so the trainer
multiplies it by the world size before backward, which turns FSDP's mean into the sum. (A
gradient divide factor of 1 would do the same, but gloo lacks the PREMUL_SUM reduction it uses.)

FSDP runs collectives in every forward and backward, so every rank must make the same number of
passes: the trainer pads a rank that has fewer micro-batches with zero-weight passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

from rlvr.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class LogprobRoot(torch.nn.Module):
    """The FSDP root: `root(fn, *args)` is `fn(policy, *args)` inside the root's forward."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self.policy, *args, **kwargs)


def shard_policy(model: PreTrainedModel) -> LogprobRoot:
    """Shard `model` in place (one FSDP unit per decoder layer, the rest in the root)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise ConfigError(
            "distributed.strategy=fsdp: this model's decoder has no `layers` list to shard; "
            "use distributed.strategy=ddp"
        )
    for layer in layers:
        fully_shard(layer)
    root = LogprobRoot(model)
    fully_shard(root)
    return root


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state_dict on every rank (a collective: every rank calls it)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return cast(dict[str, torch.Tensor], state)  # a full state dict holds whole tensors


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The unsharded optimizer state, on the CPU of rank 0 (a collective)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_full_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],  # whole tensors (set_model_state_dict's dict is invariant)
    optimizer_state: dict,
) -> None:
    """Shard full (unsharded) model and optimizer states into the FSDP model (every rank)."""
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
