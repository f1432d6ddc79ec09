"""The configuration tree of `rlvr sft` (docs/sft.md): the model, the SFT rows or the task whose
demonstrations are drawn, optimizer, training, evaluation, logging and checkpoint sections."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.config import (
    CheckpointConfig,
    DataConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    RewardConfig,
    option,
    validate_model,
)
from rlvr.errors import ConfigError

DEFAULT_EVAL_TOKENS = 64  # eval.max_new_tokens = 0: at least this, or the longest completion


@dataclass
class SFTDataConfig:
    path: str | None = option(
        None,
        "SFT rows: .jsonl/.json/.csv/.parquet or a HF dataset directory "
        "(unset: demonstrations drawn from the task section)",
    )
    prompt_field: str = option("prompt", "column holding the prompt")
    completion_field: str = option("completion", "column holding the target completion")
    system_field: str = option("system", "column holding a per-row system message (chat models)")
    eval_path: str | None = option(
        None, "held-out SFT rows; their completion loss is reported as eval_loss"
    )
    num_examples: int = option(2000, "demonstrations drawn from the task when path is unset", ge=1)
    max_length: int = option(
        0, "drop rows whose prompt + completion + EOS exceed this many tokens (0 = keep)", ge=0
    )
    seed: int = option(0, "seed of the demonstration draw")


@dataclass
class SFTTrainingConfig:
    epochs: int = option(1, "passes over the SFT rows", ge=1)
    max_steps: int = option(0, "optimizer steps (0 = epochs * ceil(rows / batch_size))", ge=0)
    batch_size: int = option(32, "sequences per optimizer step", ge=1)
    micro_batch_size: int = option(
        32, "sequences (packed rows with packing) per forward/backward", ge=1
    )
    packing: bool = option(True, "pack several examples per row (block-diagonal attention)")
    pack_length: int = option(0, "tokens per packed row (0 = the longest example)", ge=0)
    seed: int = option(0, "seed of the data order and of dropout")
    keep_freed_memory: bool = option(
        True,
        "model on the CPU: keep the memory the process frees for reuse instead of returning it "
        "to the kernel (glibc malloc settings, process-wide); docs/training-speed.md",
    )


@dataclass
class SFTOptimizerConfig(OptimizerConfig):
    # Measured on the embedded model (docs/sft.md): 1e-3 gives held-out greedy accuracy 0.93
    # after 8 steps of 32 demonstrations where 3e-4 gives 0.44; 3e-3 overshoots (0.76 after
    # 2000 demonstrations where 1e-3 and 3e-4 reach 1.0). rlvr train's RL default is 1e-4.
    lr: float = option(1e-3, "peak learning rate of AdamW", gt=0.0)


@dataclass
class SFTEvalConfig(EvalConfig):
    # A default SFT run is ~60 short steps; evaluating before and after is enough there.
    every: int = option(0, "also evaluate every N steps during training (0 = off)", ge=0)
    max_new_tokens: int = option(
        0,
        f"completion limit in evaluation (0 = max({DEFAULT_EVAL_TOKENS}, longest completion))",
        ge=0,
    )


@dataclass
class SFTConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    task: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    optimizer: SFTOptimizerConfig = field(default_factory=SFTOptimizerConfig)
    training: SFTTrainingConfig = field(default_factory=SFTTrainingConfig)
    eval: SFTEvalConfig = field(default_factory=SFTEvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def validate(self) -> None:
        """Checks that involve more than one field."""
        validate_model(self.model)
        task_checks = getattr(self.task, "validate", None)
        if callable(task_checks):  # the task section's own cross-field checks, when it has any
            task_checks()
        if self.task.task == "dataset" and not self.task.path:
            raise ConfigError("task.path: required when task.task is 'dataset'")
        t, d = self.training, self.data
        if t.packing and t.pack_length and d.max_length > t.pack_length:
            raise ConfigError(
                f"training.pack_length: must be >= data.max_length = {d.max_length} so that "
                f"every kept row fits in a packed row, got {t.pack_length}"
            )
        if d.eval_path and not d.path:
            raise ConfigError("data.eval_path: needs data.path (the training rows) as well")
