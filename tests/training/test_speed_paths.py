"""The speed work does not change the learning: the embedded default trained for a few steps by
the optimised path (fast engine with packed weights kept between calls, packed update with
shared prompts and the fused log-prob head, zero-advantage rows skipped, fused AdamW) and by the
unoptimised one (the HF reference engine, padded micro-batches of every row, autograd's
log-softmax, for-each AdamW) draws the same completions and logs the same losses, advantages and
gradient norms within fp32 tolerance."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main

STEPS = [
    "training.steps=4",
    # 3 x 8: steps 2 and 4 have no zero-variance group, so no row is skipped and their
    # entropy (over the rows the update ran) is compared too
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
SAME = ("reward_mean", "reward_std", "completion_length_mean", "zero_std_group_fraction")
CLOSE = ("loss", "advantage_abs_mean", "grad_norm", "entropy", "clip_fraction", "ratio_mean")


def _run(tmp_path, name: str, *overrides: str) -> tuple[list[dict], dict]:
    out = tmp_path / name
    assert main(["train", "--quiet", "--output-dir", str(out), *STEPS, *overrides]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return rows, load_file(out / "final" / "model.safetensors")


@pytest.mark.slow
def test_optimised_and_unoptimised_paths_learn_the_same(tmp_path, monkeypatch):
    fast, fast_weights = _run(tmp_path, "fast")
    import rlvr.training.optim as optim

    monkeypatch.setattr(optim, "fused_adamw_supported", lambda params: False)
    plain, plain_weights = _run(
        tmp_path,
        "plain",
        "rollout.engine=hf",
        "training.token_budget=0",
        "training.skip_zero_advantage=false",
    )
    assert len(fast) == len(plain) == 4
    # shared prompts: each of the 3 prompts runs once per unit, not once per row
    assert all(f["update_tokens"] < p["update_tokens"] for f, p in zip(fast, plain))
    for f, p in zip(fast, plain, strict=True):
        for key in SAME:
            assert f[key] == p[key], (key, f["step"])
        for key in CLOSE:
            if key == "entropy" and f["update_rows_skipped"] > 0:
                continue  # over the rows the update ran: without the skipped ones
            assert math.isclose(f[key], p[key], rel_tol=1e-4, abs_tol=1e-6), (key, f, p)
    assert any(r["reward_std"] > 0 for r in fast)  # there was something to learn from
    assert any(r["update_rows_skipped"] == 0 for r in fast)  # entropy compared somewhere
    for name, w in plain_weights.items():
        torch.testing.assert_close(fast_weights[name], w, rtol=0, atol=2e-5, msg=name)
