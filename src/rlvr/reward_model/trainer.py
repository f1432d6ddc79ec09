"""`rlvr rm`: a Bradley-Terry scalar reward model trained on preference pairs, top to bottom.

One optimizer step:
  1. take `batch_size` pairs in a seeded per-epoch order
  2. forward `micro_batch_size` pairs at a time, chosen and rejected sequences in one
     right-padded batch; r = the score head at each sequence's last token (rlvr.reward_model.model)
  3. the loss of each pair, -log sigma(r_c - r_r - m) + c (r_c + r_r)^2 (rlvr.reward_model.loss),
     summed and divided by the pairs of the whole optimizer batch before backward, so gradient
     accumulation gives the gradient of the full-batch mean
  4. clip, AdamW step, scheduler step; metrics; held-out pairwise accuracy before, every
     eval.every steps and after; checkpoints as rlvr sft writes them

The run directory is rlvr sft's: config.yaml, precision.json, metrics.jsonl (a step-0 row with
the evaluation before training), summary.json (eval_before / eval_after), checkpoints/step-N/
and final/, a plain Hugging Face directory (AutoModelForSequenceClassification, num_labels=1)
that `reward.verifier=rm:RUN_DIR/final` scores with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from rlvr.config import dump_yaml, to_dict
from rlvr.config.checks import precision_warning
from rlvr.errors import UserError
from rlvr.models.loading import Precision
from rlvr.reward_model.config import RMConfig
from rlvr.reward_model.data import (
    Pair,
    PairBatch,
    PairData,
    batch_indices,
    collate_pairs,
    load_pairs,
    steps_per_epoch,
)
from rlvr.reward_model.loss import bradley_terry_losses, pairwise_accuracy
from rlvr.reward_model.model import FORMAT_KEY, load_reward_model, sequence_rewards
from rlvr.runs.allocator import keep_freed_memory
from rlvr.runs.checkpoint import (
    check_same_config,
    latest_checkpoint,
    save_checkpoint,
    truncate_jsonl,
)
from rlvr.runs.optim import optimizer_step
from rlvr.runs.run import (
    CheckpointTriggers,
    EvalSchedule,
    RunLog,
    TrainingInterrupted,
    run_precision,
    write_precision,
    write_summary,
)

__all__ = ["RMConfig", "run_rm"]

EVAL_PAIRS_PER_FORWARD = 32


def pair_rewards(
    model: Any, batch: PairBatch, device: torch.device, compute_dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen rewards [P], rejected rewards [P]) of a micro-batch, fp32; under
    torch.autocast to `compute_dtype` when given (model.precision=bf16-mixed)."""
    context = (
        torch.autocast(device.type, dtype=compute_dtype, cache_enabled=False)
        if compute_dtype is not None
        else nullcontext()
    )
    with context:
        r = sequence_rewards(model, batch.input_ids.to(device), batch.attention_mask.to(device))
    return r[: batch.num_pairs], r[batch.num_pairs :]


@torch.no_grad()
def evaluate_pairs(
    model: Any,
    pairs: Sequence[Pair],
    pad_id: int,
    device: torch.device,
    *,
    center_coef: float = 0.0,
    compute_dtype: torch.dtype | None = None,
    pairs_per_forward: int = EVAL_PAIRS_PER_FORWARD,
) -> dict[str, float]:
    """Held-out figures of `pairs`: accuracy (share with r_chosen > r_rejected), loss (the
    mean Bradley-Terry loss, nats), margin (mean r_chosen - r_rejected), chosen_mean,
    rejected_mean, n (pairs)."""
    was_training = model.training
    model.eval()
    chosen, rejected, margins = [], [], []
    try:
        for i in range(0, len(pairs), pairs_per_forward):
            batch = collate_pairs(pairs[i : i + pairs_per_forward], pad_id)
            c, r = pair_rewards(model, batch, device, compute_dtype)
            chosen.append(c.cpu())
            rejected.append(r.cpu())
            margins.append(batch.margin)
    finally:
        model.train(was_training)
    c, r, m = torch.cat(chosen), torch.cat(rejected), torch.cat(margins)
    return {
        "accuracy": pairwise_accuracy(c, r),
        "loss": float(bradley_terry_losses(c, r, m, center_coef).mean()),
        "margin": float((c - r).mean()),
        "chosen_mean": float(c.mean()),
        "rejected_mean": float(r.mean()),
        "n": len(pairs),
    }


