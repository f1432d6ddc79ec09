"""The `critic` section: PPO's value model, read with `algorithm.advantage=gae` only (docs/ppo.md).

The value model V(s_t) is a causal LM's decoder with a scalar head (rlvr.models.value): a copy
of the policy's starting weights, or another model; trained beside the policy on the same
batches (`optimizer.*` apart from its own learning rate), with the policy's precision, LoRA,
gradient checkpointing and data-parallel strategy. Part of `rlvr.config.tree`'s `Config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import option


@dataclass
class CriticConfig:
    name_or_path: str | None = option(
        None,
        "the value model's starting weights: an HF causal LM (its decoder, plus a new scalar "
        "head); unset = the policy's own starting weights (model.name_or_path)",
    )
    lr: float | None = option(
        None, "peak learning rate of its AdamW (unset = optimizer.lr)", gt=0.0
    )
    warmup_steps: int = option(
        0,
        "steps at the start in which only the critic trains (the policy waits for a value "
        "baseline that is no longer random)",
        ge=0,
    )
    value_clip: float | None = option(
        None,
        "clip V to within this of its value when the batch was scored (OpenAI baselines' ppo2; "
        "in reward units; unset = no clipping, which Engstrom et al. 2020 found no worse)",
        gt=0.0,
    )
    whiten_advantages: bool = option(
        True, "normalise the per-token advantages over the batch's sampled tokens (mean 0, std 1)"
    )
    lora_rank: int | None = option(
        None, "LoRA rank of the value model (unset = model.lora_rank; 0 = full fine-tuning)", ge=0
    )
