"""Saving models in HF save_pretrained format, atomically (a temp dir renamed into place)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def save_model(model: Any, tokenizer: Any, path: Path) -> None:
    """Write `model` and `tokenizer` to `path` so AutoModelForCausalLM can load it.

    A LoRA model is written merged (plain HF weights) with its adapter alone in `path/adapter`.
    A model loaded from GGUF (which transformers refuses to save) is copied into a fresh model
    of the same config first. The files go to a sibling temp dir; a crash mid-save leaves no
    half-written model.
    """
    from rlvr.models.lora import is_lora, mergeable_copy

    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    if is_lora(model):
        model.save_pretrained(tmp / "adapter", safe_serialization=True)
        model = mergeable_copy(model)
    _plain(model).save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if path.exists():
        old = path.with_name(path.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)



def _plain(model: Any) -> Any:
    """`model`, or a same-config copy of it when it was loaded from GGUF (not saveable)."""
    if not getattr(model, "_rlvr_from_gguf", False):
        return model
    from transformers import AutoModelForCausalLM

    fresh = AutoModelForCausalLM.from_config(model.config, dtype=model.dtype)
    fresh.load_state_dict(model.state_dict())
    fresh.generation_config = model.generation_config
    return fresh
