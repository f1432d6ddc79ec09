"""The speed work does not change the learning: the embedded default trained for a few steps by
the optimised path (fast engine with packed weights kept between calls, packed update with
shared prompts and the fused log-prob head, zero-advantage rows skipped, fused AdamW) and by the
unoptimised one (the HF reference engine, padded micro-batches of every row, autograd's
log-softmax, for-each AdamW) draws the same completions and logs the same losses, advantages and
gradient norms within fp32 tolerance."""

from __future__ import annotations

import math

import torch

SAME = ("reward_mean", "reward_std", "completion_length_mean", "zero_std_group_fraction")
CLOSE = ("loss", "advantage_abs_mean", "grad_norm", "entropy", "clip_fraction", "ratio_mean")


def test_optimised_and_unoptimised_paths_learn_the_same(train_embedded, monkeypatch):
    fast, fast_weights = train_embedded("fast")
    import rlvr.runs.optim as optim

    monkeypatch.setattr(optim, "fused_adamw_supported", lambda params: False)
    plain, plain_weights = train_embedded(
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
