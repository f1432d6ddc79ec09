"""A learned reward in place of the rule: rlvr sample -> pairs -> rlvr rm -> rlvr train.

    python benchmarks/reward_model.py [--workdir DIR] [--prompts 512] [--pairs-per-prompt 2]
        [--rm-model embedded] [--lr 1e-4] [--epochs 1] [--steps 60] [--skip-grpo]

1. `rlvr sample`: k = 8 completions at temperature 1 from the embedded base model for
   --prompts training prompts of the embedded addition task, and for the 200 held-out
   problems (sampling.split=heldout), each scored by the rule verifier (exact_answer).
2. Pairs: for each prompt, up to --pairs-per-prompt (correct, incorrect) completions of it,
   drawn without replacement (seeded): chosen = a verified-correct completion, rejected = an
   incorrect one. Training pairs come from the training prompts only, held-out pairs from the
   held-out problems (data.eval_path), so the reward model is measured on problems it never
   saw.
3. `rlvr rm`: a Bradley-Terry reward model started from --rm-model; its held-out pairwise
   accuracy before and after (target >= 0.90).
4. `rlvr train` on the embedded default (60 steps of 16 prompts x 8) with
   reward.verifier=rm:RM/final,exact_answer:0: the reward model is the only reward and the rule
   only watches (weight 0), so its reward/exact_answer_mean is the policy's training accuracy
   under the learned reward. The trainer's own held-out evaluation scores with the composite
   (reward >= 1 of the RM's score means nothing), so it is off; instead
5. `rlvr eval` scores the base model and the trained policy on the same 200 held-out problems
   with exact_answer: greedy accuracy before and after (target: +20 points).

It prints the figures, the learned reward against the rule over the steps (their means and the
within-group ranking agreement, rlvr.reward_model.agreement), each phase's wall time, and
writes them to WORKDIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def rlvr(*args: str) -> float:
    """Run `python -m rlvr ARGS...`; its wall time in seconds. Fails loudly."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlvr", *args], text=True, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"rlvr {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return time.perf_counter() - start


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def build_pairs(samples: list[dict[str, Any]], per_prompt: int, seed: int) -> list[dict]:
    """Up to `per_prompt` (correct, incorrect) pairs of each prompt's completions (module
    docstring), prompts in file order."""
    rng = random.Random(seed)
    by_prompt: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in samples:
        by_prompt[row["prompt"]].append(row)
    pairs = []
    for prompt, rows in by_prompt.items():
        right = [r["completion"] for r in rows if r["reward"] >= 1.0]
        wrong = [r["completion"] for r in rows if r["reward"] < 1.0]
        rng.shuffle(right)
        rng.shuffle(wrong)
        for chosen, rejected in list(zip(right, wrong))[:per_prompt]:
            pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return pairs


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default="runs/bench-reward-model")
    p.add_argument("--prompts", type=int, default=512, help="training prompts sampled")
    p.add_argument("--k", type=int, default=8, help="completions sampled per prompt")
    p.add_argument("--pairs-per-prompt", type=int, default=2)
    p.add_argument("--rm-model", default="embedded", help="the reward model's starting point")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=60, help="GRPO steps")
    p.add_argument("--normalize", default="none", choices=["none", "batch"])
    p.add_argument("--skip-grpo", action="store_true", help="stop after the reward model")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    results: dict[str, Any] = {"args": vars(args), "times_s": times}

    # 1. samples of the base model, scored by the rule
    sampling = [f"sampling.k={args.k}", f"sampling.seed={args.seed}", "--overwrite", "--quiet"]
    times["sample_s"] = rlvr(
        "sample", f"sampling.num_prompts={args.prompts}", *sampling,
        "--output-dir", str(work / "sample-train"),
    )  # fmt: skip
    times["sample_s"] += rlvr(
        "sample", "sampling.split=heldout", "sampling.num_prompts=200", *sampling,
        "--output-dir", str(work / "sample-heldout"),
    )  # fmt: skip

    # 2. pairs: verified-correct over incorrect completions of one prompt
    train_rows = read_jsonl(work / "sample-train" / "samples.jsonl")
    held_rows = read_jsonl(work / "sample-heldout" / "samples.jsonl")
    train = build_pairs(train_rows, args.pairs_per_prompt, args.seed)
    held = build_pairs(held_rows, args.pairs_per_prompt, args.seed + 1)
    write_jsonl(work / "pairs-train.jsonl", train)
    write_jsonl(work / "pairs-heldout.jsonl", held)
    base_accuracy = sum(r["reward"] >= 1.0 for r in train_rows) / len(train_rows)
    results["pairs"] = {"train": len(train), "heldout": len(held), "sample_accuracy": base_accuracy}
    print(
        f"samples: {len(train_rows)} train completions ({base_accuracy:.3f} correct), "
        f"{len(train)} train pairs, {len(held)} held-out pairs"
    )

    # 3. the reward model
    rm = work / "rm"
    times["rm_s"] = rlvr(
        "rm",
        f"data.path={work / 'pairs-train.jsonl'}",
        f"data.eval_path={work / 'pairs-heldout.jsonl'}",
        f"model.name_or_path={args.rm_model}",
        f"optimizer.lr={args.lr}",
        f"training.epochs={args.epochs}",
        f"training.batch_size={args.batch_size}",
        f"training.seed={args.seed}",
        "--output-dir", str(rm), "--overwrite", "--quiet",
    )  # fmt: skip
    summary = json.loads((rm / "summary.json").read_text())
    results["rm"] = {"before": summary["eval_before"], "after": summary["eval_after"]}
    print(
        f"reward model ({args.rm_model}, lr {args.lr:g}, {args.epochs} epoch(s), "
        f"{summary['steps']} steps): held-out pairwise accuracy "
        f"{summary['eval_before']['accuracy']:.3f} -> {summary['eval_after']['accuracy']:.3f} "
        f"(n={summary['eval_after']['n']}), {times['rm_s']:.0f} s"
    )
    if args.skip_grpo:
        (work / "results.json").write_text(json.dumps(results, indent=2))
        return

    # 4. GRPO with the reward model as the only reward, the rule watching at weight 0
    grpo = work / "grpo"
    name = f"rm:{(rm / 'final').resolve()}"
    times["grpo_s"] = rlvr(
        "train",
        f"reward.verifier={name}:1.0,exact_answer:0",
        f"reward.rm_normalize={args.normalize}",
        f"training.steps={args.steps}",
        f"training.seed={args.seed}",
        "eval.before=false", "eval.after=false", "eval.every=0",
        "--output-dir", str(grpo), "--overwrite", "--quiet",
    )  # fmt: skip
    rows = [r for r in read_jsonl(grpo / "metrics.jsonl") if r.get("step", 0) > 0]
    series = [
        {
            "step": r["step"],
            "learned_reward": r[f"reward/{name}_mean"],
            "rule_accuracy": r["reward/exact_answer_mean"],
            "agreement": r.get("reward/agreement/exact_answer"),
            "length": r["completion_length_mean"],
        }
        for r in rows
    ]
    results["series"] = series
    results["diagnostics"] = sorted({d for r in rows for d in r.get("diagnostics", [])})

    # 5. held-out greedy accuracy under the rule, before and after
    times["eval_s"] = rlvr(
        "eval", "--model", "embedded", "--model", str(grpo / "final"),
        "--n", "200", "--output", str(work / "eval.json"),
    )  # fmt: skip
    report = json.loads((work / "eval.json").read_text())
    before, after = (m["metrics"] for m in report["models"])
    results["heldout"] = {"before": before, "after": after}
    (work / "results.json").write_text(json.dumps(results, indent=2))

    print("\nstep  learned reward (rm mean)  rule accuracy (exact_answer)  agreement  length")
    for s in series:
        if s["step"] % 5 == 0 or s["step"] == 1:
            agree = "-" if s["agreement"] is None else f"{s['agreement']:.3f}"
            print(
                f"{s['step']:>4}  {s['learned_reward']:>24.3f}  {s['rule_accuracy']:>28.3f}  "
                f"{agree:>9}  {s['length']:>6.1f}"
            )
    print(
        f"\nheld-out greedy accuracy (exact_answer, n={before['n']}): "
        f"{before['accuracy']:.3f} -> {after['accuracy']:.3f} "
        f"({100 * (after['accuracy'] - before['accuracy']):+.1f} points); reasoning "
        f"{before['reasoning_fraction']:.3f} -> {after['reasoning_fraction']:.3f}"
    )
    print(f"diagnostics that fired: {', '.join(results['diagnostics']) or 'none'}")
    total = sum(times.values())
    print(
        "wall time: "
        + ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in times.items())
        + f"; total {total:.0f} s"
    )


if __name__ == "__main__":
    main()
