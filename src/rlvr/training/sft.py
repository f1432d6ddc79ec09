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

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.config import (
    CheckpointConfig,
    DataConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    RewardConfig,
    _f,
    dump_yaml,
    to_dict,
    validate_model,
)
from rlvr.errors import ConfigError, DataError, UserError
from rlvr.training.allocator import keep_freed_memory
from rlvr.training.checkpoint import (
    check_same_config,
    latest_checkpoint,
    save_checkpoint,
    truncate_jsonl,
)
from rlvr.training.packing import block_causal_mask, pack

IGNORE_INDEX = -100  # label of tokens that carry no loss (prompt and padding)
ATTENTION_WITH_4D_MASKS = ("eager", "sdpa")  # transformers passes a 4D mask to these as is
DEFAULT_EVAL_TOKENS = 64  # eval.max_new_tokens = 0: at least this, or the longest completion

# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass
class SFTDataConfig:
    path: str | None = _f(
        None,
        "SFT rows: .jsonl/.json/.csv/.parquet or a HF dataset directory "
        "(unset: demonstrations drawn from the task section)",
    )
    prompt_field: str = _f("prompt", "column holding the prompt")
    completion_field: str = _f("completion", "column holding the target completion")
    system_field: str = _f("system", "column holding a per-row system message (chat models)")
    eval_path: str | None = _f(
        None, "held-out SFT rows; their completion loss is reported as eval_loss"
    )
    num_examples: int = _f(2000, "demonstrations drawn from the task when path is unset", ge=1)
    max_length: int = _f(
        0, "drop rows whose prompt + completion + EOS exceed this many tokens (0 = keep)", ge=0
    )
    seed: int = _f(0, "seed of the demonstration draw")


@dataclass
class SFTTrainingConfig:
    epochs: int = _f(1, "passes over the SFT rows", ge=1)
    max_steps: int = _f(0, "optimizer steps (0 = epochs * ceil(rows / batch_size))", ge=0)
    batch_size: int = _f(32, "sequences per optimizer step", ge=1)
    micro_batch_size: int = _f(
        32, "sequences (packed rows with packing) per forward/backward", ge=1
    )
    packing: bool = _f(True, "pack several examples per row (block-diagonal attention)")
    pack_length: int = _f(0, "tokens per packed row (0 = the longest example)", ge=0)
    seed: int = _f(0, "seed of the data order and of dropout")
    keep_freed_memory: bool = _f(
        True,
        "model on the CPU: keep the memory the process frees for reuse instead of returning it "
        "to the kernel (glibc malloc settings, process-wide); docs/training-speed.md",
    )


@dataclass
class SFTOptimizerConfig(OptimizerConfig):
    # Measured on the embedded model (docs/sft.md): 1e-3 gives held-out greedy accuracy 0.93
    # after 8 steps of 32 demonstrations where 3e-4 gives 0.44; 3e-3 overshoots (0.76 after
    # 2000 demonstrations where 1e-3 and 3e-4 reach 1.0). rlvr train's RL default is 1e-4.
    lr: float = _f(1e-3, "peak learning rate of AdamW", gt=0.0)


