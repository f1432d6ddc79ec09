"""Pretrain the embedded base model from scratch: a tiny Llama that adds numbers badly.

    python -m rlvr.models.embedded.build --out DIR [--seed 0] [--task addition|tools]

The base model must look like a miniature of a real pretrained LM before R1-Zero-style RL:
- it usually answers at once, and its direct answers drop every carry (right on ~13% of
  3-digit problems): a *systematic* error, so greedy accuracy is low;
- with probability ~10%, independent of the problem, it first writes a `<think>` trace of
  column additions, and traces are executed correctly.
RL with the exact-answer reward can then raise accuracy only by making the model reason more
often, and response length grows with accuracy.

Pretraining only sees TRAIN problems (see `AdditionTask`). The loss is next-token cross-entropy
on completion tokens only (the prompt is random digits, nothing to learn there). Two phases
(DEFAULT_PHASES):

1. 1000 steps with 50% traces: with 10% traces from the start nothing was learned in 1500 steps;
2. 500 steps with 10% traces, so the first-token prior P(<think>) settles near 10%. Traces
   remain in the data, so the skill is kept while the prior moves.

About 0.1 s a step with 2 threads on an idle 2-core CPU: ~2.5 minutes in all. Tokenizer and
weights are rebuilt bit-identically from the seed (same thread count). docs/embedded-model.md
records the measurements behind each choice.

`--task tools` builds `embedded-tools` instead: the same model and loop on multiplication,
answered directly (carry-dropped) or with a python tool call; its corpus, tokenizer additions
and evaluation are in tools_corpus.py (TOOLS_PHASES: the tool-call share in place of the trace
share).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import string
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlvr.data.tasks.addition import AdditionTask
from rlvr.data.tasks.multiplication import MultiplicationTask
from rlvr.markup import THINK_CLOSE, THINK_OPEN
from rlvr.models.embedded import tools_corpus

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
CHARACTERS = string.digits + string.ascii_letters + " +-=*.,:?\n"


@dataclass(frozen=True)
class Phase:
    """A stretch of pretraining with one data mix and one loss normalisation.

    trace_fraction: probability that a completion is a `<think>` trace (else a direct answer);
        with --task tools, that it is a tool call.
    loss_normalization: "token" = mean over all completion tokens of the batch (a 33-token trace
        outweighs a 4-token direct answer 8:1); "sample" = mean over samples of each
        completion's mean token loss (a direct answer weighs as much as a trace).
    """

    steps: int
    trace_fraction: float
    loss_normalization: str = "token"


def parse_phases(spec: str) -> tuple[Phase, ...]:
    """'600:0.5:sample,800:0.5:token' -> (Phase(600, 0.5, 'sample'), Phase(800, 0.5, 'token'))."""
    phases = []
    for part in spec.split(","):
        steps, fraction, *norm = part.split(":")
        phases.append(Phase(int(steps), float(fraction), *norm))
    return tuple(phases)


DEFAULT_PHASES = parse_phases("1000:0.5:token,500:0.1:token")
# tools: half tool calls to learn to write and read them, then a small share sets the prior
TOOLS_PHASES = parse_phases("1000:0.5:token,600:0.07:token")
TASKS = ("addition", "tools")


@dataclass
class BuildConfig:
    task: str = "addition"  # or "tools": multiplication with a python tool (tools_corpus.py)
    seed: int = 0
    digits: int = 3
    # model: 2 layers x hidden 128 (FINDINGS: faster to learn than 4 layers on this CPU);
    # 8 heads, not 4: with 4 heads of 32, traces and direct answers competed and one stalled.
    # The shipped base sets head_dim=32 (8 x 32 = 256 attention width over hidden 128): vLLM's
    # CPU attention kernels need heads of >= 32, and 8 heads of 16 learned the same way.
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 8
    head_dim: int = 0  # 0 = hidden_size // num_heads
    max_position_embeddings: int = 128
    # optimisation
    batch_size: int = 64
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    warmup_steps: int = 100
    phases: tuple[Phase, ...] = DEFAULT_PHASES
    eval_every: int = 300
    eval_problems: int = 200


def build_tokenizer(
    characters: str = CHARACTERS, added_tokens: tuple[str, ...] = (THINK_OPEN, THINK_CLOSE)
) -> PreTrainedTokenizerFast:
    """One token per character, plus `<think>`/`</think>` as single added tokens.

    `<think>`/`</think>` (and the tools model's tool tags) are added as *non-special* tokens (as
    in Qwen3), so that decode(..., skip_special_tokens=True) drops `<eos>`/`<pad>` but keeps the
    tags the verifier reads. The Fuse decoder concatenates token strings: decode(encode(t)) == t.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(characters))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # "[\s\S]" rather than "." so that a newline is split into its own token too
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=BuildConfig.max_position_embeddings,
    )
    tokenizer.add_tokens(list(added_tokens))
    return tokenizer


