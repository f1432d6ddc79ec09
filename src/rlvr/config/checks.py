"""Checks of the RL run's config tree (`rlvr.config.Config`) that involve more than one field.

`validate` refuses a config that cannot run (a one-line `ConfigError` naming the key);
`config_warnings` names the options that are set but have no effect under the rest of the config
(one line each, for the caller to show). Both read the tree only: this module imports nothing
from the tree's module (`rlvr.config.tree` calls it), so `cfg` is typed loosely.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.algorithms.names import ADVANTAGE_ESTIMATOR_SPECS, POLICY_LOSS_SPECS, AlgorithmSpec
from rlvr.errors import ConfigError

Config = Any  # rlvr.config.Config, the RL run's tree
ModelConfig = Any  # rlvr.config.ModelConfig

# The references verifiers hold: a template naming one would leak it into the prompt.
FORBIDDEN_TEMPLATE_FIELDS = (
    "answer",
    "tests",
    "test",
    "test_list",
    "expected",
    "canonical_solution",
)

# environment.name prefixes naming another library's environment (rlvr.environments.adapters)
ADAPTER_NAMES = ("verifiers", "openenv", "skyrl-gym", "textarena")

# data.* keys read only by one data.task (data/registry.py builds each task from these)
TASK_KEYS = {
    "addition": ("digits",),
    "arithmetic": ("level", "max_level", "difficulty", "promote_at", "promote_window"),
    "countdown": (
        "countdown_min_numbers",
        "countdown_max_numbers",
        "countdown_max_value",
        "countdown_max_target",
    ),
    "gym": ("gym_name", "gym_config", "gym_size"),
    "dataset": (
        "path",
        "eval_path",
        "eval_fraction",
        "prompt_field",
        "answer_field",
        "tests_field",
        "system_field",
        "source_field",
        "max_prompt_tokens",
    ),
}
RAY_KEYS = (
    "ray_address",
    "ray_num_cpus",
    "rollout_workers",
    "reward_workers",
    "cpus_per_worker",
    "gpus_per_rollout_worker",
    "max_restarts",
)


def validate(cfg: Config) -> None:
    """Checks that involve more than one field."""
    g = cfg.rollout.group_size
    if ADVANTAGE_ESTIMATOR_SPECS[cfg.algorithm.advantage].group_relative and g < 2:
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
    if cfg.data.task == "environment" and not cfg.environment.name:
        raise ConfigError(
            "data.task: 'environment' takes the rows of environment.name's library, and "
            "environment.name is unset"
        )
    if cfg.reward.overlong_buffer >= cfg.rollout.max_new_tokens:
        raise ConfigError(
            f"reward.overlong_buffer: must be < rollout.max_new_tokens = "
            f"{cfg.rollout.max_new_tokens}, got {cfg.reward.overlong_buffer}"
        )
    if cfg.algorithm.kl_in_reward and cfg.algorithm.kl_coef == 0:
        raise ConfigError("algorithm.kl_in_reward: needs algorithm.kl_coef > 0")
    if cfg.algorithm.clip_cov_lb > cfg.algorithm.clip_cov_ub:
        raise ConfigError(
            f"algorithm.clip_cov_lb: must be <= algorithm.clip_cov_ub = "
            f"{cfg.algorithm.clip_cov_ub}, got {cfg.algorithm.clip_cov_lb}"
        )
    r = cfg.rollout
    if r.off_policy_steps and r.max_staleness not in (0, 1):
        raise ConfigError(
            f"rollout.off_policy_steps: 1 means rollout.max_staleness=1, which is set to "
            f"{r.max_staleness}; set only rollout.max_staleness"
        )
    if r.async_unit == "group":
        check_group_stream(cfg)
    alg = cfg.algorithm
    if alg.token_correction == "icepop" and alg.tis_cap <= 1:
        raise ConfigError(
            f"algorithm.tis_cap: token_correction=icepop keeps the tokens whose ratio lies in "
            f"[1/tis_cap, tis_cap], so it needs tis_cap > 1, got {alg.tis_cap}"
        )
    if 0 < alg.mis_cap <= 1:
        raise ConfigError(
            f"algorithm.mis_cap: keeps the sequences whose ratio lies in [1/mis_cap, mis_cap], "
            f"so it must be > 1 (or 0: off), got {alg.mis_cap}"
        )
    if ADVANTAGE_ESTIMATOR_SPECS[alg.advantage].needs_critic:
        _check_critic(cfg)
    if cfg.data.mix_path and not cfg.reward.mix_verifier:
        raise ConfigError(
            "reward.mix_verifier: data.mix_path's prompts have no reference answer; name the "
            "verifier that scores them (rm:PATH, judge:URL, ...)"
        )
    if cfg.data.mix_path and cfg.distributed.ray:
        raise ConfigError(
            "data.mix_path: the Ray reward actors score with reward.verifier only; mix prompts "
            "with distributed.ray=false"
        )
    cfg.data.validate()
    validate_model(cfg.model)


def _check_critic(cfg: Config) -> None:
    """A critic gives every token its own advantage: the loss must take per-token ones."""
    alg = cfg.algorithm
    if POLICY_LOSS_SPECS[alg.policy_loss].sequence_advantages:
        raise ConfigError(
            f"algorithm.policy_loss: {alg.policy_loss} weighs one ratio per sequence and takes one "
            f"advantage per sequence; algorithm.advantage={alg.advantage} gives one per token "
            "(use clip, cispo, clip_cov or kl_cov)"
        )
    if alg.ratio_level == "sequence":
        raise ConfigError(
            f"algorithm.ratio_level: sequence (GSPO) takes one advantage per sequence; "
            f"algorithm.advantage={alg.advantage} gives one per token (use token)"
        )


def check_group_stream(cfg: Config) -> None:
    """rollout.async_unit=group streams groups from the fast engine in this process, taking new
    weights at token boundaries: what that needs, with the first setting that prevents it."""
    r = cfg.rollout
    needs = [
        (
            r.staleness > 0 and r.async_mode == "free",
            "rollout.async_mode=free with max_staleness > 0",
        ),
        (
            r.partial_rollouts,
            "rollout.partial_rollouts=true (a stream has no batch boundary to take new weights at)",
        ),
        (r.engine == "fast", f"rollout.engine=fast (got {r.engine})"),
        (not cfg.distributed.ray, "one process (not distributed.ray)"),
        (not cfg.environment.name, "single-turn rollouts (environment.name is set)"),
    ]
    for ok, what in needs:
        if not ok:
            raise ConfigError(f"rollout.async_unit=group: needs {what}")


def validate_model(model: ModelConfig) -> None:
    """Checks of the model section shared by every command that trains one."""
    if model.gguf_file and model.name_or_path.startswith("embedded"):
        raise ConfigError("model.gguf_file: set model.name_or_path to the directory holding it")


def check_template(template: str, key: str = "data.prompt_template") -> list[str]:
    """The field names a prompt template uses; ConfigError when it is malformed or leaks the
    answer. Run when the config loads, and again by `rlvr.data.template.TemplatedTask`, which
    applies templates, for one built in code."""
    try:
        parsed = [
            (f, spec, conv)
            for _, f, spec, conv in string.Formatter().parse(template)
            if f is not None
        ]
    except ValueError as e:
        raise ConfigError(f"{key}: {e} (write literal braces as {{{{ and }}}})") from None
    for f, spec, conv in parsed:
        if conv is not None or spec:
            placeholder = "{" + f + (f"!{conv}" if conv is not None else "")
            placeholder += (f":{spec}" if spec else "") + "}"
            raise ConfigError(
                f"{key}: {placeholder!r}: conversions and format specs are not supported; "
                f"expected a plain field name like {{prompt}}"
            )
    fields = [f for f, _, _ in parsed]
    if "prompt" not in fields:
        raise ConfigError(f"{key}: must contain {{prompt}}, got {template!r}")
    for f in fields:
        if not f.isidentifier():
            raise ConfigError(
                f"{key}: {'{' + f + '}'!r}: expected a plain field name like {{prompt}}"
            )
        if f in FORBIDDEN_TEMPLATE_FIELDS:
            raise ConfigError(f"{key}: {{{f}}} would put the reference into the prompt")
    return fields


# ---------------------------------------------------------------------------------------------
# Options without effect


def fields_of(section: Any) -> list[str]:
    """The leaf names of a config section other than `name`."""
    return [f.name for f in dataclasses.fields(section) if f.name != "name"]


def _show(value: Any) -> str:
    """A value as it is written in a key=value override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def config_warnings(cfg: Config) -> list[str]:
    """One line per option set to a non-default value that the rest of `cfg` makes ineffective,
    e.g. "algorithm.std=sample has no effect: algorithm.advantage=rloo does not read it (read by
    grpo, reinforce_pp, reinforce_pp_baseline)". The default config gives []. A key is named once,
    with the first reason found. Last, the pure 16-bit training line (`precision_warning`).
    Nothing is printed: the caller shows the lines.
    """
    lines: list[str] = []
    named: set[str] = set()

    def unused(key: str, reason: str) -> None:
        section_name, name = key.split(".")
        section = getattr(cfg, section_name)
        value = getattr(section, name)
        if key in named or value == getattr(type(section)(), name):
            return
        named.add(key)
        lines.append(f"{key}={_show(value)} has no effect: {reason}")

    alg, ev = cfg.algorithm, cfg.eval
    _unread_options(unused, "algorithm.advantage", alg.advantage, ADVANTAGE_ESTIMATOR_SPECS)
    if not ADVANTAGE_ESTIMATOR_SPECS[alg.advantage].needs_critic:
        for name in cfg.critic.__dataclass_fields__:
            unused(
                f"critic.{name}",
                f"algorithm.advantage={alg.advantage} learns no value model (algorithm.advantage="
                "gae does)",
            )
    _unread_options(unused, "algorithm.policy_loss", alg.policy_loss, POLICY_LOSS_SPECS)
    if alg.kl_coef == 0:
        unused("algorithm.kl_estimator", "algorithm.kl_coef=0 computes no KL term")
    if not alg.dynamic_sampling:
        unused("algorithm.max_sampling_rounds", "algorithm.dynamic_sampling is false")
    if not cfg.data.mix_path:
        unused("reward.mix_verifier", "data.mix_path is unset: no prompt is mixed in")
        unused("data.mix_fraction", "data.mix_path is unset: no prompt is mixed in")
    specs = " ".join(
        v for v in (cfg.reward.verifier, cfg.reward.mix_verifier) if isinstance(v, str)
    )
    for name in cfg.reward.__dataclass_fields__:
        if name.startswith("rm_") and "rm:" not in specs:
            unused(f"reward.{name}", "no verifier spec names a learned reward (rm:PATH)")
        elif name.startswith("judge_") and "judge:" not in specs:
            unused(f"reward.{name}", "no verifier spec names an LLM judge (judge:...)")
    exact_sampler = cfg.rollout.engine != "vllm"  # fast and hf compute the learner's log-probs
    if cfg.rollout.staleness == 0 and exact_sampler:
        why = (
            "the sampler is the learner itself (rollout.max_staleness=0, "
            f"rollout.engine={cfg.rollout.engine})"
        )
        for name in ("token_correction", "tis_cap", "mis_cap"):
            unused(
                f"algorithm.{name}", f"it corrects for a sampler other than the learner and {why}"
            )
    if cfg.rollout.staleness == 0:
        unused("rollout.async_mode", "rollout.max_staleness=0 trains on-policy")
    if not (cfg.rollout.partial_rollouts and cfg.rollout.async_mode == "deterministic"):
        unused(
            "rollout.partial_switch_at",
            "only deterministic partial rollouts (rollout.partial_rollouts=true, "
            "rollout.async_mode=deterministic) switch at a fixed decode step",
        )
    if cfg.rollout.staleness == 0:
        unused(
            "rollout.partial_rollouts",
            "only an asynchronous schedule (rollout.max_staleness > 0) publishes weights in the "
            "middle of a batch",
        )
    elif cfg.rollout.engine == "hf" or cfg.distributed.ray:
        where = (
            "Ray rollout actors" if cfg.distributed.ray else f"rollout.engine={cfg.rollout.engine}"
        )
        unused(
            "rollout.partial_rollouts",
            f"{where} finish a batch on the weights it started with (the fast and vllm "
            "engines in this process switch mid-batch)",
        )
    if exact_sampler:
        unused(
            "rollout.max_logprob_drift",
            f"rollout.engine={cfg.rollout.engine} samples with the learner's own log-probs",
        )
    if cfg.rollout.engine != "vllm":
        for name in (
            "vllm_kv_cache_gb",
            "vllm_gpu_memory_utilization",
            "vllm_max_model_len",
            "vllm_sleep",
        ):
            unused(f"rollout.{name}", f"rollout.engine={cfg.rollout.engine}")
    env = cfg.environment
    if not env.name:
        for name in fields_of(env):
            unused(f"environment.{name}", "environment.name is unset: rollouts are single-turn")
    elif env.name != "python":
        for name in ("format", "memory_mb", "max_output_chars"):
            unused(f"environment.{name}", f"it configures the built-in python tool, not {env.name}")
    if env.name and env.name.partition(":")[0] not in ADAPTER_NAMES:
        unused("environment.args", "it configures another library's environment")
    if cfg.rollout.temperature == 0:
        for name in ("top_p", "top_k"):
            unused(f"rollout.{name}", "rollout.temperature=0 decodes greedily")
    if cfg.reward.overlong_buffer == 0:
        unused("reward.overlong_penalty_factor", "reward.overlong_buffer=0 turns the shaping off")
    if cfg.reward.workers == 0:
        unused("reward.timeout_s", "reward.workers=0 scores in the trainer process, untimed")
    if cfg.training.token_budget == 0:
        for name in ("logprob_chunk", "share_prompts", "packed_attention"):
            unused(
                f"training.{name}",
                "it applies to the packed update only and training.token_budget=0",
            )
    if ev.size == 0:
        for name in ("t1_samples", "max_new_tokens", "k", "budgets"):
            unused(f"eval.{name}", "eval.size=0 evaluates nothing")
        if ev.every > 0:
            unused("eval.every", "eval.size=0 evaluates nothing")
    if ev.k == 0:
        unused("eval.budgets", "the budget accuracies are reported only with eval.k > 0")
    elif ev.t1_samples == 0:  # 0 skips the temperature-1 pass only when pass@k needs none
        unused(
            "eval.t1_samples",
            f"eval.k={ev.k} draws {ev.k} temperature-1 samples per problem (the pass is skipped "
            "only with eval.k=0)",
        )
    elif ev.t1_samples <= ev.k:
        unused("eval.t1_samples", f"max(eval.k, eval.t1_samples) = eval.k = {ev.k} are drawn")
    if cfg.optimizer.schedule == "constant":
        unused("optimizer.min_lr_ratio", "optimizer.schedule=constant does not decay")
    if "wandb" not in cfg.logging.report_to:
        for name in ("wandb_project", "wandb_mode"):
            unused(f"logging.{name}", "logging.report_to does not include wandb")
    if cfg.model.lora_rank == 0:
        for name in ("lora_alpha", "lora_dropout", "lora_target_modules"):
            unused(f"model.{name}", "model.lora_rank=0 trains every weight, no adapters")
    if cfg.model.precision != "auto" and not cfg.distributed.ray:
        unused(
            "model.dtype",
            f"model.precision={cfg.model.precision} sets the trained weights' dtype (model.dtype "
            "is read by inference commands and Ray rollout actors)",
        )
    if cfg.model.chat_template == "never":
        unused("data.system_prompt", "it is used only with a chat template (model.chat_template)")
    for task, names in TASK_KEYS.items():
        if cfg.data.task != task:
            for name in names:
                unused(
                    f"data.{name}", f"only data.task={task} reads it (data.task={cfg.data.task})"
                )
    if cfg.data.eval_path is not None:
        unused("data.eval_fraction", "data.eval_path is the held-out set")
    if cfg.data.difficulty != "adaptive":
        for name in ("promote_at", "promote_window"):
            unused(f"data.{name}", f"data.difficulty={cfg.data.difficulty} does not promote")
    if not cfg.distributed.ray:
        for name in RAY_KEYS:
            unused(f"distributed.{name}", "distributed.ray is false")
    pure = precision_warning(cfg.model)
    return lines + ([pure] if pure else [])


