"""The TRL side of `benchmarks/vs_trl.py`: TRL's GRPOTrainer in its own process.

    python benchmarks/_trl_peer.py SPEC.json RESULT.json

The rlvr config of the spec is the single source of the shared settings; `grpo_config` maps it
onto TRL's GRPOConfig (one optimizer step = prompts_per_step x G completions, generated in one
batch) and the dataset holds exactly the prompts rlvr's trainer draws, in its order.

Phases (each optional, in the spec's order):
  step  `warmup + steps` steps; the wall time of each step is on_step_begin -> on_step_end of a
        callback, which holds generation, scoring, forward/backward and the optimizer step (and
        leaves out TRL's logging between steps, in TRL's favour). Peak memory is read right after.
  tta   time to accuracy with rlvr's evaluation (`rlvr.evaluation.evaluate`, the same held-out
        problems, decoding and seed) called from a callback every `eval.every` steps, evaluation
        time excluded; training stops at the threshold or the time cap.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from _vs_trl_common import (
    chat_messages,
    heldout,
    peak_rss_mib,
    prompt_stream,
    read_spec,
    setup_process,
    trl_reward_function,
    write_result,
)

# rlvr's loss aggregation -> TRL's loss_type with the same normalisation
LOSS_TYPES = {
    "token_mean": "dapo",  # sum over all tokens of the batch / number of tokens
    "seq_mean_token_mean": "grpo",  # mean over sequences of each sequence's token mean
    "seq_mean_token_sum_norm": "dr_grpo",  # token sums / (rows x max completion length)
}
SCALE_REWARDS = {"grpo": "group", "dr_grpo": "none"}  # advantage estimator -> TRL scaling


def grpo_config(
    cfg: Any, output_dir: Path, gradient_checkpointing: bool, bf16: bool = False
) -> Any:
    """TRL's GRPOConfig for the rlvr config `cfg` (use_cpu on a CPU; fp32 unless `bf16`, TRL's
    own mixed precision: bf16 autocast over fp32 weights)."""
    from trl import GRPOConfig

    from rlvr.errors import ConfigError

    alg, opt = cfg.algorithm, cfg.optimizer
    if alg.loss_aggregation not in LOSS_TYPES or alg.advantage not in SCALE_REWARDS:
        raise ConfigError(
            f"algorithm: TRL has no equivalent of advantage={alg.advantage}, "
            f"loss_aggregation={alg.loss_aggregation}"
        )
    if opt.schedule != "constant":
        raise ConfigError(
            f"optimizer.schedule: the benchmark maps only 'constant' onto TRL, got {opt.schedule!r}"
        )
    batch = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    # rlvr runs `micro_batch_size` rows per forward/backward and one optimizer step per batch;
    # TRL does the same with gradient accumulation over one generation batch.
    micro = min(batch, cfg.training.micro_batch_size)
    while batch % micro:
        micro -= 1
    return GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=cfg.model.device != "cuda",
        bf16=bf16,  # TRL's default True: ~100x slower matmuls on an AVX2-only CPU
        fp16=False,
        gradient_checkpointing=gradient_checkpointing,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch // micro,
        generation_batch_size=batch,
        num_generations=cfg.rollout.group_size,
        max_completion_length=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        beta=alg.kl_coef,
        loss_type=LOSS_TYPES[alg.loss_aggregation],
        scale_rewards=SCALE_REWARDS[alg.advantage],
        epsilon=alg.clip_ratio_low,
        epsilon_high=alg.clip_ratio_high,
        num_iterations=cfg.training.ppo_epochs,
        mask_truncated_completions=cfg.reward.mask_truncated,
        learning_rate=opt.lr,
        lr_scheduler_type="constant_with_warmup" if opt.warmup_steps else "constant",
        warmup_steps=opt.warmup_steps,
        adam_beta1=opt.beta1,
        adam_beta2=opt.beta2,
        adam_epsilon=opt.adam_eps,
        weight_decay=opt.weight_decay,
        max_grad_norm=opt.max_grad_norm,
        max_steps=cfg.training.steps,
        seed=cfg.training.seed,
        shuffle_dataset=False,  # rlvr's prompt order
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _load(cfg: Any) -> tuple[Any, Any, bool]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.loading import resolve_model_path, uses_chat_template

    path = resolve_model_path(cfg.model.name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # as rlvr's load_tokenizer
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, tokenizer, uses_chat_template(tokenizer, cfg.model.chat_template)


def _dataset(cfg: Any, chat: bool) -> Any:
    from datasets import Dataset

    samples = prompt_stream(cfg, cfg.training.steps * cfg.rollout.prompts_per_step)
    rows = []
    for s in samples:
        system = s.get("system") or cfg.data.system_prompt
        prompt = chat_messages(s["prompt"], system) if chat else s["prompt"]
        rows.append({"prompt": prompt, "sample": json.dumps(s)})
    return Dataset.from_list(rows)


def _trainer(cfg: Any, output_dir: Path, gc: bool, callbacks: list[Any], bf16: bool = False) -> Any:
    from trl import GRPOTrainer

    model, tokenizer, chat = _load(cfg)
    return GRPOTrainer(
        model=model,
        reward_funcs=[trl_reward_function(cfg.reward.verifier)],
        args=grpo_config(cfg, output_dir, gc, bf16),
        train_dataset=_dataset(cfg, chat),
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def step_phase(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from rlvr.config import load_config

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.begin = 0.0
            self.times: list[float] = []
            self.logs: list[dict[str, Any]] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.times.append(time.perf_counter() - self.begin)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "reward" in logs:
                self.logs.append(dict(logs))

    cfg = load_config(None, spec["overrides"])
    timer = StepTimer()
    t0 = time.perf_counter()
    bf16 = spec.get("precision") == "bf16"
    name = f"trl-step-gc-{spec['gc']}" + ("-bf16" if bf16 else "")
    trainer = _trainer(cfg, work / name, spec["gc"] == "on", [timer], bf16)
    load_s = time.perf_counter() - t0
    trainer.train()
    warm = spec["warmup"]
    logs = timer.logs[warm:]
    return {
        "gradient_checkpointing": spec["gc"],
        "precision": "bf16" if bf16 else "fp32",
        "load_s": load_s,
        "warmup_steps": warm,
        "step_time_s": timer.times[warm:],
        "warmup_step_time_s": timer.times[:warm],
        "reward_mean": [log.get("reward") for log in logs],
        "completion_length_mean": [log.get("completions/mean_length") for log in logs],
        "loss": [log.get("loss") for log in logs],
        "peak_rss_mib": peak_rss_mib(),
    }


def tta_phase(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from rlvr.config import load_config
    from rlvr.evaluation.evaluate import evaluate
    from rlvr.models.loading import encode_prompt
    from rlvr.rewards.compose import build_verifier
    from rlvr.rollout import HFEngine

    cfg = load_config(None, spec["tta_overrides"])
    problems = heldout(cfg)
    verifier = build_verifier(cfg.reward.verifier)
    threshold, cap = spec["tta_threshold"], spec["tta_max_seconds"]

    class EvalEvery(TrainerCallback):
        """rlvr's held-out evaluation every `eval.every` optimizer steps, clock paused."""

        def __init__(self) -> None:
            self.start = 0.0
            self.eval_s = 0.0
            self.evals: list[dict[str, Any]] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if state.global_step % cfg.eval.every:
                return control
            t = time.perf_counter()
            train_s = t - self.start - self.eval_s
            model, tokenizer = kw["model"], kw["processing_class"]
            chat = bool(getattr(tokenizer, "chat_template", None))
            was_training = model.training
            model.eval()
            result = evaluate(
                HFEngine(model, tokenizer),
                problems,
                [
                    encode_prompt(tokenizer, s["prompt"], chat=chat, system_prompt=s.get("system"))
                    for s in problems
                ],
                verifier,
                max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                t1_samples=cfg.eval.t1_samples,
                seed=cfg.training.seed + 12345,  # as GRPOTrainer.run_eval
            )
            model.train(was_training)
            self.eval_s += time.perf_counter() - t
            step = state.global_step
            self.evals.append({"step": step, "train_s": train_s, "accuracy": result["accuracy"]})
            if result["accuracy"] >= threshold or train_s >= cap:
                control.should_training_stop = True
            return control

    evaluator = EvalEvery()
    trainer = _trainer(cfg, work / "trl-tta", spec["tta_gc"] == "on", [evaluator])
    trainer.train()
    evals = evaluator.evals
    reached = next((e for e in evals if e["accuracy"] >= threshold), None)
    return {
        "threshold": threshold,
        "gradient_checkpointing": spec["tta_gc"],
        "reached": reached is not None,
        "seconds": reached["train_s"] if reached else None,
        "steps": reached["step"] if reached else None,
        "trained_s": evals[-1]["train_s"] if evals else 0.0,
        "trained_steps": evals[-1]["step"] if evals else 0,
        "evals": evals,
        "eval_s": evaluator.eval_s,
    }


def main(argv: list[str]) -> int:
    spec, out = read_spec(argv)
    setup_process(spec)
    if spec.get("trl_keep_freed_memory"):  # --trl-keep-freed-memory: rlvr's malloc setting
        from rlvr.runs.allocator import keep_freed_memory

        keep_freed_memory()
    from rlvr.errors import UserError

    work = Path(spec["work_dir"])
    result: dict[str, Any] = {"library": "trl"}
    try:
        for phase in spec["phases"]:
            t0 = time.perf_counter()
            print(f"trl (gc {spec['gc']}): {phase} ...", file=sys.stderr, flush=True)
            if phase == "step":
                result["step"] = step_phase(spec, work)
            elif phase == "tta":
                result["tta"] = tta_phase(spec, work)
            print(f"trl: {phase} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    except UserError as e:
        result["error"] = str(e)
        write_result(out, result)
        return 2
    write_result(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
