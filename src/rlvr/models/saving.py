"""Writing a policy as a plain Hugging Face model: what a checkpoint, the final model and a
generation server's snapshot all need.

- A LoRA model is written merged (plain HF weights); `merged_state_dict` gives the same tensors
  in memory.
- A model loaded from GGUF (which transformers refuses to save) is copied into a fresh model of
  the same config first, without the GGUF loader's `quantization_config`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from rlvr.models.lora import is_lora, mergeable_copy


def plain_model(model: Any) -> Any:
    """`model`, or a same-config copy of it when it was loaded from GGUF (not saveable)."""
    if not getattr(model, "_rlvr_from_gguf", False):
        return model
    from transformers import AutoModelForCausalLM

    # The GGUF loader leaves its quantization_config behind: saved with it, the fp32 copy would
    # reload as "quantized" (and peers such as TRL and vLLM refuse to load it).
    config = copy.deepcopy(model.config)
    config.__dict__.pop("quantization_config", None)
    fresh = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    fresh.load_state_dict(model.state_dict())
    fresh.generation_config = model.generation_config
    return fresh


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The plain model's weights by their HF names: a LoRA model's adapters merged into a copy
    of its base (exact: the policy itself is untouched), any other model's own state_dict."""
    if is_lora(model):
        return mergeable_copy(model).state_dict()
    return model.state_dict()


def write_pretrained(model: Any, tokenizer: Any, directory: Path) -> None:
    """`directory` loadable with AutoModelForCausalLM (and by vLLM): a LoRA model merged, with
    its adapter alone in `directory/adapter`; a GGUF-loaded model as plain weights."""
    directory = Path(directory)
    if is_lora(model):
        model.save_pretrained(directory / "adapter", safe_serialization=True)
        model = mergeable_copy(model)
    plain_model(model).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