@dataclass
class SFTEvalConfig(EvalConfig):
    # A default SFT run is ~60 short steps; evaluating before and after is enough there.
    every: int = _f(0, "also evaluate every N steps during training (0 = off)", ge=0)
    max_new_tokens: int = _f(
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


# ---------------------------------------------------------------------------------------------
# Examples: tokenisation and loading


@dataclass(frozen=True)
class SFTExample:
    """One tokenised example; the loss covers `completion_ids` (which end with EOS)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def tokenize_example(
    tokenizer: Any, prompt: str, completion: str, *, chat: bool, system_prompt: str | None = None
) -> SFTExample:
    """prompt ids (encode_prompt) + completion ids + EOS, tokenised separately."""
    from rlvr.models.loading import encode_prompt

    prompt_ids = encode_prompt(tokenizer, prompt, chat=chat, system_prompt=system_prompt)
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return SFTExample(tuple(prompt_ids), (*completion_ids, tokenizer.eos_token_id))


@dataclass
class SFTData:
    train: list[SFTExample]
    eval: list[SFTExample]
    dropped_long: int
    dropped_long_eval: int
    source: str  # the file, or "<task> demonstrations"
    longest_completion: int  # tokens, EOS included


def _row_text(row: Mapping[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = row.get(name)
    if value is None or (isinstance(value, float) and value != value):  # NaN: empty pandas cell
        value = None
    if value is None or value == "":
        if required:
            raise DataError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    return value


def rows_to_texts(
    rows: Sequence[Mapping[str, Any]], cfg: SFTDataConfig, origin: str
) -> list[tuple[str, str, str | None]]:
    """(prompt, completion, system) of every row; DataError naming file, row and field."""
    if not rows:
        raise DataError(f"{origin}: no rows (expected at least one prompt/completion pair)")
    out = []
    for number, row in enumerate(rows, start=1):
        where = f"{origin} row {number}"
        prompt = _row_text(row, cfg.prompt_field, where, required=True)
        completion = _row_text(row, cfg.completion_field, where, required=True)
        system = _row_text(row, cfg.system_field, where, required=False)
        out.append((prompt, completion, system))
    return out


def demonstration_texts(task: Any, task_name: str, n: int, seed: int) -> list[tuple]:
    """n (prompt, completion, system) demonstrations: `task.demonstration(task.sample_train())`."""
    if not callable(getattr(task, "demonstration", None)):
        raise ConfigError(
            f"task.task: '{task_name}' has no demonstrations; set data.path to a file of "
            "prompt/completion rows"
        )
    rng = random.Random(f"rlvr-sft-demonstrations-{seed}")
    samples = [task.sample_train(rng) for _ in range(n)]
    return [(s["prompt"], task.demonstration(s), s.get("system")) for s in samples]


def load_sft_data(cfg: SFTConfig, task: Any, tokenizer: Any, chat: bool) -> SFTData:
    """Read (or draw) the rows, tokenise them and drop those longer than data.max_length."""
    from rlvr.data.datasets import load_rows

    d = cfg.data
    if d.path:
        train_texts = rows_to_texts(load_rows(d.path), d, d.path)
        source = d.path
    else:
        train_texts = demonstration_texts(task, cfg.task.task, d.num_examples, d.seed)
        source = f"{cfg.task.task} demonstrations"
    eval_texts = rows_to_texts(load_rows(d.eval_path), d, d.eval_path) if d.eval_path else []

    def encode(texts: list[tuple], origin: str) -> list[SFTExample]:
        out = []
        for number, (p, c, s) in enumerate(texts, start=1):
            ex = tokenize_example(
                tokenizer, p, c, chat=chat, system_prompt=s or cfg.task.system_prompt
            )
            # An example must open with a prompt token: in a packed row, the first completion
            # token is predicted from its own prompt, never from the previous example's EOS.
            for name, ids in (("prompt", ex.prompt_ids), ("completion", ex.completion_ids[:-1])):
                if not ids:
                    raise DataError(f"{origin} row {number}: field {name!r} encodes to no tokens")
            out.append(ex)
        return out

    train = encode(train_texts, source)
    evals = encode(eval_texts, d.eval_path or "")
    kept = [e for e in train if not d.max_length or len(e) <= d.max_length]
    kept_eval = [e for e in evals if not d.max_length or len(e) <= d.max_length]
    if not kept:
        raise DataError(
            f"{source}: every row is longer than data.max_length = {d.max_length} tokens"
        )
    return SFTData(
        train=kept,
        eval=kept_eval,
        dropped_long=len(train) - len(kept),
        dropped_long_eval=len(evals) - len(kept_eval),
        source=source,
        longest_completion=max(len(e.completion_ids) for e in kept),
    )


# ---------------------------------------------------------------------------------------------
# Packing and the loss


@dataclass
class PackedBatch:
    """Rows of one or more examples, right-padded to a common width T.

    input_ids, labels, position_ids, segment_ids: [R, T]. labels[r, t] is the token at t when t
    is a completion token, else IGNORE_INDEX (so logits at t - 1 predict it). segment_ids number
    the examples of a row 0, 1, ...; padding is one more segment, so it never sees real tokens
    and real tokens never see it.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    num_real_tokens: int

    @property
    def num_loss_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.num_real_tokens / self.input_ids.numel()


def collate(rows: Sequence[Sequence[SFTExample]], pad_id: int) -> PackedBatch:
    """Lay out rows of examples (see PackedBatch)."""
    width = max(sum(len(e) for e in row) for row in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    labels = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment_ids = torch.zeros(shape, dtype=torch.long)
    real = 0
    for r, row in enumerate(rows):
        t = 0
        for s, ex in enumerate(row):
            n_p, n = len(ex.prompt_ids), len(ex)
            input_ids[r, t : t + n] = torch.tensor(ex.prompt_ids + ex.completion_ids)
            labels[r, t + n_p : t + n] = torch.tensor(ex.completion_ids)
            position_ids[r, t : t + n] = torch.arange(n)
            segment_ids[r, t : t + n] = s
            t += n
        segment_ids[r, t:] = len(row)
        position_ids[r, t:] = torch.arange(width - t)
        real += t
    return PackedBatch(input_ids, labels, position_ids, segment_ids, real)


def completion_nll_sum(model: Any, batch: PackedBatch) -> torch.Tensor:
    """Sum over completion tokens of -log p(token | its own example's prefix), nats (scalar)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
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


def micro_batches(
    examples: Sequence[SFTExample],
    pad_id: int,
    *,
    packing: bool,
    pack_length: int,
    micro_batch_size: int,
) -> list[PackedBatch]:
    """The forward/backward units of one optimizer batch."""
    if packing:
        rows = [[examples[i] for i in r] for r in pack([len(e) for e in examples], pack_length)]
    else:
        rows = [[e] for e in examples]
    return [
        collate(rows[i : i + micro_batch_size], pad_id)
        for i in range(0, len(rows), micro_batch_size)
    ]


def accumulate_gradients(model: Any, batches: Sequence[PackedBatch]) -> tuple[float, int]:
    """Backward the completion-token mean loss of all `batches` as one batch.

    Each micro batch's loss sum is divided by the token count of the *whole* optimizer batch
    before backward, so the accumulated gradient equals the gradient of the full-batch mean,
    whatever the micro-batch split. Returns (mean loss in nats per token, completion tokens).
    """
    total = sum(b.num_loss_tokens for b in batches)
    if total == 0:
        raise ValueError("optimizer batch without completion tokens")
    loss_sum = 0.0
    for b in batches:
        nll = completion_nll_sum(model, b)
        (nll / total).backward()
        loss_sum += float(nll.detach())
    return loss_sum / total, total


@torch.no_grad()
def mean_completion_loss(
    model: Any, examples: Sequence[SFTExample], pad_id: int, rows_per_batch: int = 64
) -> float:
    """Completion-token mean NLL (nats) over `examples`, e.g. held-out SFT rows."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        for i in range(0, len(examples), rows_per_batch):
            b = collate([[e] for e in examples[i : i + rows_per_batch]], pad_id)
            total += float(completion_nll_sum(model, b))
            tokens += b.num_loss_tokens
    finally:
        model.train(was_training)
    return total / max(tokens, 1)


# ---------------------------------------------------------------------------------------------
# Data order and checkpoints


def epoch_order(num_examples: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a pure function of (seed, epoch), so resuming needs only
    the step number to continue the same stream."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=gen).tolist()


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return math.ceil(num_examples / batch_size)  # the last batch of an epoch may be smaller


def batch_indices(step: int, num_examples: int, batch_size: int, seed: int) -> list[int]:
    """Example indices of optimizer step `step` (1-based)."""
    spe = steps_per_epoch(num_examples, batch_size)
    epoch, position = divmod(step - 1, spe)
    start = position * batch_size
    return epoch_order(num_examples, seed, epoch)[start : start + batch_size]


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

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.data.train), self.cfg.training.batch_size)


def prepare_sft(cfg: SFTConfig, ckpt: Path | None, log: Callable[[str], None]) -> SFTRun:
    """Data, model (from `ckpt` when resuming), optimizer, scheduler and held-out problems.

    Every check of user input happens here, before the run directory is written.
    """
    from rlvr.data.registry import build_task
    from rlvr.models.loading import (
        encode_prompt,
        load_model,
        load_tokenizer,
        resolve_device,
        resolve_dtype,
        uses_chat_template,
    )
    from rlvr.rewards.compose import build_verifier
    from rlvr.rollout import build_engine
    from rlvr.training.optim import build_optimizer, build_scheduler

    t = cfg.training
    torch.manual_seed(t.seed)
    device = resolve_device(cfg.model.device)
    dtype = resolve_dtype(cfg.model.dtype, device)
    if t.keep_freed_memory and device.type == "cpu":
        keep_freed_memory()
    verifier = build_verifier(cfg.reward.verifier)
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
    eval_size = cfg.eval.size
    if hasattr(task, "eval"):  # a dataset holds out what it holds out
        eval_size = min(eval_size, len(task.eval))
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
    )


