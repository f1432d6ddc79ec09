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


def test_masked_token_importance_keeps_the_ratio_inside_the_band_and_zeroes_the_rest():
    from rlvr.algorithms import masked_token_importance

    # ratios e^0 = 1, e^0.5 = 1.65, e^1 = 2.72 (above C = 2), e^-1 = 0.37 (below 1/2), padding
    old = torch.tensor([[0.0, 0.5, 1.0, -1.0, 3.0]])
    sampler = torch.zeros(1, 5)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    weight, stats = masked_token_importance(old, sampler, mask, cap=2.0)
    assert weight[0, :4].tolist() == pytest.approx([1.0, math.exp(0.5), 0.0, 0.0], rel=1e-6)
    assert float(stats["icepop_masked_fraction"]) == pytest.approx(2 / 4)  # padding not counted
    assert float(stats["icepop_weight_mean"]) == pytest.approx((1 + math.exp(0.5)) / 4, rel=1e-6)
    # the band's edges are inside it: ratio exactly 2 and exactly 1/2 keep their weight
    edges = torch.tensor([[math.log(2.0), -math.log(2.0)]])
    weight, _ = masked_token_importance(edges, torch.zeros(1, 2), torch.ones(1, 2), cap=2.0)
    assert weight[0].tolist() == pytest.approx([2.0, 0.5], rel=1e-6)
    # truncation keeps a far-off token at weight C; icepop drops it
    tis, _ = truncated_importance_weight(old, sampler, mask, cap=2.0)
    assert tis[0, 2].item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="cap > 1"):
        masked_token_importance(old, sampler, mask, cap=1.0)


def test_masked_token_importance_has_no_gradient_and_ignores_padding_values():
    from rlvr.algorithms import masked_token_importance

    old = torch.zeros(1, 3, requires_grad=True)
    sampler = torch.tensor([[-0.1, float("nan"), 0.2]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    weight, stats = masked_token_importance(old, sampler, mask, 2.0)
    assert not weight.requires_grad and not any(v.requires_grad for v in stats.values())
    assert all(math.isfinite(float(v)) for v in stats.values())


def test_token_corrections_are_registered_by_their_config_names():
    from rlvr.algorithms import TOKEN_CORRECTIONS, masked_token_importance
    from rlvr.algorithms.names import TOKEN_CORRECTION_NAMES

    assert tuple(TOKEN_CORRECTIONS) == TOKEN_CORRECTION_NAMES
    assert TOKEN_CORRECTIONS["tis"] is truncated_importance_weight
    assert TOKEN_CORRECTIONS["icepop"] is masked_token_importance


def test_mismatch_kl_is_the_k3_estimate_over_completion_tokens():
    from rlvr.algorithms import sampler_drift

    learner = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    sampler = torch.tensor([[-1.1, -2.0, -9.0], [-0.2, -0.5, float("nan")]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    kl = float(sampler_drift(learner, sampler, mask)["rollout_mismatch_kl"])

    def k3(log_ratio: float) -> float:  # k = pi_learner / pi_sampler; k - 1 - log k
        return math.exp(log_ratio) - 1 - log_ratio

    assert kl == pytest.approx((k3(0.1) + k3(0.0) + k3(-0.3) + k3(0.0)) / 4, rel=1e-6)
    # identical policies: exactly 0; the estimate is never negative
    same = sampler_drift(learner, learner, mask)["rollout_mismatch_kl"]
    assert float(same) == 0.0
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 7, generator=gen), torch.randn(4, 7, generator=gen)
    assert float(sampler_drift(a, b, torch.ones(4, 7))["rollout_mismatch_kl"]) > 0


def test_mismatch_kl_estimates_the_true_kl_from_the_samplers_tokens():
    # KL(q || p) of two categorical distributions, estimated from tokens drawn from q
    from rlvr.algorithms import sampler_drift

    q = torch.tensor([0.5, 0.3, 0.2])
    p = torch.tensor([0.4, 0.4, 0.2])
    exact = float((q * (q / p).log()).sum())
    gen = torch.Generator().manual_seed(0)
    tokens = torch.multinomial(q, 200_000, replacement=True, generator=gen).reshape(1, -1)
    kl = sampler_drift(p.log()[tokens], q.log()[tokens], torch.ones_like(tokens))
    assert float(kl["rollout_mismatch_kl"]) == pytest.approx(exact, rel=0.05)
