"""training.skip_zero_advantage: rows whose advantage is exactly 0 are not run by the update.

Their per-token loss is -0 * ratio (clipped, dual clipped, sequence ratio or times the TIS
weight alike), so their gradient is exactly zero, and the loss normalisers count the whole
mini-batch before the rows are split: skipping them gives the same loss, gradient and weights
up to the order of the float sums. A KL loss term or an entropy bonus gives such a row a
gradient, so the skip is off there."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import load_config
from rlvr.rollout import RolloutBatch
from rlvr.training.grpo import GRPOTrainer, ScoredRollouts

# with eps 1e-8 Adam turns rounding noise on zero-gradient coordinates into +-lr steps; see
# tests/training/test_speed_paths.py
TINY = [
    "rollout.prompts_per_step=3",
    "rollout.group_size=4",
    "eval.size=0",
    "optimizer.lr=1e-3",
    "optimizer.warmup_steps=0",
    "optimizer.adam_eps=1e-5",
]
# 3 groups of 4: one with signal, one all correct, one all wrong (8 rows of advantage 0)
MIXED = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
NO_SIGNAL = [1.0] * 4 + [0.0] * 4 + [0.5] * 4


def _trainer(tmp_path, name: str, *overrides: str) -> GRPOTrainer:
    run = tmp_path / name
    run.mkdir()
    cfg = load_config(None, [*TINY, *overrides])
    return GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)


def _scored(trainer: GRPOTrainer, rewards: list[float], seed: int = 3) -> ScoredRollouts:
    """12 ragged random rows, 4 completions per prompt, some truncated."""
    g = torch.Generator().manual_seed(seed)
    vocab, eos = len(trainer.tokenizer), trainer.tokenizer.eos_token_id
    prompts = [torch.randint(3, vocab, (int(k),), generator=g) for k in torch.randint(1, 12, (3,))]
    completions, finish = [], []
    for k in torch.randint(1, 20, (12,)).tolist():
        c = torch.randint(3, vocab, (k,), generator=g)
        finish.append("length" if k >= 16 else "eos")
        completions.append(c if k >= 16 else torch.cat([c, torch.tensor([eos])]))
    batch = RolloutBatch(
        prompt_ids=[prompts[i // 4] for i in range(12)],
        completion_ids=completions,
        completion_text=["x"] * 12,
        logprobs=[torch.full((len(c),), -1.0) for c in completions],
        finish_reason=finish,
        prompt_index=[i // 4 for i in range(12)],
    )
    return ScoredRollouts(batch, [{}] * 12, torch.tensor(rewards), 0)


def _expected_skips(trainer: GRPOTrainer, advantages: torch.Tensor, shuffle_state) -> int:
    """Zero-advantage row passes of the update, less one per mini-batch with no other row."""
    n, size = len(advantages), trainer.cfg.training.mini_batch_size or len(advantages)
    gen = torch.Generator().set_state(shuffle_state)  # the update's shuffles, replayed
    skips = 0
    for _ in range(trainer.cfg.training.ppo_epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, size):
            zero = int((advantages[order[start : start + size]] == 0).sum())
            skips += zero - (zero == len(order[start : start + size]))
    return skips


def _update(trainer: GRPOTrainer, scored: ScoredRollouts):
    """One update: its stats, advantages, gradients, new weights and expected skip count."""
    state = trainer.shuffle_gen.get_state()
    stats, advantages = trainer.update(scored)
    grads = {k: p.grad.clone() for k, p in trainer.model.named_parameters() if p.grad is not None}
    weights = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    return stats, advantages, grads, weights, _expected_skips(trainer, advantages, state)


def _assert_same_update(on, off) -> None:
    (s_on, a_on, g_on, w_on, _), (s_off, a_off, g_off, w_off, _) = on, off
    assert torch.equal(a_on, a_off)
    # fp32 sums in another order: a gradient norm of ~1600 (padded, two epochs) moved by 3e-5
    # relative under transformers 5.19's attention path
    for key in ("loss", "grad_norm", "advantage_abs_mean"):
        assert math.isclose(s_on[key], s_off[key], rel_tol=1e-4, abs_tol=1e-6), key
    assert g_on.keys() == g_off.keys()
    for name, g in g_off.items():
        torch.testing.assert_close(g_on[name], g, rtol=1e-4, atol=1e-6, msg=name)
    for name, w in w_off.items():
        torch.testing.assert_close(w_on[name], w, rtol=0, atol=2e-5, msg=name)


# -- end to end -------------------------------------------------------------------------------


def test_skipping_zero_advantage_rows_learns_the_same(train_embedded):
    on, on_weights = train_embedded("on")
    off, off_weights = train_embedded("off", "training.skip_zero_advantage=false")
    assert len(on) == len(off) == 4
    assert any(r["zero_std_group_fraction"] > 0 for r in on)  # there were rows to skip
    assert any(r["update_rows_skipped"] > 0 for r in on)
    assert all(r["update_rows_skipped"] == 0 for r in off)
    for r in on:  # one mini-batch: every row of a zero-variance group, one kept if all are
        zero_rows = round(r["zero_std_group_fraction"] * 24)
        assert r["update_rows_skipped"] == zero_rows - (zero_rows == 24), r
    for a, b in zip(on, off, strict=True):
        for key in ("reward_mean", "reward_std", "completion_length_mean"):
            assert a[key] == b[key], (key, a["step"])
        for key in ("loss", "advantage_abs_mean", "grad_norm"):
            assert math.isclose(a[key], b[key], rel_tol=1e-5, abs_tol=1e-6), (key, a, b)
        if a["update_rows_skipped"] > 0:  # the skipped rows' positions were not run
            assert a["update_tokens"] < b["update_tokens"]
    for name, w in off_weights.items():
        torch.testing.assert_close(on_weights[name], w, rtol=0, atol=2e-5, msg=name)


# -- one update -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "overrides"),
    [
        ("momentum", []),  # an earlier update leaves AdamW momentum
        ("weight_decay", ["optimizer.weight_decay=0.1"]),  # first step: decay alone moves
    ],
)
def test_an_all_zero_advantage_batch_still_steps_the_optimizer(tmp_path, case, overrides):
    results = []
    for skip in ("true", "false"):
        t = _trainer(tmp_path, f"{case}-{skip}", f"training.skip_zero_advantage={skip}", *overrides)
        if case == "momentum":
            t.update(_scored(t, MIXED, seed=4))
        before = {k: p.detach().clone() for k, p in t.model.named_parameters()}
        result = _update(t, _scored(t, NO_SIGNAL))
        stats, advantages, grads, weights, _ = result
        assert not advantages.any() and stats["grad_norm"] == 0.0
        assert grads.keys() == before.keys()  # zero gradients, not none: AdamW steps them
        assert all(not g.any() for g in grads.values())
        assert any(not torch.equal(weights[k], before[k]) for k in before)
        assert stats["update_rows_skipped"] == (11 if skip == "true" else 0)
        results.append(result)
    _assert_same_update(*results)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("entropy", ["algorithm.entropy_coef=0.01"]),
        ("kl", ["algorithm.kl_coef=0.05"]),
        ("off", ["training.skip_zero_advantage=false"]),
    ],
)
def test_no_skip_when_a_zero_advantage_row_has_a_gradient(tmp_path, name, overrides):
    t = _trainer(tmp_path, name, *overrides)
    stats, advantages, *_ = _update(t, _scored(t, MIXED))
    assert int((advantages == 0).sum()) == 8
    assert stats["update_rows_skipped"] == 0


@pytest.mark.parametrize(
    "overrides",
    [
        ["training.token_budget=0", "training.micro_batch_size=5"],  # padded
        ["training.token_budget=48", "training.micro_batch_size=5"],  # packed, several units
        ["training.share_prompts=false"],
        ["algorithm.advantage=dr_grpo"],
        ["algorithm.advantage=rloo"],
        ["algorithm.advantage=reinforce_pp_baseline"],
        # batch baseline: a constant group's rows have a nonzero advantage, nothing is skipped
        ["algorithm.advantage=reinforce_pp"],
        # seed 1 shuffles two mini-batches (of 6) with zero advantage only
        ["training.ppo_epochs=2", "training.mini_batch_size=4", "training.seed=1"],
        ["training.ppo_epochs=2", "training.token_budget=0"],
        ["algorithm.ratio_level=sequence", "algorithm.dual_clip_c=3.0"],
        ["rollout.off_policy_steps=1"],  # truncated importance weights
        ["reward.mask_truncated=true", "algorithm.loss_aggregation=seq_mean_token_sum_norm"],
        # the KL in the reward is 0 at the reference's own weights: no KL loss term, skipped
        ["algorithm.kl_coef=0.05", "algorithm.kl_in_reward=true"],
    ],
    ids=lambda o: ",".join(x.split(".", 1)[1] for x in o),
)
def test_skipped_update_equals_the_full_update(tmp_path, overrides):
    on = _update(t := _trainer(tmp_path, "on", *overrides), _scored(t, MIXED))
    off = _update(
        t := _trainer(tmp_path, "off", "training.skip_zero_advantage=false", *overrides),
        _scored(t, MIXED),
    )
    _assert_same_update(on, off)
    stats, advantages, *_, expected = on
    assert stats["update_rows_skipped"] == expected
    if "algorithm.advantage=reinforce_pp" in overrides:
        assert expected == 0 and advantages.all()
    else:
        assert expected >= int((advantages == 0).sum()) > 0
    assert off[0]["update_rows_skipped"] == 0
