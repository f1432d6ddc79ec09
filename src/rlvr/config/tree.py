"""The typed configuration tree of a run.

One tree covers model, data, reward, rollout, algorithm, optimizer, training, evaluation, logging
and checkpointing. It is read from YAML, takes dotted `key=value` overrides from the command line,
and is validated before any work starts: an unknown key, a wrong type or a value out of range is a
one-line `ConfigError` that names the key and, where one is close, suggests the valid key.

Every field's metadata carries its help text (one line of `rlvr train --help`) and its
constraints (`choices`, numeric bounds `ge`/`gt`/`le`/`lt`).

This module holds the tree; `rlvr.config.fields` the machinery that reads any such tree and
`rlvr.config.checks` the checks across fields (`validate`, `config_warnings`); the generation-side
sections (rollout, reward, environment) are in `rlvr.config.rollout`. Every name is
importable from `rlvr.config`. The algorithm names come from `rlvr.algorithms.names` (no torch).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlvr.algorithms.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    AGGREGATION_MODES,
    KL_ESTIMATORS,
    POLICY_LOSS_NAMES,
    RATIO_LEVELS,
    STD_KINDS,
    TOKEN_CORRECTION_NAMES,
)
from rlvr.config.checks import check_template, validate
from rlvr.config.critic import CriticConfig
from rlvr.config.fields import (
    apply_overrides,
    build_tree,
    describe_tree,
    leaf_keys,
    load_tree,
    option,
    read_config_file,
)
from rlvr.config.rollout import EnvironmentConfig, RewardConfig, RolloutConfig
from rlvr.config.trl import FOREIGN_NAMES, is_trl_key, translate_trl
from rlvr.errors import ConfigError

# model.precision: how `rlvr train` stores and computes (ModelConfig.training_precision)
PRECISIONS = ("auto", "fp32", "bf16-mixed", "bf16")
# model.dtype (not auto) -> the pure layout it asks for under model.precision=auto
PURE_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass
class ModelConfig:
    name_or_path: str = option(
        "embedded",
        "HF causal LM: a local directory or a hub id; 'embedded' is the built-in tiny base "
        "model, 'embedded-small' its 4x smaller sibling, 'embedded-tools' the tool-calling one",
    )
    dtype: str = option(
        "auto",
        "weights' dtype of inference (eval, sample, Ray rollout actors); auto = fp32 on CPU, "
        "bf16 on CUDA. `rlvr train` and `rlvr sft` follow model.precision",
        choices=["auto", "float32", "bfloat16", "float16"],
    )
    precision: str = option(
        "auto",
        "rlvr train's and rlvr sft's numerics: fp32; bf16-mixed = fp32 master weights and AdamW "
        "state, bf16 compute (autocast), fp32 log-probs and loss; bf16 = pure bf16 weights "
        "(small updates are lost); auto = bf16-mixed on CUDA; on a CPU a start-up probe times "
        "the model's layer shapes and picks bf16-mixed when >= 1.5x faster, else fp32 (hidden "
        "< 512, no bf16 kernels or RLVR_PRECISION_PROBE=off: fp32), kept on --resume; pure "
        "weights of an explicit model.dtype",
        choices=list(PRECISIONS),
    )
    device: str = option(
        "auto", "auto = cuda if available, else cpu", choices=["auto", "cpu", "cuda"]
    )
    chat_template: str = option(
        "auto",
        "auto = apply the tokenizer's chat template when it has one (instruct models)",
        choices=["auto", "always", "never"],
    )
    trust_remote_code: bool = option(False, "passed to transformers Auto classes")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the policy update")
    gguf_file: str | None = option(
        None,
        "GGUF weights inside name_or_path (read by transformers, needs 'gguf'; converted once "
        "to float32 safetensors kept in $RLVR_CACHE_DIR/gguf, default ~/.cache/rlvr/gguf)",
    )
    lora_rank: int = option(0, "LoRA rank r (0 = full fine-tuning); needs the 'lora' extra", ge=0)
    lora_alpha: float = option(16.0, "LoRA scaling alpha (update scale alpha / r)", gt=0.0)
    lora_dropout: float = option(0.0, "dropout on the LoRA input", ge=0.0, lt=1.0)
    lora_target_modules: list[str] = option(
        ["all-linear"], "modules that get adapters: 'all-linear' or names like q_proj, v_proj"
    )

    def training_precision(self, device: str, bf16_supported: bool = True) -> str:
        """The layout `rlvr train` uses on a `device` type ('cpu', 'cuda'): fp32, bf16-mixed,
        bf16 or fp16 (the last only from model.dtype=float16). model.precision when set; for
        auto, an explicit model.dtype keeps its meaning of pure weights in that dtype (float32 ->
        fp32, bfloat16 -> bf16, float16 -> fp16), else bf16-mixed on a CUDA device that
        supports bf16, else fp32. On a CPU `rlvr.models.loading.resolve_precision` measures
        instead (bf16 matmuls run from ~100x slower than fp32 to 4.7x faster, by CPU)."""
        if self.precision != "auto":
            return self.precision
        if self.dtype != "auto":
            return PURE_PRECISION[self.dtype]
        return "bf16-mixed" if device == "cuda" and bf16_supported else "fp32"


@dataclass
class DataConfig:
    task: str = option(
        "addition",
        "built-in procedural task (addition, arithmetic, countdown), 'gym' for a reasoning-gym "
        "generator (the 'gym' extra), 'dataset' to read data.path, or 'environment' for the "
        "rows of environment.name's library (a verifiers environment's dataset); see "
        "docs/tasks.md",
        choices=[
            "addition",
            "arithmetic",
            "countdown",
            "multiplication",
            "gym",
            "dataset",
            "environment",
        ],
    )
    digits: int = option(3, "operand digits of the addition task", ge=1, le=12)
    level: int = option(
        1, "arithmetic: difficulty level to start at (1-8, docs/tasks.md)", ge=1, le=8
    )
    max_level: int = option(
        8, "arithmetic: highest level of the schedule and of held-out", ge=1, le=8
    )
    difficulty: str = option(
        "fixed",
        "arithmetic schedule: fixed (data.level), linear (data.level -> data.max_level over the "
        "run), adaptive (one level up when the mean reward at the level reaches data.promote_at)",
        choices=["fixed", "linear", "adaptive"],
    )
    promote_at: float = option(
        0.8, "arithmetic adaptive: mean reward over the window that promotes", gt=0.0, le=1.0
    )
    promote_window: int = option(
        64, "arithmetic adaptive: rewards (completions) averaged at the current level", ge=1
    )
    countdown_min_numbers: int = option(3, "countdown: fewest numbers in a problem", ge=2, le=8)
    countdown_max_numbers: int = option(4, "countdown: most numbers in a problem", ge=2, le=8)
    countdown_max_value: int = option(
        100, "countdown: numbers are drawn from 1..this", ge=1, le=10000
    )
    countdown_max_target: int = option(
        1000, "countdown: targets are at most this (larger ones are redrawn)", ge=1
    )
    gym_name: str | None = option(
        None, "reasoning-gym dataset name, e.g. basic_arithmetic (task=gym)"
    )
    gym_config: list[str] = option(
        [], "reasoning-gym generator settings as KEY=VALUE items, e.g. [min_terms=2,max_terms=3]"
    )
    gym_size: int = option(100_000, "reasoning-gym: entries training draws from", ge=1)
    path: str | None = option(
        None,
        "prompt dataset: .jsonl/.json/.csv/.parquet, a saved HF dataset "
        "directory, or a hub name (data.task=dataset)",
    )
    eval_path: str | None = option(None, "held-out dataset (default: split off data.eval_fraction)")
    eval_fraction: float = option(
        0.1, "share of data.path held out when no eval_path", ge=0.0, lt=1.0
    )
    prompt_field: str = option("prompt", "dataset column holding the prompt")
    answer_field: str = option("answer", "dataset column holding the reference answer")
    tests_field: str = option("tests", "dataset column holding code tests")
    system_field: str = option("system", "dataset column holding a per-row system message")
    source_field: str = option("source", "dataset column naming the row's source (per-source eval)")
    max_prompt_tokens: int = option(
        0, "drop prompts longer than this many tokens (0 = keep all)", ge=0
    )
    system_prompt: str | None = option(None, "system message, used only with a chat template")
    prompt_template: str | None = option(
        None,
        'plain template around every prompt, e.g. "Q: {prompt}\\nA:"; other {field}s of the '
        "sample may appear (docs/data.md)",
    )
    fewshot: int = option(
        0,
        "solved training problems shown before every prompt, as chat turns or plain text "
        "(docs/data.md)",
        ge=0,
        le=64,
    )
    mix_path: str | None = option(
        None,
        "prompts no rule checks, mixed into training (DeepSeek-R1's last stage): a dataset with "
        "data.prompt_field, scored by reward.mix_verifier (docs/pipelines.md)",
    )
    mix_fraction: float = option(
        0.0, "share of the training draws taken from data.mix_path", ge=0.0, le=1.0
    )
    seed: int = option(0, "seed of the prompt stream")

    def validate(self) -> None:
        """Checks across data fields (the tasks' own settings)."""
        if self.prompt_template is not None:
            check_template(self.prompt_template)
        if self.task == "arithmetic" and self.level > self.max_level:
            raise ConfigError(
                f"data.level: must be <= data.max_level = {self.max_level}, got {self.level}"
            )
        if self.task == "countdown" and self.countdown_min_numbers > self.countdown_max_numbers:
            raise ConfigError(
                f"data.countdown_min_numbers: must be <= data.countdown_max_numbers = "
                f"{self.countdown_max_numbers}, got {self.countdown_min_numbers}"
            )
        if self.task == "gym" and not self.gym_name:
            raise ConfigError("data.gym_name: required when data.task is 'gym'")
        if self.mix_path and self.mix_fraction == 0:
            raise ConfigError("data.mix_fraction: must be > 0 when data.mix_path is set")


@dataclass
class AlgorithmConfig:
    advantage: str = option("grpo", "advantage estimator", choices=list(ADVANTAGE_ESTIMATOR_NAMES))
    std: str = option(
        "population",
        "grpo std: population (1/G) or sample (1/(G-1))",
        choices=list(STD_KINDS),
    )
    eps: float = option(1e-6, "added to the std in z-scores", ge=0.0)
    gamma: float = option(1.0, "gae: discount per sampled token", ge=0.0, le=1.0)
    lam: float = option(
        1.0, "gae: lambda (1 = Monte Carlo return minus V, 0 = one-step TD error)", ge=0.0, le=1.0
    )
    loss_aggregation: str = option(
        "seq_mean_token_mean",
        "seq_mean_token_mean (GRPO), token_mean (DAPO), seq_mean_token_sum_norm (Dr. GRPO)",
        choices=list(AGGREGATION_MODES),
    )
    policy_loss: str = option(
        "clip",
        "policy-loss variant: clip (PPO/GRPO clipped surrogate; GSPO with "
        "ratio_level=sequence), cispo (MiniMax-M1), gmpo (geometric mean), clip_cov or kl_cov "
        "(covariance-based entropy control); docs/algorithms.md",
        choices=list(POLICY_LOSS_NAMES),
    )
    ratio_level: str = option(
        "token",
        "importance ratio per token (PPO/GRPO) or per sequence (GSPO)",
        choices=list(RATIO_LEVELS),
    )
    clip_ratio_low: float = option(0.2, "lower clip: ratio >= 1 - clip_ratio_low", ge=0.0, lt=1.0)
    clip_ratio_high: float = option(
        0.2, "upper clip: ratio <= 1 + clip_ratio_high (DAPO: 0.28)", ge=0.0
    )
    dual_clip_c: float | None = option(
        None, "dual-clip bound c > 1 for negative advantages", gt=1.0
    )
    cispo_clip_low: float = option(
        1.0, "cispo: importance weight >= 1 - cispo_clip_low (1 = no lower bound)", ge=0.0
    )
    cispo_clip_high: float = option(4.0, "cispo: importance weight <= 1 + cispo_clip_high", ge=0.0)
    gmpo_clip_low: float = option(
        0.4, "gmpo: token log-ratio >= -gmpo_clip_low (ratio >= e^-0.4 in the paper)", ge=0.0
    )
    gmpo_clip_high: float = option(0.4, "gmpo: token log-ratio <= gmpo_clip_high", ge=0.0)
    clip_cov_ratio: float = option(
        2e-4,
        "clip_cov: fraction of completion tokens (at least one) whose gradient is dropped",
        gt=0.0,
        le=1.0,
    )
    clip_cov_lb: float = option(1.0, "clip_cov: drop only tokens with covariance >= this")
    clip_cov_ub: float = option(5.0, "clip_cov: drop only tokens with covariance <= this")
    kl_cov_ratio: float = option(
        2e-3,
        "kl_cov: fraction of completion tokens (at least one), highest covariance first, that "
        "get the KL penalty (paper: 2e-3 for a 7B model, 2e-4 for 32B)",
        gt=0.0,
        le=1.0,
    )
    kl_cov_coef: float = option(1.0, "kl_cov: weight of the |log ratio| penalty", ge=0.0)
    kl_coef: float = option(
        0.0, "beta: weight of KL(policy || reference); 0 loads no reference", ge=0.0
    )
    kl_estimator: str = option("k3", "KL estimator", choices=list(KL_ESTIMATORS))
    kl_in_reward: bool = option(
        False,
        "fold the KL penalty into the reward instead of the loss (gae: each token's own KL in "
        "its reward, as PPO-RLHF)",
    )
    entropy_coef: float = option(0.0, "entropy bonus weight (loss - coef * entropy)", ge=0.0)
    dynamic_sampling: bool = option(False, "DAPO: drop zero-variance groups and resample to refill")
    max_sampling_rounds: int = option(
        3, "extra generation rounds allowed by dynamic sampling", ge=0
    )
    token_correction: str = option(
        "tis",
        "the per-token weight of the loss when the sampler's policy differs from the "
        "learner's (rollout.off_policy_steps=1, rollout.engine=vllm): tis = min(pi_old / "
        "pi_sampler, tis_cap) (truncated importance sampling); icepop = the ratio inside "
        "[1/tis_cap, tis_cap], 0 outside (the token masked)",
        choices=list(TOKEN_CORRECTION_NAMES),
    )
    tis_cap: float = option(
        2.0,
        "the cap C of algorithm.token_correction: tis truncates each token's weight at C, "
        "icepop masks the tokens whose ratio pi_old / pi_sampler leaves [1/C, C] (needs C > 1)",
        gt=0.0,
    )
    mis_cap: float = option(
        0.0,
        "masked importance sampling: drop (mask out of the loss) a sequence whose ratio "
        "prod_t pi_old / pi_sampler leaves [1/mis_cap, mis_cap], when the sampler's policy "
        "differs from the learner's; 0 = off",
        ge=0.0,
    )


@dataclass
class OptimizerConfig:
    lr: float = option(1e-4, "peak learning rate of AdamW", gt=0.0)
    weight_decay: float = option(0.0, "AdamW weight decay", ge=0.0)
    beta1: float = option(0.9, "AdamW beta1", ge=0.0, lt=1.0)
    beta2: float = option(0.99, "AdamW beta2", ge=0.0, lt=1.0)
    adam_eps: float = option(1e-8, "AdamW epsilon", gt=0.0)
    max_grad_norm: float = option(1.0, "gradient clipping by global norm (0 = off)", ge=0.0)
    warmup_steps: int = option(5, "linear warm-up, optimizer steps", ge=0)
    schedule: str = option(
        "constant", "learning-rate schedule after warm-up", choices=["constant", "linear", "cosine"]
    )
    min_lr_ratio: float = option(0.1, "final lr / peak lr for linear and cosine", ge=0.0, le=1.0)


@dataclass
class TrainingConfig:
    steps: int = option(60, "RL steps (one rollout batch each)", ge=0)
    seed: int = option(0, "seed of sampling and initialisation")
    ppo_epochs: int = option(1, "mu: optimisation passes over each rollout batch", ge=1)
    mini_batch_size: int = option(0, "sequences per optimizer step (0 = the whole batch)", ge=0)
    micro_batch_size: int = option(
        64, "sequences per forward/backward (gradient accumulation)", ge=1
    )
    max_consecutive_skips: int = option(
        3, "abort after this many optimizer updates in a row skipped for a NaN/inf", ge=1
    )
    token_budget: int = option(
        2048,
        "padding-free update: pack prompt+completion rows into micro-batches of at most this "
        "many tokens, block-diagonal attention (0 = off: padded micro-batches); "
        "docs/training-speed.md",
        ge=0,
    )
    logprob_chunk: int = option(
        1024, "packed update: completion positions projected to the vocabulary at a time", ge=1
    )
    share_prompts: bool = option(
        True,
        "packed update: the completions of one prompt attend to a single copy of it, so the "
        "prompt's tokens run once per unit instead of once per row (exact); "
        "docs/training-speed.md",
    )
    packed_attention: str = option(
        "auto",
        "packed update's attention: dense (a [W, W] mask per sequence), segments (each row's "
        "own causal attention, no mask: memory linear in the tokens), flex (FlexAttention, "
        "CUDA only), auto (dense up to width 384, and up to 4096 where the segments would "
        "attend over more pairs, as with long shared prompts; segments otherwise); "
        "docs/training-speed.md",
        choices=["auto", "dense", "segments", "flex"],
    )
    skip_zero_advantage: bool = option(
        True,
        "skip the forward/backward of rows whose advantage is 0 everywhere when their gradient "
        "is exactly zero (no KL loss term, no entropy bonus); entropy and clip statistics are "
        "then over the rows the update ran; docs/training-speed.md",
    )
    keep_freed_memory: bool = option(
        True,
        "policy on the CPU: keep the memory the process frees for reuse instead of returning "
        "it to the kernel (glibc malloc settings, process-wide), so the blocks each step frees "
        "and allocates again cost no page faults; docs/training-speed.md",
    )
    map_large_blocks_from: int = option(
        2048,
        "with keep_freed_memory: from this rollout.max_new_tokens on, blocks of 2 MiB or more "
        "are mapped and returned when freed instead of kept, so the heap's holes do not grow "
        "the peak at long rows (0 = never); docs/memory.md",
        ge=0,
    )


@dataclass
class EvalConfig:
    size: int = option(200, "held-out problems", ge=0)
    verifier: str | None = option(
        None,
        "what held-out accuracy is scored with (unset = reward.verifier); set a rule (e.g. "
        "exact_answer) when training on a learned reward or a judge",
    )
    every: int = option(20, "also evaluate every N steps during training (0 = off)", ge=0)
    before: bool = option(True, "evaluate the model before training")
    after: bool = option(True, "evaluate the model after training")
    t1_samples: int = option(
        4,
        "samples per problem at temperature 1 for pass1_t1 (0 with eval.k=0: greedy only, no "
        "temperature-1 pass)",
        ge=0,
    )
    max_new_tokens: int = option(
        0, "completion limit in evaluation (0 = rollout.max_new_tokens)", ge=0
    )
    k: int = option(0, "also report pass@k and maj@k from k samples at T=1 (0 = off)", ge=0)
    budgets: list[int] = option(
        [128, 256, 512], "report greedy accuracy within these token budgets"
    )


@dataclass
class LoggingConfig:
    report_to: list[str] = option(
        ["jsonl"],
        "metric sinks: jsonl (always written), tensorboard, wandb, mlflow",
        choices=["jsonl", "tensorboard", "wandb", "mlflow"],
    )
    wandb_project: str = option("rlvr", "W&B project name")
    wandb_mode: str = option(
        "offline", "W&B mode (offline needs no network)", choices=["offline", "online", "disabled"]
    )
    progress: bool = option(
        True, "progress on stderr: a bar on a terminal, else a plain line every ~5% of the steps"
    )
    samples_every: int = option(10, "write samples/step-N.jsonl every N steps (0 = off)", ge=0)


@dataclass
class CheckpointConfig:
    save_final: bool = option(True, "save the final model to RUN_DIR/final")
    every: int = option(0, "save RUN_DIR/checkpoints/step-N every N steps (0 = off)", ge=0)
    every_minutes: float = option(
        0.0, "also save when this many minutes passed since the last save (0 = off)", ge=0.0
    )
    keep_last: int = option(2, "periodic checkpoints kept", ge=1)
    deterministic: bool = option(
        False,
        "bit-reproducible runs: deterministic torch algorithms; the wall-clock "
        "metrics (time_*, tokens/s, memory) go to timings.jsonl so metrics.jsonl is identical "
        "across reruns and resumes",
    )


@dataclass
class DistributedConfig:
    strategy: str = option(
        "ddp",
        "data-parallel learners under torchrun (WORLD_SIZE > 1): ddp (replicated weights and "
        "optimizer, summed gradients) or fsdp (FSDP2: weights, gradients and AdamW state "
        "sharded over the ranks; a full copy of the weights is kept for generation)",
        choices=["ddp", "fsdp"],
    )
    backend: str = option(
        "auto",
        "torch.distributed backend of data-parallel learners under torchrun: auto = nccl on "
        "CUDA, gloo on CPU",
        choices=["auto", "gloo", "nccl"],
    )
    ray: bool = option(
        False, "rollout and reward workers as Ray actors; this process is the learner"
    )
    ray_address: str | None = option(
        None, "Ray cluster to join ('auto' = the running one); unset = start a local cluster"
    )
    ray_num_cpus: int | None = option(
        None, "CPUs of a local Ray cluster started by rlvr (unset = all)", ge=1
    )
    rollout_workers: int = option(2, "Ray rollout actors; each holds a copy of the policy", ge=1)
    reward_workers: int = option(1, "Ray actors that run the verifier", ge=1)
    cpus_per_worker: float = option(
        1.0, "CPUs Ray reserves for each rollout or reward actor", gt=0.0
    )
    gpus_per_rollout_worker: float = option(0.0, "GPUs Ray reserves for each rollout actor", ge=0.0)
    max_restarts: int = option(
        3, "times Ray restarts a dead worker; its batch is retried (same samples)", ge=0
    )


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)

    # TRL's GRPOConfig names of these settings: what an unknown key's suggestion looks up first
    FOREIGN_NAMES: ClassVar[Mapping[str, str]] = FOREIGN_NAMES

    def validate(self) -> None:
        """The checks across sections (`rlvr.config.checks.validate`)."""
        validate(self)


