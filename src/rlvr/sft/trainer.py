"""Supervised fine-tuning (SFT) on prompt -> completion pairs, top to bottom.

The R1 recipe uses SFT three times: the cold start before RL, SFT on rejection-sampled traces,
and distillation into a small model. One optimizer step:

  1. take `batch_size` examples in a seeded per-epoch order
  2. pack them into rows of at most `pack_length` tokens (first-fit decreasing); inside a row every
     example gets its own block of a block-diagonal causal mask and positions restarting at 0, so
     a packed row computes exactly what the examples would compute one by one
  3. forward/backward `micro_batch_size` rows at a time; the loss is the cross-entropy of the
     completion tokens only (prompt tokens get label -100), summed and divided by the number of
     completion tokens of the whole optimizer batch, so gradient accumulation gives the gradient
     of one big batch:   L = sum_{completion tokens t} -log p(x_t | x_<t) / N_completion_tokens
  4. clip, AdamW step, scheduler step; metrics; periodic held-out evaluation and checkpoints

Token layout of one example: `prompt ids (encode_prompt, chat template when the model has one) +
completion ids + EOS`; prompt and completion are tokenised separately, which is how the model
sees them at generation time (the completion continues the encoded prompt).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.config import dump_yaml, to_dict
from rlvr.config.checks import precision_warning
from rlvr.errors import ConfigError, UserError
from rlvr.forward.packing import block_causal_mask
from rlvr.models.loading import Precision
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
    eval_line,
    run_precision,
    write_precision,
    write_summary,
)
from rlvr.sft.config import DEFAULT_EVAL_TOKENS, SFTConfig
from rlvr.sft.data import (
    IGNORE_INDEX,
    PackedBatch,
    SFTData,
    SFTExample,
    batch_indices,
    collate,
    load_sft_data,
    micro_batches,
    steps_per_epoch,
)

ATTENTION_WITH_4D_MASKS = ("eager", "sdpa")  # transformers passes a 4D mask to these as is

__all__ = ["SFTConfig", "run_sft"]


def completion_nll_sum(
    model: Any, batch: PackedBatch, compute_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Sum over completion tokens of -log p(token | its own example's prefix), nats (scalar).

    compute_dtype: the forward runs under torch.autocast to it (model.precision=bf16-mixed:
    bf16 compute over fp32 weights); the log-softmax and the loss are fp32 either way."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    context = (
        torch.autocast(device.type, dtype=compute_dtype, cache_enabled=False)
        if compute_dtype is not None
        else nullcontext()
    )
    with context:
        out = model(
            input_ids=batch.input_ids.to(device),
            attention_mask=block_causal_mask(batch.segment_ids.to(device), dtype),
            position_ids=batch.position_ids.to(device),
            use_cache=False,
        )
    logits = out.logits[:, :-1].float()
    targets = batch.labels[:, 1:].to(device)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def accumulate_gradients(
    model: Any, batches: Sequence[PackedBatch], compute_dtype: torch.dtype | None = None
) -> tuple[float, int]:
    """Backward the completion-token mean loss of all `batches` as one batch (forwards under
    autocast to `compute_dtype` when given, as in `completion_nll_sum`).

    Each micro batch's loss sum is divided by the token count of the *whole* optimizer batch
    before backward, so the accumulated gradient equals the gradient of the full-batch mean,
    whatever the micro-batch split. Returns (mean loss in nats per token, completion tokens).
    """
    total = sum(b.num_loss_tokens for b in batches)
    if total == 0:
        raise ValueError("optimizer batch without completion tokens")
    loss_sum = 0.0
    for b in batches:
        nll = completion_nll_sum(model, b, compute_dtype)
        (nll / total).backward()
        loss_sum += float(nll.detach())
    return loss_sum / total, total


@torch.no_grad()
def mean_completion_loss(
    model: Any,
    examples: Sequence[SFTExample],
    pad_id: int,
    rows_per_batch: int = 64,
    compute_dtype: torch.dtype | None = None,
) -> float:
    """Completion-token mean NLL (nats) over `examples`, e.g. held-out SFT rows."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        for i in range(0, len(examples), rows_per_batch):
            b = collate([[e] for e in examples[i : i + rows_per_batch]], pad_id)
            total += float(completion_nll_sum(model, b, compute_dtype))
            tokens += b.num_loss_tokens
    finally:
        model.train(was_training)
    return total / max(tokens, 1)


