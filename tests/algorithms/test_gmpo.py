import math

import pytest
import torch

from rlvr.algorithms.gmpo import gmpo_loss
from rlvr.algorithms.policy_loss import AGGREGATION_MODES, aggregate_loss


def _pair(advantage, deltas):
    """One sequence of two tokens with log-ratios `deltas`, plus a padding position."""
    old = torch.tensor([[-1.0, -2.0, 0.0]], dtype=torch.float64)
    logprobs = old + torch.tensor([[*deltas, 0.0]], dtype=torch.float64)
    logprobs[0, 2] = float("-inf")
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([advantage], dtype=torch.float64)
    return logprobs.requires_grad_(True), old, adv, mask


def test_hand_computed_positive_advantage_caps_growth_only():
    logprobs, old, adv, mask = _pair(1.0, (0.6, -0.2))
    loss, stats = gmpo_loss(logprobs, old, adv, mask)  # clip log-ratios to [-0.4, 0.4]
    # clipped log-ratios (0.4, -0.2): s = exp(0.1); every token's loss is -A s
    s = math.exp(0.1)
    assert loss[0].tolist() == pytest.approx([-s, -s, 0.0], abs=1e-12)
    (grad,) = torch.autograd.grad(aggregate_loss(loss, mask, "seq_mean_token_mean"), logprobs)
    assert grad[0].tolist() == pytest.approx([0.0, -s / 2, 0.0], abs=1e-12)
    assert stats["clip_fraction_high"].item() == 0.5 and stats["clip_fraction_low"].item() == 0
    assert stats["ratio_min"].item() == pytest.approx(s) == stats["ratio_max"].item()


def test_hand_computed_negative_advantage_caps_shrinking_only():
    logprobs, old, adv, mask = _pair(-1.0, (0.6, -0.6))
    loss, stats = gmpo_loss(logprobs, old, adv, mask)
    # clipped log-ratios (0.6, -0.4): s = exp(0.1); loss = +s per token
    s = math.exp(0.1)
    assert loss[0].tolist() == pytest.approx([s, s, 0.0], abs=1e-12)
    (grad,) = torch.autograd.grad(aggregate_loss(loss, mask, "seq_mean_token_mean"), logprobs)
    assert grad[0].tolist() == pytest.approx([s / 2, 0.0, 0.0], abs=1e-12)
    assert stats["clip_fraction_low"].item() == 0.5 and stats["clip_fraction_high"].item() == 0


def paper_objective(logprobs, old, adv, mask, low, high):
    """GMPO eq. 4 as written, over the G rows:
    (1/G) Σ_i sgn(A_i) (Π_t |min(ρ A, clip(ρ, e^-low, e^high) A)|)^(1/n)."""
    total = torch.zeros((), dtype=logprobs.dtype)
    for i in range(logprobs.shape[0]):
        a = float(adv[i])
        tokens = [t for t in range(logprobs.shape[1]) if mask[i, t]]
        product = torch.ones((), dtype=logprobs.dtype)
        for t in tokens:
            rho = torch.exp(logprobs[i, t] - old[i, t])
            clipped = torch.clamp(rho, math.exp(-low), math.exp(high))
            product = product * torch.abs(torch.minimum(rho * a, clipped * a))
        sign = (a > 0) - (a < 0)
        total = total + sign * product ** (1.0 / len(tokens))
    return total / logprobs.shape[0]


def test_value_and_gradient_equal_the_papers_objective_under_seq_mean_token_mean():
    gen = torch.Generator().manual_seed(1)
    for low, high in ((0.4, 0.4), (0.1, 0.2)):
        old = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 3
        delta = 0.5 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
        logprobs = (old + delta).requires_grad_()
        adv = torch.tensor([1.3, -0.7, 0.4, -2.0], dtype=torch.float64)
        mask = (torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 5])[:, None]).double()
        loss, _ = gmpo_loss(logprobs, old, adv, mask, gmpo_clip_low=low, gmpo_clip_high=high)
        ours = aggregate_loss(loss, mask, "seq_mean_token_mean")
        theirs = -paper_objective(logprobs, old, adv, mask, low, high)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
        (g_ours,) = torch.autograd.grad(ours, logprobs)
        (g_theirs,) = torch.autograd.grad(theirs, logprobs)
        assert torch.allclose(g_ours, g_theirs, atol=1e-13)


@pytest.mark.parametrize("mode", [m for m in AGGREGATION_MODES if m != "seq_mean_token_mean"])
def test_other_aggregations_weigh_sequences_differently(mode):
    gen = torch.Generator().manual_seed(2)
    old = -torch.rand(2, 4, generator=gen, dtype=torch.float64)
    logprobs = (old + 0.1 * torch.randn(2, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    loss, _ = gmpo_loss(logprobs, old, adv, mask)
    theirs = -paper_objective(logprobs, old, adv, mask, 0.4, 0.4)
    assert aggregate_loss(loss, mask, mode, max_tokens=4).item() != pytest.approx(theirs.item())


def test_zero_advantage_rows_have_zero_loss_and_gradient():
    logprobs, old, _, mask = _pair(0.0, (0.3, -0.9))
    loss, _ = gmpo_loss(logprobs, old, torch.zeros(1, dtype=torch.float64), mask)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert torch.all(loss == 0) and torch.all(grad == 0)


@pytest.mark.parametrize("option", ["gmpo_clip_low", "gmpo_clip_high"])
def test_negative_bounds_are_refused(option):
    logprobs, old, adv, mask = _pair(1.0, (0.0, 0.0))
    with pytest.raises(ValueError, match=f"{option} must be >= 0"):
        gmpo_loss(logprobs, old, adv, mask, **{option: -1.0})
