"""`rlvr estimate`: the memory a training configuration needs, per device, before running it.

    rlvr estimate [--config FILE.yaml] [key=value ...] [--precision auto|fp32|bf16-mixed|bf16]
                  [--world-size W] [--fsdp] [--prompt-tokens P]

Reads the model's config.json (parameter counts come from building the model on the meta
device), so a 70B model can be planned on a laptop, and its tokenizer when there is one, to
measure the task's prompts. Formulas: rlvr.estimate.memory.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlvr.commands import standalone_main
from rlvr.errors import ModelLoadError, UserError
from rlvr.estimate.memory import PRECISIONS


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "estimate",
        help="memory per device of a training config: weights, optimizer, KV cache, ...",
        description=__doc__.split("\n\n")[2],
    )
    parser.add_argument("--config", metavar="FILE.yaml", help="the `rlvr train` config")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=PRECISIONS,
        help="auto = the config's model.precision as rlvr train resolves it on model.device "
        "(on a CPU by its start-up probe, run here); "
        "bf16-mixed = fp32 master weights and moments with bf16 activations (default: auto)",
    )
    parser.add_argument("--world-size", type=int, default=1, help="data-parallel ranks")
    parser.add_argument("--fsdp", action="store_true", help="shard weights/grads/optimizer")
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=0,
        help="prompt length to plan for (default 0: the longest of the task's held-out prompts, "
        "encoded as the run would)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from transformers import AutoConfig

    from rlvr.config import load_config
    from rlvr.estimate.memory import (
        estimate,
        format_report,
        model_shape,
        plan_of,
        planned_precision,
    )
    from rlvr.models.loading import resolve_model_path

    if args.world_size < 1:
        raise UserError(f"--world-size: must be >= 1, got {args.world_size}")
    if args.prompt_tokens < 0:
        raise UserError(f"--prompt-tokens: must be >= 0, got {args.prompt_tokens}")
    cfg = load_config(args.config, args.overrides)
    path = resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)
    extra = {"gguf_file": cfg.model.gguf_file} if cfg.model.gguf_file else {}
    try:
        hf_config = AutoConfig.from_pretrained(
            path, trust_remote_code=cfg.model.trust_remote_code, **extra
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot read a config from '{path}': {e}"
        ) from None
    shape = model_shape(hf_config, cfg.model.lora_rank, cfg.model.lora_target_modules)
    critic = _critic_shape(cfg, hf_config)
    device = "cuda" if cfg.model.device == "cuda" else "cpu"
    if cfg.model.device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    precision, why = planned_precision(args.precision, cfg.model, device, shape)
    prompt_tokens, source = args.prompt_tokens, "--prompt-tokens"
    if not prompt_tokens:
        prompt_tokens, source = task_prompt_tokens(cfg)
    plan = plan_of(cfg, prompt_tokens, args.world_size, args.fsdp, device)
    parts = estimate(
        shape,
        plan,
        precision=precision,
        kl_coef=cfg.algorithm.kl_coef,
        lora=cfg.model.lora_rank > 0,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        world_size=args.world_size,
        fsdp=args.fsdp,
        critic=critic,
        reward_model_bytes=_reward_model_bytes(cfg, device),
    )
    note = (
        f"(per device; {args.world_size} rank(s){', FSDP' if args.fsdp else ''}; "
        f"{plan.prompts * plan.group_size} rollout rows per rank, {plan.decoded_rows} decoded "
        f"together, of up to {prompt_tokens}+{cfg.rollout.max_new_tokens} tokens; prompt "
        f"tokens: {source})"
    )
    if why:
        note += f"\n{why}"
    print(format_report(shape, parts, precision, note))
    return 0


def _critic_shape(cfg: Any, policy_config: Any) -> Any:
    """The value model's shape when algorithm.advantage needs one (its own model's config when
    critic.name_or_path names another), else None."""
    from rlvr.algorithms.names import ADVANTAGE_ESTIMATOR_SPECS
    from rlvr.estimate.memory import critic_shape
    from rlvr.runs.critic import critic_model_config

    if not ADVANTAGE_ESTIMATOR_SPECS[cfg.algorithm.advantage].needs_critic:
        return None
    m = critic_model_config(cfg).model
    config = policy_config
    if m.name_or_path != cfg.model.name_or_path:
        from transformers import AutoConfig

        from rlvr.models.loading import resolve_model_path

        path = resolve_model_path(m.name_or_path, None)
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=m.trust_remote_code)
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"critic.name_or_path: cannot read a config from '{path}': {e}"
            ) from None
    return critic_shape(config, m.lora_rank, m.lora_target_modules)


def _reward_model_bytes(cfg: Any, device: str) -> float:
    """The weights of every learned reward (`rm:PATH` items of reward.verifier and
    reward.mix_verifier), counted on the meta device from each model's config, in the dtype the
    trainer loads them in (model.dtype's inference dtype)."""
    from rlvr.rewards.spec import learned_items

    specs = [s for s in (cfg.reward.verifier, cfg.reward.mix_verifier) if isinstance(s, str)]
    paths = [path for spec in specs for path, _weight in learned_items(spec)]
    if not paths:
        return 0.0
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from rlvr.models.loading import resolve_dtype

    size = torch.finfo(resolve_dtype(cfg.model.dtype, torch.device(device))).bits // 8
    total = 0.0
    for path in paths:
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code)
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"reward.verifier: cannot read a config from '{path}': {e}"
            ) from None
        config.num_labels = 1
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(config)
        total += sum(p.numel() for p in model.parameters()) * size
    return total


FALLBACK_PROMPT_TOKENS = 512


def task_prompt_tokens(cfg: Any, count: int = 200) -> tuple[int, str]:
    """The longest of up to `count` held-out prompts of the config's task as the policy would
    encode them (the tokenizer, chat template, system prompt, declared tools, few-shot
    examples), and where the figure comes from; FALLBACK_PROMPT_TOKENS when the model
    directory has no tokenizer (a config.json alone, to plan a model not downloaded)."""
    from rlvr.data.registry import heldout_size
    from rlvr.models.loading import load_tokenizer
    from rlvr.runs.policy import prompt_encoder
    from rlvr.runs.task import build_run_task

    m = cfg.model
    try:
        tokenizer = load_tokenizer(m.name_or_path, m.trust_remote_code, m.gguf_file)
    except (OSError, ValueError, TypeError, ModelLoadError):
        return FALLBACK_PROMPT_TOKENS, f"{FALLBACK_PROMPT_TOKENS}, no tokenizer to measure"
    task = build_run_task(cfg)
    size = heldout_size(task, min(count, cfg.eval.size or count))
    try:
        samples = task.heldout(size) if size else []
    except (ValueError, UserError):  # a generator with too few distinct held-out problems
        samples = []
    if not samples:
        return FALLBACK_PROMPT_TOKENS, f"{FALLBACK_PROMPT_TOKENS}, no held-out prompts"
    encode = prompt_encoder(cfg, tokenizer)
    lengths = [len(encode(s)) for s in samples]
    return max(lengths), f"the longest of {len(lengths)} held-out prompts"


def main(argv: list[str] | None = None) -> int:
    return standalone_main("estimate", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