def _load_resumed_model(cfg: SFTConfig, ckpt: Path, device: torch.device, dtype: Any) -> Any:
    """The model as saved at `ckpt`: full weights, or the base with the checkpoint's adapter."""
    from rlvr.models.loading import load_model

    if not cfg.model.lora_rank:
        return load_model(
            replace(cfg.model, name_or_path=str(ckpt), gguf_file=None), device, dtype, train=True
        )
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    model = load_model(cfg.model, device, dtype, train=True)
    weights = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"), device=str(device))
    set_peft_model_state_dict(model, weights)
    return model


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class SFTRun:
    """What one SFT run holds once it is set up (see `prepare_sft`)."""

    cfg: SFTConfig
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    engine: Any  # a rollout engine over `model`, for held-out generation
    verifier: Callable[[str, Mapping[str, Any]], float]
    data: SFTData
    heldout: list[dict]
    heldout_ids: list[list[int]]
    device: torch.device
    pack_length: int
    total_steps: int
    precision: Precision  # model.precision as resolved (`run_precision`)
    compute_dtype: torch.dtype | None = None  # model.precision's autocast dtype (bf16-mixed)

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.data.train), self.cfg.training.batch_size)


def prepare_sft(cfg: SFTConfig, ckpt: Path | None, log: Callable[[str], None]) -> SFTRun:
    """Data, model (from `ckpt` when resuming), optimizer, scheduler and held-out problems.

    Every check of user input happens here, before the run directory is written. A resumed
    run (`ckpt` in RUN_DIR/checkpoints/) keeps the precision RUN_DIR recorded.
    """
    from rlvr.data.registry import build_task, heldout_size
    from rlvr.models.loading import (
        encode_prompt,
        load_model,
        load_tokenizer,
        resolve_device,
        uses_chat_template,
    )
    from rlvr.rewards.compose import build_verifier
    from rlvr.rollout import build_engine
    from rlvr.runs.optim import build_optimizer, build_scheduler

    t = cfg.training
    torch.manual_seed(t.seed)
    device = resolve_device(cfg.model.device)
    # model.precision as rlvr train reads it: fp32 masters under bf16-mixed (a LoRA base in
    # bf16: only its fp32 adapters train), pure weights of an explicit model.dtype
    precision = run_precision(cfg.model, device, ckpt.parents[1] if ckpt is not None else None)
    line = precision.line()
    if line:
        log(line)
    dtype = precision.compute if cfg.model.lora_rank and precision.compute else precision.weights
    pure = precision_warning(cfg.model)
    if pure:
        log(f"warning: {pure}")
    if t.keep_freed_memory and device.type == "cpu":
        keep_freed_memory()
    verifier = build_verifier(cfg.reward.verifier)
    if cfg.task.fewshot:
        raise ConfigError(
            "task.fewshot: rlvr sft teaches the answer format itself; few-shot prompts are for "
            "rlvr train (set task.fewshot=0)"
        )
    task = build_task(cfg.task)
    tokenizer = load_tokenizer(
        cfg.model.name_or_path, cfg.model.trust_remote_code, cfg.model.gguf_file
    )
    if tokenizer.eos_token_id is None:
        raise UserError(f"model.name_or_path: the tokenizer of {cfg.model.name_or_path} has no EOS")
    chat = uses_chat_template(tokenizer, cfg.model.chat_template)
    data = load_sft_data(cfg, task, tokenizer, chat)
    longest = max(len(e) for e in data.train)
    pack_length = t.pack_length or longest
    if t.packing and longest > pack_length:
        raise ConfigError(
            f"training.pack_length: {pack_length} is shorter than the longest example "
            f"({longest} tokens); raise it or set data.max_length"
        )
    if data.dropped_long or data.dropped_long_eval:
        log(
            f"data: dropped {data.dropped_long} train and {data.dropped_long_eval} held-out rows "
            f"longer than data.max_length = {cfg.data.max_length} tokens"
        )
    eval_size = heldout_size(task, cfg.eval.size)
    try:
        heldout = task.heldout(eval_size) if eval_size else []
    except ValueError as e:
        raise ConfigError(f"eval.size: {e}") from None
    heldout_ids = [
        encode_prompt(
            tokenizer,
            s["prompt"],
            chat=chat,
            system_prompt=s.get("system") or cfg.task.system_prompt,
        )
        for s in heldout
    ]
    if ckpt is not None:
        model = _load_resumed_model(cfg, ckpt, device, dtype)
    else:
        model = load_model(cfg.model, device, dtype, train=True)
    model.train()
    attn = getattr(getattr(model, "config", None), "_attn_implementation", "sdpa")
    if attn not in ATTENTION_WITH_4D_MASKS:
        raise ConfigError(
            f"model.name_or_path: SFT passes block-diagonal 4D attention masks, which need eager "
            f"or sdpa attention; the model uses {attn!r}"
        )
    total_steps = t.max_steps or t.epochs * steps_per_epoch(len(data.train), t.batch_size)
    optimizer = build_optimizer(model, cfg.optimizer)
    scheduler = build_scheduler(optimizer, max(1, total_steps), cfg.optimizer)
    return SFTRun(
        cfg=cfg,
        model=model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        engine=build_engine("fast", model, tokenizer),
        verifier=verifier,
        data=data,
        heldout=heldout,
        heldout_ids=heldout_ids,
        device=device,
        pack_length=pack_length,
        total_steps=total_steps,
        precision=precision,
        compute_dtype=precision.compute,
    )