def all_keys(cls: type | None = None, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the tree `cls` (default: the RL run's `Config`)."""
    return leaf_keys(Config if cls is None else cls, prefix)


def describe(cls: type | None = None, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) for every leaf, in declaration order: the `--help` listing."""
    return describe_tree(Config if cls is None else cls, prefix)


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    schema: type | None = None,
    tree: dict | None = None,
    note: Callable[[str], None] | None = None,
) -> Any:
    """Read YAML (optional), apply dotted overrides, validate everything, return the tree.

    `schema` is the dataclass tree to build (default: the RL run's `Config`; `rlvr sft` and
    `rlvr sample` have their own). A schema class with a `validate(self)` method gets it called
    for cross-field checks. `tree` is a mapping to start from instead of a file (pipelines).

    For the RL run's `Config`, two readings say what they did in a line to `note` (default:
    stderr, "rlvr: note: ..."):
    - a file (or `tree`) whose top level holds TRL `GRPOConfig` keys (`num_generations: 8`,
      ...) has them translated into rlvr's sections (`rlvr.config.trl`), one line per key;
    - `data.path` set with `data.task` left out means `data.task=dataset` (the default task,
      addition, reads no file).
    """
    if schema is not None and schema is not Config:
        return load_tree(schema, path, overrides, tree=tree)
    say = note if note is not None else _note_on_stderr
    start = read_config_file(path) if path is not None else dict(tree or {})
    start = _sections(start, f"config file {path}" if path is not None else "config", say)
    merged = apply_overrides(Config, start, overrides)
    data = merged.get("data")
    if isinstance(data, dict) and data.get("path") is not None and "task" not in data:
        merged["data"] = {**data, "task": "dataset"}
        say("data.path is set, so data.task=dataset (the default task, addition, reads no file)")
    return build_tree(Config, merged)


def _note_on_stderr(line: str) -> None:
    print(f"rlvr: note: {line}", file=sys.stderr)


def _sections(tree: dict, label: str, note: Callable[[str], None]) -> dict:
    """A config file's sections; TRL keys at its top level translated into them."""
    names = {f for f in Config.__dataclass_fields__ if f != "FOREIGN_NAMES"}
    flat = {k: v for k, v in tree.items() if is_trl_key(k, v, names)}
    if not flat:
        return tree
    # a section that is not a mapping is left for build_tree's one-line error
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in tree.items() if k not in flat}
    for section, values in translate_trl(flat, label, note, all_keys()).items():
        mine = out.setdefault(section, {})
        if not isinstance(mine, dict):
            raise ConfigError(f"{label}: section '{section}' must be a mapping")
        both = sorted(set(mine) & set(values))
        if both:
            raise ConfigError(
                f"{label}: {section}.{both[0]} is set twice, by a TRL key and in {section}: "
                "keep one"
            )
        mine.update(values)
    return out
