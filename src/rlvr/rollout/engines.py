"""The rollout engines by name, as `rollout.engine` selects them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlvr.errors import ConfigError
from rlvr.rollout.fast_engine import FastEngine
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.types import Engine


def _vllm_engine(model: torch.nn.Module, tokenizer: Any, **options: Any) -> Engine:
    from rlvr.rollout.vllm_engine import VLLMEngine  # vLLM itself loads when one is built

    return VLLMEngine(model, tokenizer, **options)


# name -> what builds the engine (model, tokenizer, **options); each is checked against the
# Engine protocol (rlvr.rollout.types) by the type checker
ENGINES: dict[str, Callable[..., Engine]] = {
    "hf": HFEngine,
    "fast": FastEngine,
    "vllm": _vllm_engine,
}


def decoded_rows(rollout: Any) -> int:
    """Rows an engine decodes together: `rollout.max_batch_size`, or when it is 0 (auto) the
    rows of one step, prompts_per_step x group_size."""
    return rollout.max_batch_size or rollout.prompts_per_step * rollout.group_size


def engine_options(rollout: Any) -> dict[str, Any]:
    """The keyword arguments of the engine `rollout.engine` names, from the rollout section of
    a config."""
    options: dict[str, Any] = {"max_batch_size": decoded_rows(rollout)}
    if rollout.engine == "fast":
        options["max_prefill_tokens"] = rollout.max_prefill_tokens
    if rollout.engine == "vllm":
        options.update(
            kv_cache_gb=rollout.vllm_kv_cache_gb,
            gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
            max_model_len=rollout.vllm_max_model_len or None,
            sleep=rollout.vllm_sleep,
        )
    return options


def build_engine(name: str, model: torch.nn.Module, tokenizer: Any, **options: Any) -> Engine:
    """The engine called `name` over `model` (options: the engines' keyword arguments, e.g.
    max_batch_size). Unknown names raise a one-line ConfigError listing the known ones."""
    if name not in ENGINES:
        raise ConfigError(
            f"rollout.engine: unknown engine {name!r}; expected one of {sorted(ENGINES)}"
        )
    return ENGINES[name](model, tokenizer, **options)