def evaluate_sft(run: SFTRun) -> dict[str, float]:
    """Held-out problems through `evaluate` (as `rlvr train` does), plus `loss`: the mean
    completion NLL of the held-out SFT rows (data.eval_path), when there are any."""
    from rlvr.evaluation.evaluate import evaluate

    cfg, out = run.cfg, {}
    if run.heldout:
        out = evaluate(
            run.engine,
            run.heldout,
            run.heldout_ids,
            run.verifier,
            max_new_tokens=cfg.eval.max_new_tokens
            or max(DEFAULT_EVAL_TOKENS, run.data.longest_completion),
            t1_samples=cfg.eval.t1_samples,
            seed=cfg.training.seed + 12345,
            k=cfg.eval.k,
            budgets=tuple(cfg.eval.budgets),
        )
    if run.data.eval:
        out["loss"] = mean_completion_loss(
            run.model, run.data.eval, run.tokenizer.pad_token_id, compute_dtype=run.compute_dtype
        )
    return out


def train_step(run: SFTRun, step: int) -> dict[str, Any]:
    """One optimizer step on batch `step` (1-based); returns its metrics."""
    t, opt = run.cfg.training, run.cfg.optimizer
    start = time.perf_counter()
    idx = batch_indices(step, len(run.data.train), t.batch_size, t.seed)
    batches = micro_batches(
        [run.data.train[i] for i in idx],
        run.tokenizer.pad_token_id,
        packing=t.packing,
        pack_length=run.pack_length,
        micro_batch_size=t.micro_batch_size,
    )
    run.optimizer.zero_grad(set_to_none=True)
    loss, loss_tokens = accumulate_gradients(run.model, batches, run.compute_dtype)
    params = [p for p in run.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, opt.max_grad_norm or math.inf)
    lr = run.scheduler.get_last_lr()[0]  # the lr this step is taken with
    optimizer_step(run.optimizer)
    run.scheduler.step()
    elapsed = time.perf_counter() - start
    real = sum(b.num_real_tokens for b in batches)
    return {
        "step": step,
        "epoch": (step - 1) // run.steps_per_epoch,
        "loss": loss,
        "lr": lr,
        "grad_norm": float(grad_norm),
        "examples": len(idx),
        "rows": sum(b.input_ids.shape[0] for b in batches),
        "tokens": real,
        "completion_tokens": loss_tokens,
        "padding_fraction": 1.0 - real / sum(b.input_ids.numel() for b in batches),
        "tokens_per_s": real / max(elapsed, 1e-9),
    }


