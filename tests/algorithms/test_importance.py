import math

import pytest
import torch

from rlvr.algorithms.importance import truncated_importance_weight
from rlvr.algorithms.utils import masked_mean


def test_weight_and_stats_by_hand():
    old = torch.tensor([[-1.0, -1.0, -1.0, 0.0]])
    sampler = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weight, stats = truncated_importance_weight(old, sampler, mask, cap=2.0)
    # ratios 1, e = 2.718 (capped at 2), e^-0.5 = 0.607
    assert weight[0, :3].tolist() == pytest.approx([1.0, 2.0, math.exp(-0.5)], rel=1e-6)
    assert stats["tis_weight_mean"].item() == pytest.approx((3.0 + math.exp(-0.5)) / 3, rel=1e-6)
    assert stats["tis_clip_fraction"].item() == pytest.approx(1 / 3)


def test_bit_identical_to_the_trainers_inline_computation():
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 9, generator=gen) * 5
    sampler = old + torch.randn(6, 9, generator=gen)  # some ratios far above the cap
    mask = (torch.rand(6, 9, generator=gen) > 0.3).float()
    sampler[mask == 0] = float("nan")  # padding may hold anything
    cap = 1.5
    # what training/grpo.py computed per micro-batch before this function existed
    ratio = torch.exp(old - sampler)
    tis = ratio.clamp(max=cap)
    expected_mean = masked_mean(tis, mask)
    expected_fraction = masked_mean((ratio > cap).float(), mask)
    weight, stats = truncated_importance_weight(old, sampler, mask, cap)
    assert torch.equal(weight[mask != 0], tis[mask != 0])
    assert torch.equal(weight.isnan(), tis.isnan())
    assert torch.equal(stats["tis_weight_mean"], expected_mean)
    assert torch.equal(stats["tis_clip_fraction"], expected_fraction)


def test_no_gradient_flows_through_the_weight():
    old = torch.zeros(1, 2, requires_grad=True)
    sampler = torch.full((1, 2), -0.1, requires_grad=True)
    weight, stats = truncated_importance_weight(old, sampler, torch.ones(1, 2), 2.0)
    assert not weight.requires_grad
    assert not any(v.requires_grad for v in stats.values())


def test_masked_sequence_importance_keeps_sequences_whose_whole_ratio_is_inside_the_band():
    from rlvr.algorithms import masked_sequence_importance

    # log-ratios per token; sequence sums 0.3, -0.9, 1.5 (two tokens), and a row with no tokens
    old = torch.tensor([[0.1, 0.2, 9.0], [-0.4, -0.5, 0.0], [1.0, 0.5, 0.0], [5.0, 5.0, 5.0]])
    sampler = torch.zeros(4, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]])  # padding never counts
    keep, stats = masked_sequence_importance(old, sampler, mask, cap=2.0)  # log 2 = 0.693
    assert keep.tolist() == [True, False, False, True]  # an empty row has nothing to drop
    assert float(stats["mis_masked_fraction"]) == pytest.approx(2 / 3)
    assert float(stats["mis_log_ratio_mean"]) == pytest.approx((0.3 + 0.9 + 1.5) / 3)
    keep, _ = masked_sequence_importance(old, sampler, mask, cap=5.0)  # log 5 = 1.609
    assert keep.tolist() == [True, True, True, True]
    with pytest.raises(ValueError, match="cap > 1"):
        masked_sequence_importance(old, sampler, mask, cap=1.0)


def test_sampler_drift_is_the_mean_and_max_gap_over_completion_tokens():
    from rlvr.algorithms import sampler_drift

    learner = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    sampler = torch.tensor([[-1.1, -2.0, -9.0], [-0.2, -0.5, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    drift = sampler_drift(learner, sampler, mask)
    assert float(drift["rollout_logprob_drift_mean"]) == pytest.approx((0.1 + 0 + 0.3 + 0) / 4)
    assert float(drift["rollout_logprob_drift_max"]) == pytest.approx(0.3)