def eval_line(when: str, e: dict[str, float]) -> str:
    return (
        f"eval {when}: pairwise accuracy {e['accuracy']:.3f}  loss {e['loss']:.4f}  "
        f"margin {e['margin']:.3f}  (n={e['n']} pairs)"
    )


@dataclass
class RMRun:
    """What one reward-model run holds once it is set up (`prepare_rm`)."""

    cfg: RMConfig
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    data: PairData
    device: torch.device
    total_steps: int
    precision: Precision
    compute_dtype: torch.dtype | None = None

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.data.train), self.cfg.training.batch_size)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def evaluate(self) -> dict[str, float]:
        return evaluate_pairs(
            self.model,
            self.data.eval,
            self.pad_id,
            self.device,
            center_coef=self.cfg.training.center_rewards_coefficient,
            compute_dtype=self.compute_dtype,
        )


def _load_model(
    cfg: RMConfig, ckpt: Path | None, device: torch.device, dtype: Any, pad_id: int
) -> Any:
    """The model to train: from `cfg.model` (a new score head), or as saved at `ckpt` (full
    weights, or the base with the checkpoint's adapter and head)."""
    if ckpt is None or cfg.model.lora_rank:
        model = load_reward_model(cfg.model, device, dtype, pad_token_id=pad_id, train=True)
    else:
        resumed = replace(cfg.model, name_or_path=str(ckpt), gguf_file=None)
        model = load_reward_model(resumed, device, dtype, pad_token_id=pad_id, train=True)
    if ckpt is not None and cfg.model.lora_rank:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"), device=str(device))
        set_peft_model_state_dict(model, weights)
    return model


def prepare_rm(cfg: RMConfig, ckpt: Path | None, log: Callable[[str], None]) -> RMRun:
    """Pairs, model (from `ckpt` when resuming), optimizer and scheduler. Every check of user
    input happens here, before the run directory is written."""
    from rlvr.models.loading import load_tokenizer, resolve_device
    from rlvr.runs.optim import build_optimizer, build_scheduler

    t = cfg.training
    torch.manual_seed(t.seed)  # the score head's initialisation
    device = resolve_device(cfg.model.device)
    precision = run_precision(cfg.model, device, ckpt.parents[1] if ckpt is not None else None)
    if precision.line():
        log(str(precision.line()))
    dtype = precision.compute if cfg.model.lora_rank and precision.compute else precision.weights
    pure = precision_warning(cfg.model)
    if pure:
        log(f"warning: {pure}")
    if t.keep_freed_memory and device.type == "cpu":
        keep_freed_memory()
    tokenizer = load_tokenizer(
        cfg.model.name_or_path, cfg.model.trust_remote_code, cfg.model.gguf_file
    )
    if tokenizer.eos_token_id is None:
        raise UserError(f"model.name_or_path: the tokenizer of {cfg.model.name_or_path} has no EOS")
    data = load_pairs(cfg, tokenizer)
    if data.dropped_long:
        log(
            f"data: dropped {data.dropped_long} pairs longer than data.max_length = "
            f"{cfg.data.max_length} tokens"
        )
    model = _load_model(cfg, ckpt, device, dtype, tokenizer.pad_token_id)
    setattr(model.config, FORMAT_KEY, data.layout)  # saved in config.json: how rm: lays out text
    total_steps = t.max_steps or t.epochs * steps_per_epoch(len(data.train), t.batch_size)
    optimizer = build_optimizer(model, cfg.optimizer)
    scheduler = build_scheduler(optimizer, max(1, total_steps), cfg.optimizer)
    return RMRun(
        cfg,
        model,
        tokenizer,
        optimizer,
        scheduler,
        data,
        device,
        total_steps,
        precision,
        precision.compute,
    )


