"""Prove a refactor computes what the code before it computed: the same runs, bit for bit.

    python scripts/compare_runs.py --base REV [--head REV] [--scenario NAME ...] [--keep DIR]

Checks out REV into a temporary git worktree, runs each scenario once with REV's source and once
with this checkout's, or --head REV's (`PYTHONPATH=<tree>/src`, one thread,
`checkpoint.deterministic=true`), and
compares the SHA-256 of `metrics.jsonl` (the file, and its training rows without wall-clock
keys), of the held-out evaluations before and after training (`eval_before`, `eval_after` of
`summary.json`) and of the final weights (`final/model.safetensors`). Prints one JSON line per
scenario and exits 1 when what a pair computed differs (rows, evaluations or weights). Hashes
depend on the CPU's kernels (AVX2 vs AVX-512), so they are compared within one run on one
machine, never across.

Since issue 22 metrics.jsonl starts with a step-0 row, the evaluation before training; the
training rows (step >= 1) and the evaluations are compared, so a base from before that change
still compares equal (`metrics_file_identical`, the raw file, then says false).

Scenarios (each a few to ~40 seconds on a 2-core CPU):
  default       `rlvr train` with no overrides (the embedded default, 60 steps, evaluations)
  off_policy    the default with rollout.off_policy_steps=1 (background rollout, TIS)
  padded_kl     padded micro-batches, KL in the loss, two updates per step (old log-probs)
  dapo          dynamic sampling, overlong shaping and masking, token-mean loss
  torchrun_ddp  torchrun with 2 ranks, replicated learner
  torchrun_fsdp torchrun with 2 ranks, FSDP2-sharded learner
  lora_kl       LoRA adapters, KL to the adapter-disabled reference
  sft           `rlvr sft` on the embedded task's demonstrations
  tools         the tool-use example (`examples/tools.yaml`: the python tool in its sandbox)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DET = ["checkpoint.deterministic=true"]
SHORT = ["training.steps=6", "eval.size=0", "logging.samples_every=0"]
TORCHRUN = [
    "training.steps=3",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "training.mini_batch_size=8",
    "training.micro_batch_size=3",
    "eval.size=0",
    "logging.samples_every=0",
    "optimizer.lr=3e-4",
    "optimizer.warmup_steps=0",
]

# name -> (launcher, command and overrides)
SCENARIOS: dict[str, tuple[str, list[str]]] = {
    "default": ("python", ["train", *DET]),
    "off_policy": ("python", ["train", *DET, "rollout.off_policy_steps=1", "training.steps=20"]),
    "padded_kl": (
        "python",
        [
            "train",
            *DET,
            *SHORT,
            "training.token_budget=0",
            "algorithm.kl_coef=0.05",
            "training.ppo_epochs=2",
            "training.mini_batch_size=64",
            "algorithm.entropy_coef=0.01",
        ],
    ),
    "dapo": (
        "python",
        [
            "train",
            *DET,
            *SHORT,
            "algorithm.dynamic_sampling=true",
            "algorithm.loss_aggregation=token_mean",
            "reward.overlong_buffer=8",
            "reward.mask_truncated=true",
            "algorithm.clip_ratio_high=0.28",
        ],
    ),
    "torchrun_ddp": ("torchrun", ["train", *DET, *TORCHRUN, "algorithm.kl_coef=0.05"]),
    "torchrun_fsdp": ("torchrun", ["train", *DET, *TORCHRUN, "distributed.strategy=fsdp"]),
    "lora_kl": (
        "python",
        ["train", *DET, *SHORT, "model.lora_rank=8", "algorithm.kl_coef=0.05", "optimizer.lr=1e-3"],
    ),
    "sft": ("python", ["sft", *DET, "training.max_steps=20", "eval.size=50"]),
    "tools": ("python", ["train", "--config", "examples/tools.yaml", *DET]),
}


WALL_CLOCK = (
    "time_",
    "tokens_per_s",
    "memory_",
    "gpu_memory",
    "step_time_s",
    "wall_seconds",
    "tool_seconds",  # the sandbox's wall clock per call
)


def sha256(path: Path) -> str | None:
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def computed_sha256(path: Path, added: tuple[str, ...] = ()) -> str | None:
    """The hash of the file's training rows without wall-clock keys: what the run computed.
    (`rlvr sft` wrote wall-clock keys into metrics.jsonl even in deterministic mode before it
    shared `rlvr train`'s run log, which moves them to timings.jsonl. The step-0 row, the
    evaluation before training, is compared through `evals_sha256`: runs before issue 22 lack
    it.)"""
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 1) >= 1]
    # A non-finite value counts as null: metrics.jsonl has written null since issue 36, a bare
    # NaN before (the same number, computed the same way).
    rows = [
        {k: None if v != v or v in (math.inf, -math.inf) else v for k, v in r.items()} for r in rows
    ]
    rows = [
        {k: v for k, v in r.items() if not k.startswith(WALL_CLOCK) and k not in added}
        for r in rows
    ]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def evals_sha256(path: Path) -> str | None:
    """The hash of summary.json's held-out evaluations before and after training."""
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    evals = {k: summary.get(k) for k in ("eval_before", "eval_after")}
    return hashlib.sha256(json.dumps(evals, sort_keys=True).encode()).hexdigest()


def run(src: Path, name: str, out: Path, added: tuple[str, ...] = ()) -> dict[str, str | None]:
    launcher, args = SCENARIOS[name]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    prefix = [sys.executable]
    if launcher == "torchrun":
        prefix += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd = [*prefix, "-m", "rlvr", *args, "--output-dir", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent)
    if proc.returncode != 0:
        raise SystemExit(f"{name} with {src} failed:\n{proc.stderr[-3000:]}")
    return {
        "metrics": sha256(out / "metrics.jsonl"),
        "metrics_computed": computed_sha256(out / "metrics.jsonl", added),
        "evals": evals_sha256(out / "summary.json"),
        "weights": sha256(out / "final" / "model.safetensors"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision of the code before")
    parser.add_argument("--head", help="git revision of the code after (default: this checkout)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--keep", help="keep the run directories under this folder")
    parser.add_argument(
        "--added-metric",
        action="append",
        default=[],
        help="a metric the head logs and the base does not (a new feature's): left out of both "
        "sides' computed hash; every other value must still agree",
    )
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    root = Path(args.keep or tempfile.mkdtemp(prefix="compare-runs-"))
    root.mkdir(parents=True, exist_ok=True)
    trees = {"base": (root / "base-tree", args.base)}
    if args.head:
        trees["head"] = (root / "head-tree", args.head)
    for tree, rev in trees.values():
        if not tree.exists():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                check=True,
                capture_output=True,
            )
    base_tree = trees["base"][0]
    head_tree = trees["head"][0] if args.head else ROOT
    failed = False
    try:
        for name in names:
            result = {"scenario": name}
            for side, src in (("base", base_tree / "src"), ("head", head_tree / "src")):
                out = root / f"{name}-{side}"
                subprocess.run(["rm", "-rf", str(out)], check=True)
                result[side] = run(src, name, out, tuple(args.added_metric))
            base, head = result["base"], result["head"]
            computed = ("metrics_computed", "evals", "weights")
            result["identical"] = all(base[k] == head[k] for k in computed)
            result["metrics_file_identical"] = base["metrics"] == head["metrics"]
            failed |= not result["identical"]
            print(json.dumps(result), flush=True)
    finally:
        for tree, _ in trees.values() if not args.keep else ():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
