"""The configuration tree of `rlvr rm` (docs/guides/reward-models.md): the model a reward model
starts from, the preference pairs, optimizer, training, evaluation, logging and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.config import (
    CheckpointConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    option,
    validate_model,
)
from rlvr.errors import ConfigError


@dataclass
class RMDataConfig:
    path: str | None = option(
        None,
        "preference pairs (required): .jsonl/.json/.csv/.parquet or a HF dataset directory, "
        "rows with chosen/rejected strings and an optional shared prompt (TRL's RewardTrainer "
        "and OpenRLHF's format), or TRL's conversational form (lists of chat messages)",
    )
    prompt_field: str = option("prompt", "column holding the shared prompt (optional per row)")
    chosen_field: str = option("chosen", "column holding the preferred completion")
    rejected_field: str = option("rejected", "column holding the dispreferred completion")
    margin_field: str = option(
        "margin", "column holding a per-pair margin m (optional; TRL's `margin`)"
    )
    eval_path: str | None = option(
        None, "held-out pairs (unset: eval_fraction of data.path is held out)"
    )
    eval_fraction: float = option(
        0.1,
        "without eval_path: the share of data.path's pairs held out (seeded by data.seed; "
        "0 = none, no evaluation)",
        ge=0.0,
        lt=1.0,
    )
    max_length: int = option(
        0, "drop pairs whose chosen or rejected sequence exceeds this many tokens (0 = keep)", ge=0
    )
    seed: int = option(0, "seed of the held-out split")


@dataclass
class RMTrainingConfig:
    epochs: int = option(1, "passes over the training pairs", ge=1)
    max_steps: int = option(0, "optimizer steps (0 = epochs * ceil(pairs / batch_size))", ge=0)
    batch_size: int = option(32, "pairs per optimizer step", ge=1)
    micro_batch_size: int = option(
        32, "pairs per forward/backward (2 sequences each; gradient accumulation)", ge=1
    )
    center_rewards_coefficient: float = option(
        0.0,
        "c of the centering term c * (r_chosen + r_rejected)^2 (TRL's "
        "center_rewards_coefficient; 0 = off)",
        ge=0.0,
    )
    seed: int = option(0, "seed of the data order and of the score head's initialisation")
    keep_freed_memory: bool = option(
        True,
        "model on the CPU: keep the memory the process frees for reuse instead of returning it "
        "to the kernel (glibc malloc settings, process-wide); docs/training-speed.md",
    )


@dataclass
class RMOptimizerConfig(OptimizerConfig):
    # Measured on the embedded addition pairs (docs/guides/reward-models.md); TRL's
    # RewardConfig default is 1e-4, rlvr train's RL default 1e-4 as well.
    lr: float = option(1e-4, "peak learning rate of AdamW", gt=0.0)


@dataclass
class RMEvalConfig:
    every: int = option(0, "also evaluate the held-out pairs every N steps (0 = off)", ge=0)
    before: bool = option(True, "evaluate the held-out pairs before training")
    after: bool = option(True, "evaluate the held-out pairs after training")


@dataclass
class RMConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: RMDataConfig = field(default_factory=RMDataConfig)
    optimizer: RMOptimizerConfig = field(default_factory=RMOptimizerConfig)
    training: RMTrainingConfig = field(default_factory=RMTrainingConfig)
    eval: RMEvalConfig = field(default_factory=RMEvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def validate(self) -> None:
        """Checks that involve more than one field."""
        validate_model(self.model)
        if not self.data.path:
            raise ConfigError(
                "data.path: required: a file of preference pairs (rows with 'chosen' and "
                "'rejected', optionally 'prompt'; docs/guides/reward-models.md)"
            )
        fields = {
            "data.prompt_field": self.data.prompt_field,
            "data.chosen_field": self.data.chosen_field,
            "data.rejected_field": self.data.rejected_field,
            "data.margin_field": self.data.margin_field,
        }
        seen: dict[str, str] = {}
        for key, column in fields.items():
            if column in seen:
                raise ConfigError(f"{key}: {column!r} is already {seen[column]}")
            seen[column] = key
