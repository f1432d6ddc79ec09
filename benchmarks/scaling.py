"""How rlvr's GRPO step time scales with the number of generated tokens.

    python benchmarks/scaling.py [--groups 4 8 16] [--lengths 64 128 256] [--prompts 2]
                                 [--steps 3] [--plot docs/img/scaling.png]

For every G in --groups and max length in --lengths, runs `--steps` GRPO steps (the first one,
a warm-up, is not counted) of the same code path as `rlvr train` (fast engine, packed update) on
a randomly initialised 4-layer Llama (hidden 256, ~3.2M parameters, a character vocabulary)
that cannot emit its EOS token, so every completion runs to the length limit and the generated
tokens per step are exactly prompts x G x length. Prints one row per configuration (median step,
generation and update time, generated tokens per step), a least-squares line
step_time = a + b * tokens with its R^2, writes the plot, and prints one JSON object as its
last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_model(directory: Path, max_positions: int = 512) -> None:
    """A random Llama that never ends a completion early: its tokenizer's EOS id is the one id
    past the model's vocabulary, so every completion runs to max_new_tokens and the generated
    tokens per step are exactly prompts x G x length (up to `max_positions` tokens in all)."""
    import torch
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    chars = list("0123456789+-*=,.:<>/ abcdefghijklmnopqrstuvwxyz")
    vocab = {c: i for i, c in enumerate(chars)}
    for special in ("<pad>", "<unk>", "<eos>"):  # <eos> last: outside the model's vocabulary
        vocab[special] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab) - 1,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=vocab["<pad>"],
        bos_token_id=None,
        eos_token_id=vocab["<eos>"],  # LlamaConfig's default (2) is a digit here
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def measure(model_dir: Path, g: int, length: int, prompts: int, steps: int) -> dict:
    from rlvr.config import load_config
    from rlvr.training.grpo import GRPOTrainer

    cfg = load_config(
        None,
        [
            f"model.name_or_path={model_dir}",
            f"rollout.group_size={g}",
            f"rollout.prompts_per_step={prompts}",
            f"rollout.max_new_tokens={length}",
            "eval.size=0",
            "logging.samples_every=0",
            "optimizer.warmup_steps=0",
            f"training.steps={steps}",
        ],
    )
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(cfg, Path(run_dir), progress=False, log=lambda _m: None)
        trainer.train()
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = rows[1:]  # the first step warms up allocators and caches
    tokens = [r["completion_length_mean"] * g * prompts for r in rows]
    return {
        "group_size": g,
        "max_new_tokens": length,
        "generated_tokens": statistics.median(tokens),
        "step_s": statistics.median(r["step_time_s"] for r in rows),
        "generate_s": statistics.median(r["time_generate_s"] for r in rows),
        "update_s": statistics.median(r["time_update_s"] for r in rows),
    }


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns (a, b, R^2)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot if ss_tot else 1.0


def plot(results: list[dict], line: tuple[float, float, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for g in sorted({r["group_size"] for r in results}):
        pts = [r for r in results if r["group_size"] == g]
        ax.plot(
            [r["generated_tokens"] for r in pts], [r["step_s"] for r in pts], "o-", label=f"G={g}"
        )
        for r in pts:
            ax.annotate(f"{r['max_new_tokens']}", (r["generated_tokens"], r["step_s"]), fontsize=7)
    xs = [r["generated_tokens"] for r in results]
    a, b, r2 = line
    grid = [min(xs), max(xs)]
    ax.plot(grid, [a + b * x for x in grid], "k--", lw=1, label=f"fit, R²={r2:.3f}")
    ax.set_xlabel("generated tokens per step")
    ax.set_ylabel("median step time, s")
    ax.set_title("GRPO step time vs generated tokens (labels: max length)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/scaling.png"))
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps: need at least 2 (the first is a warm-up)")
    import torch

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_model(model_dir)
        results = []
        for g in args.groups:
            for length in args.lengths:
                r = measure(model_dir, g, length, args.prompts, args.steps)
                results.append(r)
                print(
                    f"G={g:<3} len={length:<4} tokens/step={r['generated_tokens']:7.0f}  "
                    f"step {r['step_s']:6.2f} s  generate {r['generate_s']:6.2f} s  "
                    f"update {r['update_s']:6.2f} s",
                    flush=True,
                )
    line = fit([r["generated_tokens"] for r in results], [r["step_s"] for r in results])
    print(f"step_s = {line[0]:.3f} + {line[1] * 1000:.3f} ms x tokens   (R^2 = {line[2]:.4f})")
    plot(results, line, args.plot)
    summary = {
        "results": results,
        "fit_intercept_s": line[0],
        "fit_seconds_per_token": line[1],
        "fit_r2": line[2],
        "torch_threads": torch.get_num_threads(),
        "wall_s": time.perf_counter() - t0,
        "plot": str(args.plot),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