def train_step(run: RMRun, step: int) -> dict[str, Any]:
    """One optimizer step on batch `step` (1-based); returns its metrics."""
    t, opt = run.cfg.training, run.cfg.optimizer
    start = time.perf_counter()
    idx = batch_indices(step, len(run.data.train), t.batch_size, t.seed)
    pairs = [run.data.train[i] for i in idx]
    run.optimizer.zero_grad(set_to_none=True)
    loss_sum, chosen, rejected, real, width = 0.0, [], [], 0, 0
    for i in range(0, len(pairs), t.micro_batch_size):
        batch = collate_pairs(pairs[i : i + t.micro_batch_size], run.pad_id)
        c, r = pair_rewards(run.model, batch, run.device, run.compute_dtype)
        margin = batch.margin.to(run.device)
        losses = bradley_terry_losses(c, r, margin, t.center_rewards_coefficient)
        (losses.sum() / len(pairs)).backward()  # the mean over the whole optimizer batch
        loss_sum += float(losses.detach().sum())
        chosen.append(c.detach().cpu())
        rejected.append(r.detach().cpu())
        real += int(batch.attention_mask.sum())
        width += batch.input_ids.numel()
    params = [p for p in run.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, opt.max_grad_norm or math.inf)
    lr = run.scheduler.get_last_lr()[0]  # the lr this step is taken with
    optimizer_step(run.optimizer)
    run.scheduler.step()
    elapsed = time.perf_counter() - start
    c_all, r_all = torch.cat(chosen), torch.cat(rejected)
    return {
        "step": step,
        "epoch": (step - 1) // run.steps_per_epoch,
        "loss": loss_sum / len(pairs),
        "accuracy": pairwise_accuracy(c_all, r_all),
        "margin": float((c_all - r_all).mean()),
        "reward_mean": float(torch.cat([c_all, r_all]).mean()),
        "lr": lr,
        "grad_norm": float(grad_norm),
        "pairs": len(pairs),
        "tokens": real,
        "padding_fraction": 1.0 - real / max(width, 1),
        "tokens_per_s": real / max(elapsed, 1e-9),
    }


def trainer_state(run: RMRun, step: int, **extra: Any) -> dict[str, Any]:
    """What a checkpoint needs besides the weights to continue exactly where it stopped."""
    cuda = run.device.type == "cuda"
    return {
        "step": step,
        "num_pairs": len(run.data.train),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(run.device) if cuda else None,
        **extra,
    }


def restore_trainer_state(run: RMRun, ckpt: Path) -> dict[str, Any]:
    """Load optimizer, scheduler and RNG state from `ckpt`; returns the whole saved state."""
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    if state["num_pairs"] != len(run.data.train):
        raise UserError(
            f"--resume: the run had {state['num_pairs']} training pairs, the data now has "
            f"{len(run.data.train)}"
        )
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    if run.device.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], run.device)
    return state


