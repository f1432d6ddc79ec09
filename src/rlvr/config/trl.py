"""TRL's names for rlvr's settings: suggestions for a mistyped key, and a GRPOConfig-style YAML.

`FOREIGN_NAMES` maps a TRL `GRPOConfig` (or TRL script) name to the rlvr key that holds the
same setting, so `rollout.num_generations=8` suggests `rollout.group_size`, not the nearest
spelling. `translate_trl` turns the flat top level of a TRL config file (`num_generations: 8`,
`learning_rate: 1.0e-6`, ...) into rlvr's sections, one note per key saying what it became:

- a key with an rlvr equivalent is translated (a value rlvr does not have, such as
  `scale_rewards: batch`, is an error naming the key and the values it takes);
- TRL's batch keys (`per_device_train_batch_size`, `gradient_accumulation_steps`,
  `steps_per_generation`, `generation_batch_size`) become prompts per step, the optimizer step's
  mini-batch and the micro-batch, TRL's defaults standing in for the ones not given; TRL's
  `max_steps` counts optimizer steps, so it is divided by the updates each RL step makes;
- keys that change only where TRL logs or saves (`logging_steps`, `output_dir`, `push_to_hub`:
  false, ...), and features rlvr lacks left at TRL's default (`min_p: null`,
  `sync_ref_model: false`, ...), are ignored with a note;
- any other key is one error naming every such key.

Only the keys the file sets are translated: TRL's defaults for the others are not imposed
(rlvr's defaults apply; docs/guides/migrate-from-trl.md compares the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import ConfigError

# TRL name -> the rlvr key of the same setting (suggestions; `translate_trl` does the values)
FOREIGN_NAMES: dict[str, str] = {
    "num_generations": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "max_prompt_length": "data.max_prompt_tokens",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "top_k": "rollout.top_k",
    "beta": "algorithm.kl_coef",
    "epsilon": "algorithm.clip_ratio_low",
    "epsilon_high": "algorithm.clip_ratio_high",
    "delta": "algorithm.dual_clip_c",
    "num_iterations": "training.ppo_epochs",
    "importance_sampling_level": "algorithm.ratio_level",
    "mask_truncated_completions": "reward.mask_truncated",
    "entropy_coef": "algorithm.entropy_coef",
    "scale_rewards": "algorithm.advantage",
    "loss_type": "algorithm.loss_aggregation",
    "learning_rate": "optimizer.lr",
    "lr_scheduler_type": "optimizer.schedule",
    "warmup_steps": "optimizer.warmup_steps",
    "warmup_ratio": "optimizer.warmup_steps",
    "adam_beta1": "optimizer.beta1",
    "adam_beta2": "optimizer.beta2",
    "adam_epsilon": "optimizer.adam_eps",
    "weight_decay": "optimizer.weight_decay",
    "max_grad_norm": "optimizer.max_grad_norm",
    "max_steps": "training.steps",
    "num_train_epochs": "training.steps",
    "per_device_train_batch_size": "training.micro_batch_size",
    "gradient_accumulation_steps": "training.mini_batch_size",
    "steps_per_generation": "training.mini_batch_size",
    "generation_batch_size": "rollout.prompts_per_step",
    "seed": "training.seed",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "trust_remote_code": "model.trust_remote_code",
    "log_completions": "logging.samples_every",
    "save_steps": "checkpoint.every",
    "save_total_limit": "checkpoint.keep_last",
    "report_to": "logging.report_to",
    "use_vllm": "rollout.engine",
    "vllm_gpu_memory_utilization": "rollout.vllm_gpu_memory_utilization",
    "vllm_max_model_length": "rollout.vllm_max_model_len",
    "vllm_enable_sleep_mode": "rollout.vllm_sleep",
    "bf16": "model.precision",
    # TRL's example scripts read these from the same YAML (ModelConfig, ScriptArguments)
    "model_name_or_path": "model.name_or_path",
    "dataset_name": "data.path",
    "torch_dtype": "model.dtype",
    "dtype": "model.dtype",
    "lora_r": "model.lora_rank",
    "lora_alpha": "model.lora_alpha",
    "lora_dropout": "model.lora_dropout",
    "lora_target_modules": "model.lora_target_modules",
}

# Copied as they are: TRL name -> rlvr key (a null value leaves the rlvr default)
SAME = {
    name: FOREIGN_NAMES[name]
    for name in (
        "num_generations",
        "max_completion_length",
        "temperature",
        "top_p",
        "beta",
        "epsilon_high",
        "num_iterations",
        "importance_sampling_level",
        "mask_truncated_completions",
        "entropy_coef",
        "learning_rate",
        "warmup_steps",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "weight_decay",
        "max_grad_norm",
        "seed",
        "gradient_checkpointing",
        "trust_remote_code",
        "save_total_limit",
        "vllm_gpu_memory_utilization",
        "vllm_enable_sleep_mode",
        "model_name_or_path",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
    )
}

# Ignored: where TRL logs, saves or uploads, or how it batches its data loader (rlvr writes
# every step to metrics.jsonl and draws prompts itself). Name -> why, in a few words.
IGNORED = {
    "output_dir": "the run directory is --output-dir, output_dir= in Python",
    "overwrite_output_dir": "--overwrite says it",
    "run_name": "the run is named by its directory",
    "logging_steps": "rlvr logs every step to metrics.jsonl",
    "logging_first_step": "rlvr logs every step",
    "logging_strategy": "rlvr logs every step",
    "logging_dir": "rlvr logs into the run directory",
    "log_level": "rlvr's output is its progress and notes",
    "disable_tqdm": "--quiet turns the progress off",
    "save_strategy": "checkpoint.every (from save_steps) says when",
    "eval_strategy": "rlvr evaluates by eval.every",
    "do_train": "rlvr train trains",
    "do_eval": "rlvr evaluates by eval.*",
    "remove_unused_columns": "every column reaches the verifier",
    "dataloader_num_workers": "rlvr draws prompts itself",
    "dataloader_pin_memory": "rlvr draws prompts itself",
    "dataloader_drop_last": "rlvr draws prompts itself",
    "shuffle_dataset": "rlvr draws prompts at random (data.seed)",
    "pad_to_multiple_of": "rlvr packs rows (training.token_budget)",
    "ds3_gather_for_generation": "no DeepSpeed: torchrun with DDP or FSDP2",
    "num_completions_to_print": "completions go to samples/step-N.jsonl",
    "log_unique_prompts": "completions go to samples/step-N.jsonl",
    "log_multimodal": "text only",
    "log_completions_hub_repo": "no upload",
    "vllm_mode": "rlvr runs vLLM in this process (TRL's colocate)",
    "vllm_model_impl": "rlvr loads the model through vLLM as it is",
    "vllm_importance_sampling_correction": "rlvr corrects a vLLM sampler by token_correction",
    "vllm_importance_sampling_mode": "rlvr corrects a vLLM sampler by token_correction",
    "vllm_importance_sampling_cap": "the cap is algorithm.tis_cap",
    "vllm_importance_sampling_clip_max": "the cap is algorithm.tis_cap",
    "vllm_importance_sampling_clip_min": "the cap is algorithm.tis_cap",
    "use_bias_correction_kl": "rlvr does not weight the KL term by the ratio",
    "gradient_checkpointing_kwargs": "model.gradient_checkpointing is on or off",
    "attn_implementation": "rlvr chooses the attention (training.packed_attention)",
    "dataset_train_split": "a dataset file is one split (data.eval_path for the held-out one)",
    "dataset_config": "name the dataset's file or directory in data.path",
    "use_peft": "lora_r sets model.lora_rank",
    "tf32": "torch's default matmul precision is kept",
    "save_only_model": "checkpoints hold what a resume needs",
    "push_to_hub": "no upload",
    "hub_model_id": "no upload",
}

# Features rlvr lacks: fine at TRL's value that turns them off, an error at any other.
OFF_AT = {
    "min_p": None,
    "repetition_penalty": 1.0,
    "generation_kwargs": None,
    "chat_template_kwargs": None,
    "cache_implementation": None,
    "top_entropy_quantile": 1.0,
    "use_adaptive_entropy": False,
    "sync_ref_model": False,
    "multi_objective_aggregation": "sum_then_normalize",
    "off_policy_mask_threshold": None,
    "max_tool_calling_iterations": None,
    "use_transformers_paged": False,
    "use_transformers_continuous_batching": False,
    "vllm_structured_outputs_regex": None,
    "reward_weights": None,
    "num_generations_eval": None,
    "model_init_kwargs": None,
    "cast_lm_head_to_fp32": False,
    "disable_dropout": False,
    "use_liger_kernel": False,
    "torch_compile": False,
    "fp16": False,
    "vllm_tensor_parallel_size": 1,
}

BATCH_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "generation_batch_size",
)
TRL_BATCH_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
TRL_NUM_GENERATIONS = 8
SCALE_REWARDS = {  # TRL's scale_rewards -> rlvr's algorithm keys
    "group": {"advantage": "grpo", "std": "sample", "eps": 1e-4},
    True: {"advantage": "grpo", "std": "sample", "eps": 1e-4},
    "none": {"advantage": "dr_grpo"},
    False: {"advantage": "dr_grpo"},
}
LOSS_TYPES = {
    "grpo": "seq_mean_token_mean",
    "dapo": "token_mean",
    "bnpo": "token_mean",  # TRL: the micro-batch's tokens; rlvr: the mini-batch's
    "dr_grpo": "seq_mean_token_sum_norm",
}
SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}
REPORT_TO = {"tensorboard", "wandb", "mlflow"}

Note = Callable[[str], None]


def is_trl_key(name: str, value: Any, sections: set[str]) -> bool:
    """Whether a top-level key of a config file is TRL's rather than one of rlvr's sections: a
    name TRL uses, or any scalar or list (rlvr's top level holds only sections)."""
    if name in sections:
        return False  # a section, even a malformed one (reported as such when it is read)
    known = FOREIGN_NAMES.keys() | IGNORED.keys() | OFF_AT.keys()
    return name in known or not isinstance(value, dict)


def translate_trl(
    flat: Mapping[str, Any], label: str, note: Note, leaf_keys: list[str]
) -> dict[str, dict[str, Any]]:
    """rlvr's sections for the TRL keys `flat` (the flat part of config file `label`); `note`
    gets one line per key. Every key rlvr cannot honour is named in one ConfigError."""
    out: dict[str, dict[str, Any]] = {}
    unknown, unsupported = [], []

    def put(
        keys: Mapping[str, Any] | str, value: Any, names: str | list[str], why: str = ""
    ) -> None:
        """Set rlvr's `keys` ({key: value}, or one key and its `value`) from TRL's `names` (one,
        or several read together) and say so in one line."""
        keys = {keys: value} if isinstance(keys, str) else keys
        for key, v in keys.items():
            section, leaf = key.split(".")
            out.setdefault(section, {})[leaf] = v
        read = [names] if isinstance(names, str) else names
        given = ", ".join(f"{n}: {_show(flat[n])}" for n in read)
        became = ", ".join(f"{key}={_show(v)}" for key, v in keys.items())
        note(f"{label}: TRL's {given} -> {became}{why}")

    for name, value in flat.items():
        if name in SAME:
            if value is not None:
                put(SAME[name], value, name)
        elif name in IGNORED:
            note(f"{label}: TRL's {name}: ignored ({IGNORED[name]})")
        elif name in OFF_AT:
            if _off(value, OFF_AT[name]):
                note(f"{label}: TRL's {name}: {_show(value)} ignored (off, as in rlvr)")
            else:
                unsupported.append(name)
        elif name not in FOREIGN_NAMES:
            unknown.append(name)
    if unknown:
        raise ConfigError(
            f"{label}: {', '.join(map(_key, unknown))}: neither a section of rlvr's config "
            "nor a TRL "
            f"setting rlvr translates{_nearest(unknown[0], leaf_keys)} "
            "(docs/guides/migrate-from-trl.md)"
        )
    if unsupported:
        shown = ", ".join(f"{n}={_show(flat[n])}" for n in unsupported)
        raise ConfigError(
            f"{label}: TRL's {shown}: rlvr has no equivalent (remove the key, or set it to "
            "TRL's default; docs/guides/migrate-from-trl.md)"
        )
    _translate_special(flat, label, put, note)
    return out


def _key(name: object) -> str:
    """A key as an error shows it: quoted when it is not a plain identifier (a mistyped key
    may hold spaces or line breaks; YAML keys may be numbers or null)."""
    return name if isinstance(name, str) and name.isidentifier() else repr(name)


def _translate_special(
    flat: Mapping[str, Any], label: str, put: Callable[..., None], note: Note
) -> None:
    """The TRL keys whose value changes on the way, or that set more than one rlvr key."""

    def pick(name: str, table: Mapping[Any, Any]) -> Any:
        value = flat[name]
        if value not in table:
            choices = ", ".join(sorted({str(k) for k in table}))
            raise ConfigError(
                f"{label}: TRL's {name}: {_show(value)} has no rlvr equivalent; rlvr "
                f"translates {choices} (docs/guides/migrate-from-trl.md)"
            )
        return table[value]

    if flat.get("top_k") is not None:
        put("rollout.top_k", flat["top_k"], "top_k")
    if flat.get("epsilon") is not None:
        clip = {"algorithm.clip_ratio_low": flat["epsilon"]}
        if flat.get("epsilon_high") is None:  # TRL: epsilon_high defaults to epsilon
            clip["algorithm.clip_ratio_high"] = flat["epsilon"]
        put(clip, None, "epsilon")
    if flat.get("delta") is not None:
        put("algorithm.dual_clip_c", flat["delta"], "delta", " (caps the loss, not the ratio)")
    if "scale_rewards" in flat:
        scaled = {f"algorithm.{k}": v for k, v in pick("scale_rewards", SCALE_REWARDS).items()}
        put(scaled, None, "scale_rewards")
    if "loss_type" in flat:
        put("algorithm.loss_aggregation", pick("loss_type", LOSS_TYPES), "loss_type")
    if "lr_scheduler_type" in flat:
        put("optimizer.schedule", pick("lr_scheduler_type", SCHEDULES), "lr_scheduler_type")
    if flat.get("max_prompt_length") is not None:
        why = " (rlvr drops longer prompts; TRL cut them)"
        put("data.max_prompt_tokens", flat["max_prompt_length"], "max_prompt_length", why)
    if flat.get("dataset_name") is not None:
        put({"data.task": "dataset", "data.path": flat["dataset_name"]}, None, "dataset_name")
    for name in ("torch_dtype", "dtype"):
        if flat.get(name) is not None:
            put("model.dtype", pick(name, {d: d for d in ("auto", *DTYPES)}), name)
    if flat.get("lora_r") is not None:
        if flat.get("use_peft", True):
            put("model.lora_rank", flat["lora_r"], "lora_r")
        else:
            note(f"{label}: TRL's lora_r: ignored (use_peft is false)")
    if flat.get("bf16") is not None:
        put("model.precision", "bf16-mixed" if flat["bf16"] else "fp32", "bf16")
    if flat.get("vllm_max_model_length") is not None:
        put("rollout.vllm_max_model_len", flat["vllm_max_model_length"], "vllm_max_model_length")
    if "use_vllm" in flat:
        if flat["use_vllm"]:
            put("rollout.engine", "vllm", "use_vllm")
        else:
            note(f"{label}: TRL's use_vllm: false ignored (rlvr's own engine generates)")
    if "report_to" in flat:
        put("logging.report_to", _report_to(flat["report_to"], label), "report_to")
    if "log_completions" in flat:
        every = int(flat.get("logging_steps") or 10) if flat["log_completions"] else 0
        put("logging.samples_every", every, "log_completions")
    if flat.get("save_steps") is not None:
        saving = flat.get("save_strategy", "steps") == "steps"
        put("checkpoint.every", int(flat["save_steps"]) if saving else 0, "save_steps")
    _translate_batch(flat, label, put)
    _translate_steps(flat, label, put, note)


DTYPES = ("float32", "bfloat16", "float16")


def _translate_batch(flat: Mapping[str, Any], label: str, put: Callable[..., None]) -> None:
    """TRL counts completions: a generation batch of per_device_train_batch_size x
    steps_per_generation (default gradient_accumulation_steps) completions is generation_batch_
    size / num_generations prompts, and one optimizer step takes per_device_train_batch_size x
    gradient_accumulation_steps of them (one process). rlvr counts prompts per step and the
    sequences of a mini-batch (0: the whole batch)."""
    given = [n for n in BATCH_KEYS if flat.get(n) is not None]
    if not given:
        return
    value = {**TRL_BATCH_DEFAULTS, **{n: flat[n] for n in given}}
    b, a = int(value["per_device_train_batch_size"]), int(value["gradient_accumulation_steps"])
    per_generation = int(value.get("steps_per_generation") or a)
    rows = int(value.get("generation_batch_size") or b * per_generation)
    g = int(flat.get("num_generations") or TRL_NUM_GENERATIONS)
    if rows % g:
        raise ConfigError(
            f"{label}: TRL's generation batch ({rows} completions, from "
            f"{', '.join(given)}) must be a multiple of num_generations = {g}"
        )
    mini = b * a if b * a < rows else 0  # 0: one optimizer step takes the whole batch
    batch = {
        "rollout.prompts_per_step": rows // g,
        "training.micro_batch_size": b,
        "training.mini_batch_size": mini,
    }
    why = f" (a generation batch of {rows} completions, {g} per prompt"
    put(batch, None, given, why + ("; one optimizer step takes it all)" if not mini else ")"))


def _translate_steps(
    flat: Mapping[str, Any], label: str, put: Callable[..., None], note: Note
) -> None:
    """TRL's max_steps counts optimizer steps; an rlvr step generates a batch and makes
    num_iterations x (mini-batches per batch) of them. num_train_epochs has no rlvr meaning."""
    steps = flat.get("max_steps")
    if steps is None or steps < 0:
        if "num_train_epochs" in flat:
            raise ConfigError(
                f"{label}: TRL's num_train_epochs: rlvr counts RL steps, not passes over the "
                "dataset; set max_steps (training.steps) instead"
            )
        if flat.get("warmup_ratio"):
            raise ConfigError(
                f"{label}: TRL's warmup_ratio needs max_steps; or set warmup_steps "
                "(optimizer.warmup_steps)"
            )
        return
    if "num_train_epochs" in flat:
        note(f"{label}: TRL's num_train_epochs: ignored (max_steps is set, as in TRL)")
    b = int(flat.get("per_device_train_batch_size") or 8)
    a = int(flat.get("gradient_accumulation_steps") or 1)
    per_generation = int(flat.get("steps_per_generation") or a)
    rows = int(flat.get("generation_batch_size") or b * per_generation)
    updates = int(flat.get("num_iterations") or 1) * max(1, rows // (b * a))
    rl_steps = math.ceil(steps / updates)
    why = f" ({steps} optimizer steps / {updates} per RL step)" if updates > 1 else ""
    put("training.steps", rl_steps, "max_steps", why)
    if flat.get("warmup_ratio"):
        warmup = math.ceil(float(flat["warmup_ratio"]) * steps)
        put("optimizer.warmup_steps", warmup, "warmup_ratio", f" (of {steps} optimizer steps)")


def _report_to(value: Any, label: str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value or [])
    if names in (["none"], ["all"], []):
        return ["jsonl"]
    bad = [n for n in names if n not in REPORT_TO]
    if bad:
        raise ConfigError(
            f"{label}: TRL's report_to: {', '.join(map(str, bad))}: rlvr reports to "
            "tensorboard, wandb, mlflow (and always metrics.jsonl)"
        )
    return ["jsonl", *names]


def _off(value: Any, default: Any) -> bool:
    return value == default or (default is None and value in ({}, []))


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return f"[{', '.join(map(_show, value))}]"
    return str(value)


def _nearest(name: object, keys: list[str]) -> str:
    import difflib

    if not isinstance(name, str):  # a YAML key that is a number or null
        return ""
    tails = {k.rsplit(".", 1)[-1]: k for k in keys}
    hit = difflib.get_close_matches(name, list(tails), n=1, cutoff=0.75)
    return f"; did you mean '{tails[hit[0]]}'?" if hit else ""