def evaluate_sft(run: SFTRun) -> dict[str, float]:
    """Held-out problems through `evaluate` (as `rlvr train` does), plus `loss`: the mean
    completion NLL of the held-out SFT rows (data.eval_path), when there are any."""
    from rlvr.training.evaluate import evaluate

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
        out["loss"] = mean_completion_loss(run.model, run.data.eval, run.tokenizer.pad_token_id)
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
    loss, loss_tokens = accumulate_gradients(run.model, batches)
    params = [p for p in run.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, opt.max_grad_norm or math.inf)
    lr = run.scheduler.get_last_lr()[0]  # the lr this step is taken with
    run.optimizer.step()
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
    every optimizer step (and after its checkpoint is written).
    """
    from rlvr.models.lora import trainable_parameters
    from rlvr.observe.loggers import build_loggers
    from rlvr.observe.metrics import JsonlWriter, Progress, memory_metrics
    from rlvr.training.checkpoint import save_model

    start = time.perf_counter()
    ckpt = None
    if resume:
        check_same_config(to_dict(cfg), run_dir, allow_change=allow_config_change, warn=log)
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise UserError(
                f"--resume: no checkpoints/step-N with trainer_state.pt in {run_dir} "
                "(periodic checkpoints need checkpoint.every > 0)"
            )
    run = prepare_sft(cfg, ckpt, log)
    step, previous_wall = 0, 0.0
    last_save = time.monotonic()
    if cfg.checkpoint.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    summary: dict[str, Any] = {"model": cfg.model.name_or_path}
    if ckpt is not None:
        state = restore_trainer_state(run, ckpt)
        step, previous_wall = state["step"], state["wall_seconds"]
        if state.get("eval_before") is not None:
            summary["eval_before"] = state["eval_before"]
        log(f"resumed from {ckpt} (step {step} of {run.total_steps})")
        truncate_jsonl(run_dir / "metrics.jsonl", step)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, run_dir / "config.yaml")
        (run_dir / "metrics.jsonl").write_text("")  # a fresh run never appends to an old one
    trainable, total_params = trainable_parameters(run.model)
    log(
        f"sft: {len(run.data.train)} rows from {run.data.source}, {run.total_steps} steps of "
        f"{cfg.training.batch_size}, {trainable:,} of {total_params:,} parameters trainable"
    )

    writer = JsonlWriter(run_dir / "metrics.jsonl")
    sinks = build_loggers(
        cfg.logging.report_to,
        run_dir,
        to_dict(cfg),
        wandb_project=cfg.logging.wandb_project,
        wandb_mode=cfg.logging.wandb_mode,
    )
    bar = Progress(run.total_steps, progress and cfg.logging.progress, desc="rlvr sft")
    for _ in range(step):  # a resumed run's bar starts where the run stopped
        bar.update({})
    has_eval = bool(run.heldout or run.data.eval)
    try:
        if cfg.eval.before and step == 0 and has_eval:
            summary["eval_before"] = evaluate_sft(run)
            sinks.log({f"eval/{k}": v for k, v in summary["eval_before"].items()}, 0)
            log(eval_line("before", summary["eval_before"]))
        while step < run.total_steps:
            step += 1
            t_step = time.perf_counter()
            metrics = train_step(run, step)
            last = step == run.total_steps
            if cfg.eval.every and step % cfg.eval.every == 0 and not (last and cfg.eval.after):
                metrics.update({f"eval_{k}": v for k, v in evaluate_sft(run).items()})
            metrics["step_time_s"] = time.perf_counter() - t_step
            metrics.update(memory_metrics(run.device))
            writer.write(metrics)
            sinks.log(metrics, step)
            bar.update(metrics)
            every = cfg.checkpoint.every and step % cfg.checkpoint.every == 0
            minutes = cfg.checkpoint.every_minutes
            if every or (minutes and time.monotonic() - last_save >= 60 * minutes):
                last_save = time.monotonic()
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
            if on_step is not None:
                on_step(step, metrics)
        bar.close()
        if cfg.eval.after and has_eval:
            summary["eval_after"] = evaluate_sft(run)
            sinks.log({f"eval/{k}": v for k, v in summary["eval_after"].items()}, step)
            log(eval_line("after", summary["eval_after"]))
        if cfg.checkpoint.save_final:
            save_model(run.model, run.tokenizer, run_dir / "final")
    finally:
        bar.close()
        writer.close()
        sinks.close()
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
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(run_dir / "summary.json")
    return summary


def eval_line(when: str, e: Mapping[str, float]) -> str:
    """One line of held-out results, worded like `rlvr train`'s."""
    parts = []
    if "accuracy" in e:
        parts.append(
            f"accuracy {e['accuracy']:.3f}  pass1_t1 {e['pass1_t1']:.3f}  "
            f"reasoning {e['reasoning_fraction']:.3f}  length {e['mean_length']:.1f}  "
            f"(n={e['n']})"
        )
    if "loss" in e:
        parts.append(f"sft loss {e['loss']:.4f}")
    return f"eval {when}: " + "  ".join(parts)