def run_rm(
    cfg: RMConfig,
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    resume: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    allow_config_change: bool = False,
) -> dict[str, Any]:
    """Train a reward model on `cfg`'s pairs; returns the summary (also RUN_DIR/summary.json).

    `resume=True` continues from the latest RUN_DIR/checkpoints/step-N (same config required).
    `on_step(step, metrics)` is called after every optimizer step. SIGINT/SIGTERM finish the
    step, save a checkpoint and raise `TrainingInterrupted`, as in `rlvr sft`.
    """
    from rlvr.models.lora import trainable_parameters
    from rlvr.observe.metrics import memory_metrics
    from rlvr.runs.checkpoint import save_model

    start = time.perf_counter()
    ckpt = None
    if resume:
        check_same_config(
            to_dict(cfg),
            run_dir,
            allow_change=allow_config_change,
            warn=log,
            defaults=to_dict(RMConfig()),
        )
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise UserError(
                f"--resume: no checkpoints/step-N with trainer_state.pt in {run_dir} "
                "(they are saved every checkpoint.every steps and when a run is interrupted)"
            )
    run = prepare_rm(cfg, ckpt, log)
    step, previous_wall = 0, 0.0
    if cfg.checkpoint.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    summary: dict[str, Any] = {"model": cfg.model.name_or_path, **run.precision.record()}
    if ckpt is not None:
        state = restore_trainer_state(run, ckpt)
        step, previous_wall = state["step"], state["wall_seconds"]
        if state.get("eval_before") is not None:
            summary["eval_before"] = state["eval_before"]
        log(f"resumed from {ckpt} (step {step} of {run.total_steps})")
        truncate_jsonl(run_dir / "metrics.jsonl", step)
        truncate_jsonl(run_dir / "timings.jsonl", step)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, run_dir / "config.yaml")
        write_precision(run_dir, run.precision)
        (run_dir / "metrics.jsonl").write_text("")  # a fresh run never appends to an old one
    trainable, total_params = trainable_parameters(run.model)
    log(
        f"rm: {len(run.data.train)} training and {len(run.data.eval)} held-out pairs from "
        f"{run.data.source} ({run.data.layout} layout), {run.total_steps} steps of "
        f"{cfg.training.batch_size}, {trainable:,} of {total_params:,} parameters trainable"
    )
    out = RunLog(run_dir, to_dict(cfg), cfg.logging, deterministic=cfg.checkpoint.deterministic)
    triggers = CheckpointTriggers(cfg.checkpoint)
    e = cfg.eval
    schedule = (
        EvalSchedule(e.before, e.every, e.after, run.total_steps)
        if run.data.eval
        else EvalSchedule(False, 0, False, run.total_steps)
    )
    bar = out.start_progress(run.total_steps, progress and cfg.logging.progress, "rlvr rm")
    for _ in range(step):  # a resumed run's bar starts where the run stopped
        bar.update({})
    try:
        if schedule.before and step == 0:
            summary["eval_before"] = run.evaluate()
            out.write_eval_before(summary["eval_before"])  # metrics.jsonl's step-0 row
            log(eval_line("before", summary["eval_before"]))
        while step < run.total_steps:
            step += 1
            t_step = time.perf_counter()
            metrics = train_step(run, step)
            last = step == run.total_steps and schedule.after
            if schedule.periodic(step) or last:  # the last row carries the evaluation after
                held_out = run.evaluate()
                metrics.update({f"eval_{k}": v for k, v in held_out.items()})
                if last:
                    summary["eval_after"] = held_out
            metrics["step_time_s"] = time.perf_counter() - t_step
            metrics.update(memory_metrics(run.device))
            bar.update(metrics)  # before the row is written: deterministic mode moves times out
            out.write(metrics, step)
            save, signum = triggers.check(step)
            if save:
                state = trainer_state(
                    run,
                    step,
                    eval_before=summary.get("eval_before"),
                    wall_seconds=previous_wall + time.perf_counter() - start,
                )
                save_checkpoint(
                    run_dir,
                    step,
                    run.model,
                    run.tokenizer,
                    state,
                    cfg.checkpoint.keep_last,
                    weights_in_state=False,  # resumes reload the checkpoint's HF files/adapter
                )
                triggers.saved()
            if signum:
                raise TrainingInterrupted(signum, step, run_dir, command="rm")
            if on_step is not None:
                on_step(step, metrics)
        bar.close()
        if "eval_after" in summary:
            log(eval_line("after", summary["eval_after"]))
        if cfg.checkpoint.save_final:
            save_model(run.model, run.tokenizer, run_dir / "final")
    finally:
        triggers.close()
        out.close()
    summary.update(
        steps=run.total_steps,
        wall_seconds=previous_wall + time.perf_counter() - start,
        pairs=len(run.data.train),
        eval_pairs=len(run.data.eval),
        dropped_long=run.data.dropped_long,
        layout=run.data.layout,
        trainable_parameters=trainable,
    )
    if ckpt is not None:
        summary["resumed_from_step"] = int(ckpt.name.removeprefix("step-"))
    write_summary(run_dir, summary)
    return summary
