"""The rollout engines by name, as `rollout.engine` selects them."""

from __future__ import annotations

import torch

from rlvr.errors import ConfigError
from rlvr.rollout.fast_engine import FastEngine
from rlvr.rollout.hf_engine import HFEngine

ENGINES: dict[str, type] = {"hf": HFEngine, "fast": FastEngine}


def build_engine(name: str, model: torch.nn.Module, tokenizer, **options) -> HFEngine | FastEngine:
    """The engine called `name` over `model` (options: the engines' keyword arguments, e.g.
    max_batch_size). Unknown names raise a one-line ConfigError listing the known ones."""
    if name not in ENGINES:
        raise ConfigError(
            f"rollout.engine: unknown engine {name!r}; expected one of {sorted(ENGINES)}"
        )
    return ENGINES[name](model, tokenizer, **options)