def build_model(cfg: BuildConfig, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        head_dim=cfg.head_dim or cfg.hidden_size // cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    # transformers types the wrapped `to` as an unbound function (self as its first argument)
    model = LlamaForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def make_batch(
    task: AdditionTask,
    tokenizer: PreTrainedTokenizerFast,
    rng: random.Random,
    batch_size: int,
    trace_fraction: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels (prompt and padding = -100) for one batch of train problems.

    Whether a completion is a trace is a coin flip independent of the problem, so the model's
    P(<think> | prompt) is the same constant on every prompt.
    """
    rows = []
    for _ in range(batch_size):
        a, b = task.sample_train_pair(rng)
        if rng.random() < trace_fraction:
            completion = task.reasoning_completion(a, b)
        else:
            completion = task.direct_completion(a, b)
        prompt_ids = tokenizer.encode(task.format_prompt(a, b))
        completion_ids = tokenizer.encode(completion) + [tokenizer.eos_token_id]
        rows.append((prompt_ids, completion_ids))
    length = max(len(p) + len(c) for p, c in rows)
    input_ids = torch.full((batch_size, length), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, length), -100, dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        input_ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
    return input_ids, labels


def completion_loss(
    model: LlamaForCausalLM, input_ids: torch.Tensor, labels: torch.Tensor, normalization: str
) -> torch.Tensor:
    """Next-token cross-entropy (nats) on completion tokens, averaged per sample or per token."""
    logits = model(input_ids=input_ids).logits[:, :-1]
    targets = labels[:, 1:]
    mask = (targets != -100).float()
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=-100,
        reduction="none",
    ).view_as(mask)
    if normalization == "sample":
        return ((nll * mask).sum(1) / mask.sum(1)).mean()
    if normalization == "token":
        return (nll * mask).sum() / mask.sum()
    raise ValueError(f"loss_normalization must be 'sample' or 'token', got {normalization!r}")


def lr_at(step: int, total: int, cfg: BuildConfig) -> float:
    """Linear warm-up, then cosine decay from lr to lr * min_lr_ratio over the whole run."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


@torch.no_grad()
def heldout_report(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    task: AdditionTask,
    samples: list[dict],
) -> dict[str, float]:
    """Greedy decoding on held-out problems, three ways (fractions in [0, 1]).

    accuracy / think: plain greedy accuracy and how often it opens `<think>`;
    think_accuracy: accuracy when the completion is forced to start with `<think>`;
    carry_dropped: how often a direct answer (`<think>` banned) is exactly the carry-dropped sum.
    """
    from rlvr.rewards.exact import exact_answer_reward, is_reasoning

    think_id = tokenizer.convert_tokens_to_ids(THINK_OPEN)

    def complete(prefix: str, **kwargs) -> list[str]:
        ids = torch.tensor([tokenizer.encode(s["prompt"] + prefix) for s in samples])
        # transformers' own annotation of `generate` changes between releases (5.19 rejects a
        # LlamaForCausalLM as its `self`), so the call is not type-checked against it.
        out = cast(Any, model).generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=48, **kwargs
        )
        return [prefix + t for t in tokenizer.batch_decode(out[:, ids.shape[1] :], True)]

    def accuracy(texts: list[str]) -> float:
        return sum(exact_answer_reward(t, s) for t, s in zip(texts, samples)) / len(samples)

    model.eval()
    plain, forced = complete(""), complete(THINK_OPEN)
    direct = complete("", bad_words_ids=[[think_id]])
    model.train()
    operands = [tuple(map(int, s["prompt"].rstrip("=").split("+"))) for s in samples]
    return {
        "accuracy": accuracy(plain),
        "think": sum(map(is_reasoning, plain)) / len(samples),
        "think_accuracy": accuracy(forced),
        "carry_dropped": sum(
            t.strip() == task.direct_completion(a, b) for t, (a, b) in zip(direct, operands)
        )
        / len(samples),
    }


def pretrain(cfg: BuildConfig) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, dict]:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    task: Any  # an AdditionTask or MultiplicationTask, with the batch_fn and report_fn of its kind
    batch_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    report_fn: Callable[..., dict[str, float]]
    if cfg.task == "tools":
        task = MultiplicationTask(seed=cfg.seed)
        tokenizer = build_tokenizer(
            CHARACTERS + tools_corpus.EXTRA_CHARACTERS, tools_corpus.ADDED_TOKENS
        )
        batch_fn, report_fn = tools_corpus.make_tools_batch, tools_corpus.tools_report
    else:
        task = AdditionTask(digits=cfg.digits, seed=cfg.seed)
        tokenizer = build_tokenizer()
        batch_fn, report_fn = make_batch, heldout_report
    model = build_model(cfg, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}", flush=True)

    # held-out problems are only evaluated, never trained on
    eval_samples = task.heldout(cfg.eval_problems)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay},
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )
    schedule = [phase for phase in cfg.phases for _ in range(phase.steps)]
    total = len(schedule)
    start = time.perf_counter()
    model.train()
    for step, phase in enumerate(schedule):
        input_ids, labels = batch_fn(task, tokenizer, rng, cfg.batch_size, phase.trace_fraction)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, cfg)
        loss = completion_loss(model, input_ids, labels, phase.loss_normalization)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == total:
            report = report_fn(model, tokenizer, task, eval_samples)
            print(
                f"step {step + 1:5d}/{total} loss {loss.item():.4f} | held-out greedy: "
                + " ".join(f"{k} {v:.2f}" for k, v in report.items())
                + f" | {time.perf_counter() - start:.0f}s",
                flush=True,
            )
    info = {
        "seed": cfg.seed,
        "heldout_greedy": report,
        "train_seconds": round(time.perf_counter() - start, 1),
        "torch_threads": torch.get_num_threads(),
        # the CPU is often shared: a load above the thread count means train_seconds is inflated
        "load_average_1min": round(os.getloadavg()[0], 2),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "num_parameters": n_params,
        "build_config": asdict(cfg),
        "torch_version": torch.__version__,
    }
    return model.eval(), tokenizer, info


def save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, info: dict, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # transformers 5 writes its own class name; the 4.x name loads in both major versions
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model to")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a BuildConfig field (for experiments; the shipped model uses defaults)",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="addition",
        help="addition (base, small) or tools (embedded-tools: multiplication, a python tool)",
    )
    parser.add_argument(
        "--phases",
        type=parse_phases,
        default=None,
        help="e.g. 600:0.5:sample,400:0.1 (default: DEFAULT_PHASES, TOOLS_PHASES for tools)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    phases = args.phases or (TOOLS_PHASES if args.task == "tools" else DEFAULT_PHASES)
    cfg = BuildConfig(task=args.task, seed=args.seed, phases=phases)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in BuildConfig.__dataclass_fields__ or name in ("phases", "task"):
            parser.error(f"--set {item}: BuildConfig has no field {name!r}")
        setattr(cfg, name, type(getattr(cfg, name))(value))
    model, tokenizer, info = pretrain(cfg)
    save(model, tokenizer, info, args.out)
    print(f"saved to {args.out} in {info['train_seconds']:.0f}s of training", flush=True)


if __name__ == "__main__":
    main()
