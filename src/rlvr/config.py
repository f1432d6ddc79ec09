"""The typed configuration tree of a run.

One tree covers model, data, reward, rollout, algorithm, optimizer, training, evaluation, logging
and checkpointing. It is read from YAML, takes dotted `key=value` overrides from the command line,
and is validated before any work starts: an unknown key, a wrong type or a value out of range is a
one-line `ConfigError` that names the key and, where one is close, suggests the valid key.

Every field's metadata carries its help text and its constraints:
  help     one line shown by `rlvr train --help`
  choices  allowed values
  ge/gt/le/lt   numeric bounds
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.errors import ConfigError


def _f(default: Any, help: str, **constraints: Any) -> Any:
    """A dataclass field with help text and constraints in its metadata."""
    meta = {"help": help, **constraints}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelConfig:
    name_or_path: str = _f(
        "embedded",
        "HF causal LM: a local directory or a hub id; 'embedded' is the built-in tiny base "
        "model, 'embedded-small' its 4x smaller sibling",
    )
    dtype: str = _f(
        "auto",
        "auto = fp32 on CPU, bf16 on CUDA",
        choices=["auto", "float32", "bfloat16", "float16"],
    )
    device: str = _f("auto", "auto = cuda if available, else cpu", choices=["auto", "cpu", "cuda"])
    chat_template: str = _f(
        "auto",
        "auto = apply the tokenizer's chat template when it has one (instruct models)",
        choices=["auto", "always", "never"],
    )
    trust_remote_code: bool = _f(False, "passed to transformers Auto classes")
    gradient_checkpointing: bool = _f(False, "trade compute for memory in the policy update")
    gguf_file: str | None = _f(
        None, "GGUF weights inside name_or_path (loaded through transformers; needs 'gguf')"
    )
    lora_rank: int = _f(0, "LoRA rank r (0 = full fine-tuning); needs the 'lora' extra", ge=0)
    lora_alpha: float = _f(16.0, "LoRA scaling alpha (update scale alpha / r)", gt=0.0)
    lora_dropout: float = _f(0.0, "dropout on the LoRA input", ge=0.0, lt=1.0)
    lora_target_modules: list[str] = _f(
        ["all-linear"], "modules that get adapters: 'all-linear' or names like q_proj, v_proj"
    )


@dataclass
class DataConfig:
    task: str = _f(
        "addition",
        "built-in procedural task (addition, arithmetic, countdown), 'gym' for a reasoning-gym "
        "generator (the 'gym' extra), or 'dataset' to read data.path; see docs/tasks.md",
        choices=["addition", "arithmetic", "countdown", "gym", "dataset"],
    )
    digits: int = _f(3, "operand digits of the addition task", ge=1, le=12)
    level: int = _f(1, "arithmetic: difficulty level to start at (1-8, docs/tasks.md)", ge=1, le=8)
    max_level: int = _f(8, "arithmetic: highest level of the schedule and of held-out", ge=1, le=8)
    difficulty: str = _f(
        "fixed",
        "arithmetic schedule: fixed (data.level), linear (data.level -> data.max_level over the "
        "run), adaptive (one level up when the mean reward at the level reaches data.promote_at)",
        choices=["fixed", "linear", "adaptive"],
    )
    promote_at: float = _f(
        0.8, "arithmetic adaptive: mean reward over the window that promotes", gt=0.0, le=1.0
    )
    promote_window: int = _f(
        64, "arithmetic adaptive: rewards (completions) averaged at the current level", ge=1
    )
    countdown_min_numbers: int = _f(3, "countdown: fewest numbers in a problem", ge=2, le=8)
    countdown_max_numbers: int = _f(4, "countdown: most numbers in a problem", ge=2, le=8)
    countdown_max_value: int = _f(100, "countdown: numbers are drawn from 1..this", ge=1, le=10000)
    countdown_max_target: int = _f(
        1000, "countdown: targets are at most this (larger ones are redrawn)", ge=1
    )
    gym_name: str | None = _f(None, "reasoning-gym dataset name, e.g. basic_arithmetic (task=gym)")
    gym_config: list[str] = _f(
        [], "reasoning-gym generator settings as KEY=VALUE items, e.g. [min_terms=2,max_terms=3]"
    )
    gym_size: int = _f(100_000, "reasoning-gym: entries training draws from", ge=1)
    path: str | None = _f(
        None,
        "prompt dataset: .jsonl/.json/.csv/.parquet, a saved HF dataset "
        "directory, or a hub name (data.task=dataset)",
    )
    eval_path: str | None = _f(None, "held-out dataset (default: split off data.eval_fraction)")
    eval_fraction: float = _f(0.1, "share of data.path held out when no eval_path", ge=0.0, lt=1.0)
    prompt_field: str = _f("prompt", "dataset column holding the prompt")
    answer_field: str = _f("answer", "dataset column holding the reference answer")
    tests_field: str = _f("tests", "dataset column holding code tests")
    system_field: str = _f("system", "dataset column holding a per-row system message")
    source_field: str = _f("source", "dataset column naming the row's source (per-source eval)")
    max_prompt_tokens: int = _f(0, "drop prompts longer than this many tokens (0 = keep all)", ge=0)
    system_prompt: str | None = _f(None, "system message, used only with a chat template")
    prompt_template: str | None = _f(
        None,
        "plain template around every prompt, e.g. 'Q: {prompt}\\nA:'; other {field}s of the "
        "sample may appear (docs/data.md)",
    )
    seed: int = _f(0, "seed of the prompt stream")

    def validate(self) -> None:
        """Checks across data fields (the tasks' own settings)."""
        if self.prompt_template is not None:
            from rlvr.data.template import check_template

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


@dataclass
class RewardConfig:
    verifier: str = _f(
        "exact_answer",
        "exact_answer, math, code, format, language, countdown, gym, 'module:function', "
        "'path/file.py:function', "
        "or a weighted sum like 'math:1.0,format:0.1'",
    )
    workers: int = _f(0, "verifier worker processes (0 = score in the trainer process)", ge=0)
    timeout_s: float = _f(10.0, "per-sample limit in the worker pool, seconds", gt=0.0)
    overlong_buffer: int = _f(
        0, "DAPO overlong shaping: penalty buffer before rollout.max_new_tokens (0 = off)", ge=0
    )
    overlong_penalty_factor: float = _f(1.0, "DAPO overlong shaping: maximal penalty", ge=0.0)
    mask_truncated: bool = _f(False, "drop truncated completions from the loss (DAPO)")


@dataclass
class RolloutConfig:
    engine: str = _f(
        "fast",
        "generation engine: fast (static KV cache, prefix sharing, continuous batching; Llama, "
        "Mistral, Qwen2, else it falls back to hf) or hf (the reference loop); docs/rollout.md",
        choices=["hf", "fast"],
    )
    prompts_per_step: int = _f(16, "prompts drawn per step", ge=1)
    group_size: int = _f(8, "completions per prompt (G)", ge=1)
    temperature: float = _f(1.0, "sampling temperature (0 = greedy)", ge=0.0)
    top_p: float = _f(1.0, "nucleus sampling threshold (1 = off)", gt=0.0, le=1.0)
    top_k: int = _f(0, "top-k sampling (0 = off)", ge=0)
    max_new_tokens: int = _f(64, "completion length limit, tokens", ge=1)
    stop: list[str] = _f([], "extra stop strings (EOS always stops)")
    max_batch_size: int = _f(256, "rows decoded together", ge=1)
    off_policy_steps: int = _f(
        0,
        "0 = on-policy; 1 = generate the next batch while the current one trains (one step "
        "stale, corrected by truncated importance sampling; docs/distributed.md)",
        ge=0,
        le=1,
    )


@dataclass
class AlgorithmConfig:
    advantage: str = _f(
        "grpo",
        "advantage estimator",
        choices=["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"],
    )
    std: str = _f(
        "population",
        "grpo std: population (1/G) or sample (1/(G-1))",
        choices=["population", "sample"],
    )
    eps: float = _f(1e-6, "added to the std in z-scores", ge=0.0)
    loss_aggregation: str = _f(
        "seq_mean_token_mean",
        "seq_mean_token_mean (GRPO), token_mean (DAPO), seq_mean_token_sum_norm (Dr. GRPO)",
        choices=["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"],
    )
    ratio_level: str = _f(
        "token",
        "importance ratio per token (PPO/GRPO) or per sequence (GSPO)",
        choices=["token", "sequence"],
    )
    clip_ratio_low: float = _f(0.2, "lower clip: ratio >= 1 - clip_ratio_low", ge=0.0, lt=1.0)
    clip_ratio_high: float = _f(
        0.2, "upper clip: ratio <= 1 + clip_ratio_high (DAPO: 0.28)", ge=0.0
    )
    dual_clip_c: float | None = _f(None, "dual-clip bound c > 1 for negative advantages", gt=1.0)
    kl_coef: float = _f(
        0.0, "beta: weight of KL(policy || reference); 0 loads no reference", ge=0.0
    )
    kl_estimator: str = _f("k3", "KL estimator", choices=["k1", "k2", "k3"])
    kl_in_reward: bool = _f(False, "fold the KL penalty into the reward instead of the loss")
    entropy_coef: float = _f(0.0, "entropy bonus weight (loss - coef * entropy)", ge=0.0)
    dynamic_sampling: bool = _f(False, "DAPO: drop zero-variance groups and resample to refill")
    max_sampling_rounds: int = _f(3, "extra generation rounds allowed by dynamic sampling", ge=0)
    tis_cap: float = _f(
        2.0,
        "truncated importance sampling: each token's loss is weighted by min(pi_old / "
        "pi_sampler, tis_cap) when the sampler's policy differs from the learner's "
        "(rollout.off_policy_steps=1)",
        gt=0.0,
    )


@dataclass
class OptimizerConfig:
    lr: float = _f(1e-4, "peak learning rate of AdamW", gt=0.0)
    weight_decay: float = _f(0.0, "AdamW weight decay", ge=0.0)
    beta1: float = _f(0.9, "AdamW beta1", ge=0.0, lt=1.0)
    beta2: float = _f(0.99, "AdamW beta2", ge=0.0, lt=1.0)
    adam_eps: float = _f(1e-8, "AdamW epsilon", gt=0.0)
    max_grad_norm: float = _f(1.0, "gradient clipping by global norm (0 = off)", ge=0.0)
    warmup_steps: int = _f(5, "linear warm-up, optimizer steps", ge=0)
    schedule: str = _f(
        "constant", "learning-rate schedule after warm-up", choices=["constant", "linear", "cosine"]
    )
    min_lr_ratio: float = _f(0.1, "final lr / peak lr for linear and cosine", ge=0.0, le=1.0)


@dataclass
class TrainingConfig:
    steps: int = _f(60, "RL steps (one rollout batch each)", ge=0)
    seed: int = _f(0, "seed of sampling and initialisation")
    ppo_epochs: int = _f(1, "mu: optimisation passes over each rollout batch", ge=1)
    mini_batch_size: int = _f(0, "sequences per optimizer step (0 = the whole batch)", ge=0)
    micro_batch_size: int = _f(64, "sequences per forward/backward (gradient accumulation)", ge=1)
    max_consecutive_skips: int = _f(
        3, "abort after this many optimizer updates in a row skipped for a NaN/inf", ge=1
    )
    token_budget: int = _f(
        2048,
        "padding-free update: pack prompt+completion rows into micro-batches of at most this "
        "many tokens, block-diagonal attention (0 = off: padded micro-batches); "
        "docs/training-speed.md",
        ge=0,
    )
    logprob_chunk: int = _f(
        1024, "packed update: completion positions projected to the vocabulary at a time", ge=1
    )
    share_prompts: bool = _f(
        True,
        "packed update: the completions of one prompt attend to a single copy of it, so the "
        "prompt's tokens run once per unit instead of once per row (exact); "
        "docs/training-speed.md",
    )
    skip_zero_advantage: bool = _f(
        True,
        "skip the forward/backward of rows whose advantage is 0 everywhere when their gradient "
        "is exactly zero (no KL loss term, no entropy bonus); entropy and clip statistics are "
        "then over the rows the update ran; docs/training-speed.md",
    )
    keep_freed_memory: bool = _f(
        True,
        "policy on the CPU: keep the memory the process frees for reuse instead of returning "
        "it to the kernel (glibc malloc settings, process-wide), so the blocks each step frees "
        "and allocates again cost no page faults; docs/training-speed.md",
    )


@dataclass
class EvalConfig:
    size: int = _f(200, "held-out problems", ge=0)
    every: int = _f(20, "also evaluate every N steps during training (0 = off)", ge=0)
    before: bool = _f(True, "evaluate the model before training")
    after: bool = _f(True, "evaluate the model after training")
    t1_samples: int = _f(4, "samples per problem at temperature 1 for pass1_t1", ge=1)
    max_new_tokens: int = _f(0, "completion limit in evaluation (0 = rollout.max_new_tokens)", ge=0)
    k: int = _f(0, "also report pass@k and maj@k from k samples at T=1 (0 = off)", ge=0)
    budgets: list[int] = _f([128, 256, 512], "report greedy accuracy within these token budgets")


@dataclass
class LoggingConfig:
    report_to: list[str] = _f(
        ["jsonl"],
        "metric sinks: jsonl (always written), tensorboard, wandb, mlflow",
        choices=["jsonl", "tensorboard", "wandb", "mlflow"],
    )
    wandb_project: str = _f("rlvr", "W&B project name")
    wandb_mode: str = _f(
        "offline", "W&B mode (offline needs no network)", choices=["offline", "online", "disabled"]
    )
    progress: bool = _f(True, "progress bar when stderr is a terminal")
    samples_every: int = _f(10, "write samples/step-N.jsonl every N steps (0 = off)", ge=0)


@dataclass
class CheckpointConfig:
    save_final: bool = _f(True, "save the final model to RUN_DIR/final")
    every: int = _f(0, "save RUN_DIR/checkpoints/step-N every N steps (0 = off)", ge=0)
    every_minutes: float = _f(
        0.0, "also save when this many minutes passed since the last save (0 = off)", ge=0.0
    )
    keep_last: int = _f(2, "periodic checkpoints kept", ge=1)
    deterministic: bool = _f(
        False,
        "bit-reproducible runs: deterministic torch algorithms; in rlvr train the wall-clock "
        "metrics (time_*, tokens/s, memory) go to timings.jsonl so metrics.jsonl is identical "
        "across reruns and resumes",
    )


@dataclass
class DistributedConfig:
    strategy: str = _f(
        "ddp",
        "data-parallel learners under torchrun (WORLD_SIZE > 1): ddp (replicated weights and "
        "optimizer, summed gradients) or fsdp (FSDP2: weights, gradients and AdamW state "
        "sharded over the ranks; a full copy of the weights is kept for generation)",
        choices=["ddp", "fsdp"],
    )
    backend: str = _f(
        "auto",
        "torch.distributed backend of data-parallel learners under torchrun: auto = nccl on "
        "CUDA, gloo on CPU",
        choices=["auto", "gloo", "nccl"],
    )
    ray: bool = _f(False, "rollout and reward workers as Ray actors; this process is the learner")
    ray_address: str | None = _f(
        None, "Ray cluster to join ('auto' = the running one); unset = start a local cluster"
    )
    ray_num_cpus: int | None = _f(
        None, "CPUs of a local Ray cluster started by rlvr (unset = all)", ge=1
    )
    rollout_workers: int = _f(2, "Ray rollout actors; each holds a copy of the policy", ge=1)
    reward_workers: int = _f(1, "Ray actors that run the verifier", ge=1)
    cpus_per_worker: float = _f(1.0, "CPUs Ray reserves for each rollout or reward actor", gt=0.0)
    gpus_per_rollout_worker: float = _f(0.0, "GPUs Ray reserves for each rollout actor", ge=0.0)
    max_restarts: int = _f(
        3, "times Ray restarts a dead worker; its batch is retried (same samples)", ge=0
    )


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)


