"""`torchrun --nproc-per-node 2 -m rlvr train` (gloo, CPU) equals one process with the same
global batch and seed: per-step losses and statistics, and the final weights, within fp32
rounding, for every loss normalisation (token mean, sequence mean, constant)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

# 4 prompts x G=4 = 16 rows; mini-batches of 8 (two optimizer updates per step, so the second
# one has ratio != 1 and needs the old-policy pass) and micro-batches of 3 (uneven shares).
BASE = [
    "training.steps=2",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "training.mini_batch_size=8",
    "training.micro_batch_size=3",
    "eval.size=0",
    "logging.samples_every=0",
    "optimizer.lr=3e-4",
    "optimizer.warmup_steps=0",
]
STATS = ("loss", "grad_norm", "entropy", "kl", "clip_fraction", "advantage_abs_mean")


def run(out: Path, overrides: list[str], nproc: int) -> None:
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "rlvr", "train", *BASE, *overrides, "--output-dir", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.loss_aggregation=seq_mean_token_mean", "algorithm.kl_coef=0.05"],
        ["algorithm.loss_aggregation=token_mean"],
        ["algorithm.loss_aggregation=seq_mean_token_sum_norm", "algorithm.advantage=dr_grpo"],
    ],
    ids=["seq_mean_token_mean+kl", "token_mean", "seq_mean_token_sum_norm"],
)
def test_two_gloo_ranks_equal_one_process(tmp_path, overrides):
    run(tmp_path / "one", overrides, nproc=1)
    run(tmp_path / "two", overrides, nproc=2)
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2]
    for a, b in zip(one, two, strict=True):
        # keyed sampling: the ranks drew exactly the completions one process draws
        assert a["reward_mean"] == b["reward_mean"]
        assert a["completion_length_mean"] == b["completion_length_mean"]
        for key in STATS:
            if key in a:
                assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-6), (key, a, b)
    assert any(abs(r["loss"]) > 1e-6 for r in one)  # the second update of a step moves the ratio
    w1 = load_file(tmp_path / "one" / "final" / "model.safetensors")
    w2 = load_file(tmp_path / "two" / "final" / "model.safetensors")
    assert w1.keys() == w2.keys()
    for name in w1:
        assert (w1[name] - w2[name]).abs().max() < 2e-5, name
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert not (tmp_path / "one" / "summary.json").read_text().count("world_size")