# Relative spacing of the 16-bit formats: an AdamW update smaller than about half of it rounds
# back to the same weight (at lr 1e-6, an update's relative size is ~1e-6/|w|).
RESOLUTION = {"bf16": "2^-8", "fp16": "2^-11"}


def precision_warning(model: ModelConfig) -> str | None:
    """The line `rlvr train` shows when it would train pure 16-bit weights (their AdamW updates
    below the format's resolution vanish), else None. Pure only when asked for by name, so the
    device does not matter. LoRA trains only its adapters, which peft keeps in fp32 over a
    16-bit base: nothing to warn about."""
    layout = model.training_precision("cpu")
    if layout not in RESOLUTION or model.lora_rank:
        return None
    cause = (
        f"model.precision={layout}"
        if model.precision != "auto"
        else f"model.dtype={model.dtype} (model.precision=auto trains pure {layout} weights)"
    )
    return (
        f"{cause}: AdamW updates below {layout} resolution (~{RESOLUTION[layout]} relative) are "
        "lost; use bf16-mixed"
    )


def _unread_options(
    unused: Callable[[str, str], None],
    selector: str,
    selected: str,
    specs: Mapping[str, AlgorithmSpec],
) -> None:
    """Name the options of the other variants in `specs` that the `selected` one does not read."""
    readers: dict[str, list[str]] = {}
    for spec in specs.values():
        for option in spec.options:
            readers.setdefault(option, []).append(spec.name)
    for option, names in readers.items():
        if option not in specs[selected].options:
            unused(
                f"algorithm.{option}",
                f"{selector}={selected} does not read it (read by {', '.join(names)})",
            )
