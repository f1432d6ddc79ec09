"""LoRA adapters through `peft`, and the one place that knows a model may carry them.

`model.lora_rank > 0` wraps the loaded model in a peft `PeftModel`: the base weights are frozen
and only the low-rank adapters train. Three things follow, and they live here:

- `reference_logits_context(model)`: with LoRA the frozen base *is* the reference model, so the
  KL reference is the same module with its adapters switched off (`disable_adapter()`); no second
  copy of the weights is held. Without LoRA the caller keeps a separate reference model.
- `mergeable_copy(model)`: checkpoints are written in plain HF format (adapters merged into a
  copy of the weights), so any later stage or tool loads them with `from_pretrained`; the adapter
  alone is saved next to them (`adapter/`) for peft users.
- `is_lora(model)`.

Decision: adapters default to every linear layer ("all-linear", as QLoRA recommends) except the
output head; alpha 16 and no dropout, like TRL's examples.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from rlvr.config import ModelConfig
from rlvr.errors import UserError


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise UserError(
            "model.lora_rank > 0 needs peft: pip install 'rlvr[lora]' (or pip install peft)"
        ) from None
    return peft


def apply_lora(model: Any, cfg: ModelConfig) -> Any:
    """Wrap `model` with trainable LoRA adapters; base weights are frozen."""
    peft = _peft()
    targets: Any = cfg.lora_target_modules
    if targets == ["all-linear"]:
        targets = "all-linear"
    lora_cfg = peft.LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        wrapped = peft.get_peft_model(model, lora_cfg)
    except ValueError as e:
        raise UserError(f"model.lora_target_modules: {str(e).splitlines()[0]}") from None
    return wrapped


def is_lora(model: Any) -> bool:
    try:
        import peft
    except ImportError:
        return False
    return isinstance(model, peft.PeftModel)


@contextlib.contextmanager
def reference_context(model: Any) -> Iterator[Any]:
    """Yield the reference policy: the adapter-disabled base of a LoRA model."""
    if not is_lora(model):
        raise ValueError("reference_context needs a LoRA (peft) model")
    with model.disable_adapter():
        yield model


def mergeable_copy(model: Any) -> Any:
    """A plain transformers model with the adapters merged in; `model` itself is untouched."""
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
