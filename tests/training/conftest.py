"""Shared by the end-to-end learning-equality tests (test_speed_paths, test_skip_zero_advantage)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main

# The embedded default for 4 steps of 3 prompts x 8: step 1 has some zero-variance groups,
# step 3 only those, steps 2 and 4 none (so no row is skipped there).
EMBEDDED_STEPS = [
    "training.steps=4",
    "rollout.prompts_per_step=3",
    "rollout.group_size=8",
    "optimizer.warmup_steps=0",
    "optimizer.lr=3e-4",
    # with eps 1e-8 Adam turns rounding noise on zero-gradient coordinates (embedding rows of
    # tokens that never occur) into +-lr steps; see tests/distributed/test_torchrun.py
    "optimizer.adam_eps=1e-5",
    "eval.size=0",
    "logging.samples_every=0",
]

TrainRun = Callable[..., tuple[list[dict], dict[str, torch.Tensor]]]


@pytest.fixture
def train_embedded(tmp_path) -> TrainRun:
    """run(name, *overrides): `rlvr train` of EMBEDDED_STEPS plus overrides into tmp_path/name;
    returns its metrics rows and final weights."""

    def run(name: str, *overrides: str) -> tuple[list[dict], dict[str, torch.Tensor]]:
        out = tmp_path / name
        args = ["train", "--quiet", "--output-dir", str(out), *EMBEDDED_STEPS, *overrides]
        assert main(args) == 0
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return rows, load_file(out / "final" / "model.safetensors")

    return run