def trainer_state(run: SFTRun, step: int, **extra: Any) -> dict[str, Any]:
    """What a checkpoint needs besides the weights to continue exactly where it stopped."""
    cuda = run.device.type == "cuda"
    return {
        "step": step,
        "epoch": (step - 1) // run.steps_per_epoch,
        "position_in_epoch": (step - 1) % run.steps_per_epoch + 1,  # batches done this epoch
        "num_examples": len(run.data.train),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(run.device) if cuda else None,
        **extra,
    }


def restore_trainer_state(run: SFTRun, ckpt: Path) -> dict[str, Any]:
    """Load optimizer, scheduler and RNG state from `ckpt`; returns the whole saved state."""
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    if state["num_examples"] != len(run.data.train):
        raise UserError(
            f"--resume: the run had {state['num_examples']} SFT rows, the data now has "
            f"{len(run.data.train)}"
        )
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    if run.device.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], run.device)
    return state


def run_sft(
    cfg: SFTConfig,
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    resume: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    allow_config_change: bool = False,
) -> dict[str, Any]:
    """Fine-tune `cfg.model` on the SFT rows; returns the summary (also RUN_DIR/summary.json).

    `resume=True` continues from the latest RUN_DIR/checkpoints/step-N (same config required)
    and reaches the weights of an uninterrupted run. `on_step(step, metrics)` is called after
    every optimizer step (and after its checkpoint is written). SIGINT/SIGTERM finish the step,
    save a checkpoint and raise `TrainingInterrupted`, as in `rlvr train`.
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
            defaults=to_dict(SFTConfig()),
        )
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise UserError(
                f"--resume: no checkpoints/step-N with trainer_state.pt in {run_dir} "
                "(they are saved every checkpoint.every steps and when a run is interrupted)"
            )
    run = prepare_sft(cfg, ckpt, log)
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
        f"sft: {len(run.data.train)} rows from {run.data.source}, {run.total_steps} steps of "
        f"{cfg.training.batch_size}, {trainable:,} of {total_params:,} parameters trainable"
    )

    out = RunLog(run_dir, to_dict(cfg), cfg.logging, deterministic=cfg.checkpoint.deterministic)
    triggers = CheckpointTriggers(cfg.checkpoint)
    schedule = EvalSchedule.from_config(
        cfg.eval, run.total_steps, bool(run.heldout or run.data.eval)
    )
    bar = out.start_progress(run.total_steps, progress and cfg.logging.progress, "rlvr sft")
    for _ in range(step):  # a resumed run's bar starts where the run stopped
        bar.update({})
    try:
        if schedule.before and step == 0:
            summary["eval_before"] = evaluate_sft(run)
            out.write_eval_before(summary["eval_before"])  # metrics.jsonl's step-0 row
            log(eval_line("before", summary["eval_before"]))
        while step < run.total_steps:
            step += 1
            t_step = time.perf_counter()
            metrics = train_step(run, step)
            if schedule.periodic(step):
                metrics.update({f"eval_{k}": v for k, v in evaluate_sft(run).items()})
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
                raise TrainingInterrupted(signum, step, run_dir, command="sft")
            if on_step is not None:
                on_step(step, metrics)
        bar.close()
        if schedule.after:
            summary["eval_after"] = evaluate_sft(run)
            out.write_eval(summary["eval_after"], step)
            log(eval_line("after", summary["eval_after"]))
        if cfg.checkpoint.save_final:
            save_model(run.model, run.tokenizer, run_dir / "final")
    finally:
        triggers.close()
        out.close()
    summary.update(
        steps=run.total_steps,
        wall_seconds=previous_wall + time.perf_counter() - start,
        examples=len(run.data.train),
        dropped_long=run.data.dropped_long,
        eval_examples=len(run.data.eval),
        dropped_long_eval=run.data.dropped_long_eval,
        trainable_parameters=trainable,
    )
    if ckpt is not None:
        summary["resumed_from_step"] = int(ckpt.name.removeprefix("step-"))
    write_summary(run_dir, summary)
    return summary
