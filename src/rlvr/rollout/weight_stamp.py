"""Whether a kept copy of weights is still current: `Stamp` records what it was made from.

The fast engine keeps fused and packed copies of a model's weights between calls (rebuilding a
layer's copies costs ~1 ms per weight on a CPU); a copy is reused only while its stamp matches.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.models.modules import is_plain_linear


class Stamp:
    """The sources a kept copy of weights was made from, to tell whether the copy is stale.

    Per source object: its identity (held weakly, so a replaced weight or module is neither
    kept alive nor confused with a new object at the same address); for a module its type, hook
    counts and `is_plain_linear` (backward or global hooks, a replaced `forward`: they decide
    whether it is fused or called); for a tensor its in-place version
    counter, data pointer, dtype and device. Optimizer steps, `copy_`, `load_state_dict` and
    peft's merges bump the version counter; `.to()`, `module.half()` or a new Parameter change
    the pointer or the object; wrapping a linear in a LoRA layer replaces the module. Two kinds
    of writes bypass the version counter and are not seen: through `.data`, and torch's fused
    optimizer kernels (AdamW(fused=True) updates in place without bumping it). Their owner says
    so explicitly: rlvr's trainers step through `rlvr.runs.optim.optimizer_step`, which
    bumps the counters of the parameters a fused step changed; after other such writes call
    `LlamaFamilyDecoder.release(weights=True)` (`FastEngine.release_cache()`). Nothing here
    installs a process-wide hook.
    """

    def __init__(self, sources: Sequence[object]) -> None:
        self._refs = [weakref.ref(source) for source in sources]
        self._marks = [_mark(source) for source in sources]

    def matches(self, sources: Sequence[object]) -> bool:
        return len(sources) == len(self._refs) and all(
            ref() is source and _mark(source) == mark
            for ref, source, mark in zip(self._refs, sources, self._marks, strict=True)
        )


def _mark(source: object) -> object:
    if isinstance(source, torch.Tensor):
        if source.is_inference():  # no version counter: never trust a copy of it
            return object()
        return (source._version, source.data_ptr(), source.dtype, source.device)
    if isinstance(source, torch.nn.Module):  # what decides whether a projection is fused
        hooks = (len(source._forward_hooks), len(source._forward_pre_hooks))
        return (type(source), *hooks, is_plain_linear(source))
    return type(source)


def module_sources(modules: Sequence[torch.nn.Module]) -> list[object]:
    """The modules and their weights and biases: what a kept copy made from them depends on."""
    tensors = [
        tensor
        for module in modules
        for tensor in (getattr(module, "weight", None), getattr(module, "bias", None))
        if isinstance(tensor, torch.Tensor)
    ]
    return [*modules, *tensors]


def layer_sources(layer: Any) -> list[object]:
    """What a `_LayerPlan` of a Llama-family decoder layer (duck-typed) is made from."""
    attention, mlp = layer.self_attn, layer.mlp
    return [
        layer,
        attention,
        mlp,
        mlp.act_fn,
        *module_sources(
            (
                attention.q_proj,
                attention.k_proj,
                attention.v_proj,
                attention.o_proj,
                mlp.gate_proj,
                mlp.up_proj,
                mlp.down_proj,
                layer.input_layernorm,
                layer.post_attention_layernorm,
            )
        ),
    ]