# ---------------------------------------------------------------------------------------------
# Building and validating


def all_keys(cls: type = None, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the tree, e.g. 'rollout.group_size'."""
    cls = Config if cls is None else cls
    keys = []
    for f in dataclasses.fields(cls):
        sub = _dataclass_type(cls, f)
        if sub is not None:
            keys += all_keys(sub, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    # `from __future__ import annotations` makes annotations strings; resolve them once.
    return typing.get_type_hints(cls)


def _dataclass_type(cls: type, f: dataclasses.Field) -> type | None:
    hint = _field_types(cls)[f.name]
    return hint if dataclasses.is_dataclass(hint) else None


def _suggest(key: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not close:
        # Also match on the last component, so 'rollout.groupsize' finds 'rollout.group_size'.
        tails = {c.rsplit(".", 1)[-1]: c for c in candidates}
        hit = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(tails), n=1, cutoff=0.75)
        close = [tails[hit[0]]] if hit else []
    return f"; did you mean '{close[0]}'?" if close else ""


def type_name(hint: Any) -> str:
    """A type hint in words, as errors and the config reference show it: 'int', 'str or null',
    'list of str'."""
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))
    if origin is not None:
        return f"{origin.__name__} of {', '.join(type_name(a) for a in typing.get_args(hint))}"
    return getattr(hint, "__name__", str(hint))


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Check `value` against the type `hint`; ints are accepted where floats are expected."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")
        (item,) = typing.get_args(hint)
        return [_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(
                    f"{key}: expected {type_name(hint)}, got an integer out of float range"
                ) from None
        if isinstance(value, str):  # YAML 1.1 reads '3e-4' (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        raise TypeError(f"unsupported config type {hint!r} for {key}")
    raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")


def _check_constraints(key: str, value: Any, meta: typing.Mapping[str, Any]) -> None:
    if value is None:
        return
    choices = meta.get("choices")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_constraints(f"{key}[{i}]", item, meta)
        return
    if choices is not None and value not in choices:
        hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        raise ConfigError(
            f"{key}: expected one of {', '.join(map(str, choices))}, got {value!r}{extra}"
        )
    for op, test, word in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        if op in meta and not test(value, meta[op]):
            raise ConfigError(f"{key}: must be {word} {meta[op]}, got {value!r}")


def _build(cls: type, data: Any, prefix: str, root: type | None = None) -> Any:
    root = root or cls
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if name not in fields:
            full = f"{prefix}{name}"
            raise ConfigError(f"unknown config key {full!r}{_suggest(full, all_keys(root))}")
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        sub = _dataclass_type(cls, f)
        if sub is not None:
            kwargs[name] = _build(sub, data.get(name), key + ".", root)
        elif name in data:
            value = _coerce(key, data[name], _field_types(cls)[name])
            _check_constraints(key, value, f.metadata)
            kwargs[name] = value
    return cls(**kwargs)


def parse_override(text: str) -> tuple[str, Any]:
    """'rollout.group_size=4' -> ('rollout.group_size', 4); values are parsed as YAML scalars."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. rollout.group_size=4")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError, ValueError, AttributeError, TypeError, KeyError):
        # Not a YAML scalar: a tag PyYAML cannot apply ('!!int x', '!!bool maybe') or an int
        # over Python's 4300-digit limit. Keep the text; the key's type check reports it.
        value = raw
    return key, value


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{'.'.join(parts[: i + 1])}' is not a section")
        node = child
    node[parts[-1]] = value


