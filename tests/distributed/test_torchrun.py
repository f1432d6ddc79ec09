"""`torchrun --nproc-per-node 2 -m rlvr train` (gloo, CPU) equals one process with the same
global batch and seed: per-step losses and statistics, and the final weights, within fp32
rounding, for every loss normalisation (token mean, sequence mean, constant), with replicated
(DDP) and sharded (FSDP2) learners."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

# 4 prompts x G=4 = 16 rows; mini-batches of 8 (two optimizer updates per step, so the second
# one has ratio != 1 and needs the old-policy pass) and micro-batches of 3 (uneven shares).
# adam_eps 1e-5: with 1e-8, a coordinate whose exact gradient is ~0 (the embedding row of a token
# that never occurs) takes an Adam step of +-lr from rounding noise alone, and the noise's sign
# depends on the summation order (measured 2.4e-4 apart on such a row; 2e-6 with 1e-5).
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
    "optimizer.adam_eps=1e-5",
]
MODES = {
    "seq_mean_token_mean+kl": [
        "algorithm.loss_aggregation=seq_mean_token_mean",
        "algorithm.kl_coef=0.05",
    ],
    "token_mean": ["algorithm.loss_aggregation=token_mean"],
    "seq_mean_token_sum_norm": [
        "algorithm.loss_aggregation=seq_mean_token_sum_norm",
        "algorithm.advantage=dr_grpo",
    ],
    # PPO: a value model beside the policy, replicated or sharded like it
    "gae": ["algorithm.advantage=gae", "algorithm.lam=0.9", "critic.value_clip=0.2"],
}
STATS = (
    "loss",
    "grad_norm",
    "entropy",
    "kl",
    "clip_fraction",
    "advantage_abs_mean",
    "critic_loss",
    "critic_grad_norm",
    "value_old_mean",
    "explained_variance",
)


def run(out: Path, overrides: list[str], nproc: int, *extra: str) -> None:
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "rlvr", "train", *BASE, *overrides, "--output-dir", str(out)]
    proc = subprocess.run([*cmd, "--quiet", *extra], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(run_dir: Path) -> dict:
    return load_file(run_dir / "final" / "model.safetensors")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict[str, Path]:
    """The single-process runs, made once per mode and shared by the strategies."""
    root = tmp_path_factory.mktemp("one")
    done: dict[str, Path] = {}

    def get(mode: str) -> Path:
        if mode not in done:
            run(root / mode, MODES[mode], nproc=1)
            done[mode] = root / mode
        return done[mode]

    return get


def assert_same_run(one: Path, two: Path) -> None:
    a_rows, b_rows = rows(one), rows(two)
    assert [r["step"] for r in a_rows] == [r["step"] for r in b_rows] == [1, 2]
    for a, b in zip(a_rows, b_rows, strict=True):
        # keyed sampling: the ranks drew exactly the completions one process draws
        assert a["reward_mean"] == b["reward_mean"]
        assert a["completion_length_mean"] == b["completion_length_mean"]
        for key in STATS:
            if key in a:
                assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-6), (key, a, b)
    assert any(abs(r["loss"]) > 1e-6 for r in a_rows)  # the second update moves the ratio
    w1, w2 = weights(one), weights(two)
    assert w1.keys() == w2.keys()
    for name in w1:
        assert (w1[name] - w2[name]).abs().max() < 2e-5, name


@pytest.mark.parametrize(
    ("mode", "strategy"),
    [
        ("seq_mean_token_mean+kl", "ddp"),
        ("token_mean", "ddp"),
        ("seq_mean_token_sum_norm", "ddp"),
        ("token_mean", "fsdp"),
        ("gae", "ddp"),
        ("gae", "fsdp"),
    ],
)
def test_two_gloo_ranks_equal_one_process(tmp_path, one_process, mode, strategy):
    two = tmp_path / "two"
    run(two, [*MODES[mode], f"distributed.strategy={strategy}"], nproc=2)
    assert_same_run(one_process(mode), two)
    summary = json.loads((two / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert "world_size" not in json.loads((one_process(mode) / "summary.json").read_text())


def test_fsdp_checkpoint_resumes_to_the_same_weights(tmp_path):
    """FSDP gathers the sharded weights and AdamW state into the checkpoint (a critic's too:
    PPO's mode); resuming from step 1 (sharding them again) ends where the uninterrupted run
    ended."""
    opts = [*MODES["gae"], "distributed.strategy=fsdp", "checkpoint.every=1"]
    full = tmp_path / "full"
    run(full, opts, 2)
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "checkpoints" / "step-2")
    shutil.rmtree(cut / "final")
    run(cut, opts, 2, "--resume")
    for a, b in zip(rows(full), rows(cut), strict=True):
        for key, value in a.items():
            if key.startswith(("time_", "tokens_per_s", "step_time", "memory_")):
                continue  # wall-clock and memory figures differ between any two runs
            same = value == b[key] or (value != value and b[key] != b[key])  # NaN == NaN
            assert same or math.isclose(value, b[key], rel_tol=1e-5), (key, a, b)
    w1, w2 = weights(full), weights(cut)
    for name in w1:
        assert (w1[name] - w2[name]).abs().max() < 1e-6, name


@pytest.fixture(scope="module")
def k_step_one_process(tmp_path_factory) -> Path:
    one = tmp_path_factory.mktemp("k_step") / "one"
    run(one, K_STEP, nproc=1)
    return one


K_STEP = [*MODES["token_mean"], "rollout.max_staleness=2", "training.steps=3", "eval.size=8"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_k_step_off_policy_rollouts_under_torchrun_equal_one_process(
    tmp_path, k_step_one_process, strategy
):
    """rollout.max_staleness=2 with 2 ranks: the background rollouts gather their rounds on
    a process group of their own while the updates run, and the run is the single process's:
    the same completions, staleness 0, 1, 2, losses within fp32 rounding, the same weights and
    held-out evaluation. FSDP: the queued batches carry the gathered whole weights, and
    evaluation and saving gather into a whole copy of their own."""
    one, two = k_step_one_process, tmp_path / "two"
    run(two, [*K_STEP, f"distributed.strategy={strategy}"], nproc=2)
    a_rows, b_rows = ([r for r in rows(d) if "loss" in r] for d in (one, two))
    assert [r["rollout_staleness"] for r in b_rows] == [0, 1, 2]
    for a, b in zip(a_rows, b_rows, strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        assert a["completion_length_mean"] == b["completion_length_mean"]
        for key in (*STATS, "tis_weight_mean", "rollout_mismatch_kl"):
            if key in a:
                assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-6), (key, a, b)
    w1, w2 = weights(one), weights(two)
    for name in w1:
        assert (w1[name] - w2[name]).abs().max() < 2e-5, name
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one, two))
    for side in ("eval_before", "eval_after"):
        assert s1[side]["accuracy"] == s2[side]["accuracy"], side