def read_yaml(path: Path, label: str) -> Any:
    """Parse a YAML file; every way it can be unreadable is a one-line ConfigError starting
    with `label` (e.g. "config file run.yaml")."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{label}{where}: invalid YAML") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{label}: not UTF-8 text (byte {e.start}); expected a UTF-8 YAML file"
        ) from None
    except RecursionError:
        raise ConfigError(f"{label}: not valid YAML (nested too deeply)") from None
    except (ValueError, AttributeError, TypeError, KeyError) as e:
        # PyYAML's constructors let these escape: a tag it cannot apply ('!!int x',
        # '!!timestamp x', '!!bool maybe'), an int over Python's 4300-digit limit.
        reason = " ".join(str(e).split())[:200]
        if isinstance(e, KeyError):
            reason = f"a tagged value it cannot read: {reason}"
        raise ConfigError(f"{label}: not valid YAML ({reason})") from None


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    schema: type | None = None,
    tree: dict | None = None,
) -> Any:
    """Read YAML (optional), apply dotted overrides, validate everything, return the tree.

    `schema` is the dataclass tree to build (default: the RL run's `Config`; `rlvr sft` and
    `rlvr sample` have their own). A schema class with a `validate(self)` method gets it called
    for cross-field checks. `tree` is a mapping to start from instead of a file (pipelines).
    """
    schema = Config if schema is None else schema
    tree = dict(tree or {})
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p}: not found")
        tree = read_yaml(p, f"config file {p}") or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"config file {p}: expected a mapping of sections at the top level")
    valid = set(all_keys(schema))
    for text in overrides or []:
        key, value = parse_override(text)
        if key not in valid:
            raise ConfigError(f"unknown config key {key!r}{_suggest(key, sorted(valid))}")
        _set_dotted(tree, key, value)
    cfg = _build(schema, tree, "")
    if schema is Config:
        validate(cfg)
    elif hasattr(cfg, "validate"):
        cfg.validate()
    return cfg


def validate(cfg: Config) -> None:
    """Checks that involve more than one field."""
    g = cfg.rollout.group_size
    if cfg.algorithm.advantage in ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline") and g < 2:
        raise ConfigError(
            f"rollout.group_size: {cfg.algorithm.advantage} compares completions within a group, "
            f"so it needs group_size >= 2, got {g}"
        )
    batch = cfg.rollout.prompts_per_step * g
    mb = cfg.training.mini_batch_size
    if mb and batch % mb:
        raise ConfigError(
            f"training.mini_batch_size: must divide prompts_per_step * group_size = {batch}, "
            f"got {mb}"
        )
    if mb and mb % g:
        raise ConfigError(
            f"training.mini_batch_size: must be a multiple of rollout.group_size = {g}, got {mb}"
        )
    if cfg.data.task == "dataset" and not cfg.data.path:
        raise ConfigError("data.path: required when data.task is 'dataset'")
    if cfg.reward.overlong_buffer >= cfg.rollout.max_new_tokens:
        raise ConfigError(
            f"reward.overlong_buffer: must be < rollout.max_new_tokens = "
            f"{cfg.rollout.max_new_tokens}, got {cfg.reward.overlong_buffer}"
        )
    if cfg.algorithm.kl_in_reward and cfg.algorithm.kl_coef == 0:
        raise ConfigError("algorithm.kl_in_reward: needs algorithm.kl_coef > 0")
    cfg.data.validate()
    validate_model(cfg.model)


def validate_model(model: ModelConfig) -> None:
    """Checks of the model section shared by every command that trains one."""
    if model.gguf_file and model.name_or_path.startswith("embedded"):
        raise ConfigError("model.gguf_file: set model.name_or_path to the directory holding it")


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe(cls: type | None = None, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) for every leaf, in declaration order: the `--help` listing."""
    cls = Config if cls is None else cls
    rows = []
    instance = cls()
    for f in dataclasses.fields(cls):
        sub = _dataclass_type(cls, f)
        if sub is not None:
            rows += describe(sub, f"{prefix}{f.name}.")
        else:
            rows.append((prefix + f.name, getattr(instance, f.name), f.metadata.get("help", "")))
    return rows
