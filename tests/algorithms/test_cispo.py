import math

import pytest
import torch

from rlvr.algorithms.cispo import cispo_loss
from rlvr.algorithms.policy_loss import aggregate_loss, policy_loss

NEG_INF = float("-inf")


def _tiny():
    # one sequence, two completion tokens and one padding position; A = 2
    old = torch.tensor([[-1.0, -2.0, 0.0]], dtype=torch.float64)
    logprobs = torch.tensor([[-0.5, -2.5, NEG_INF]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    return logprobs, old, torch.tensor([2.0], dtype=torch.float64), mask


def test_hand_computed_loss_gradient_and_stats():
    logprobs, old, adv, mask = _tiny()
    # r = (e^0.5, e^-0.5) = (1.649, 0.607); clipped to [0.8, 1.2]: weights (1.2, 0.8)
    loss, stats = cispo_loss(logprobs, old, adv, mask, cispo_clip_low=0.2, cispo_clip_high=0.2)
    # loss_t = -w_t * A * log pi_t: -1.2*2*(-0.5) = 1.2, -0.8*2*(-2.5) = 4.0
    assert loss[0].tolist() == pytest.approx([1.2, 4.0, 0.0], abs=1e-12)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert grad[0].tolist() == pytest.approx([-2.4, -1.6, 0.0], abs=1e-12)  # -w_t * A
    assert stats["clip_fraction_high"].item() == pytest.approx(0.5)
    assert stats["clip_fraction_low"].item() == pytest.approx(0.5)
    assert stats["clip_fraction"].item() == pytest.approx(1.0)
    assert stats["is_weight_mean"].item() == pytest.approx(1.0)
    assert stats["ratio_max"].item() == pytest.approx(math.exp(0.5))
    assert stats["ratio_min"].item() == pytest.approx(math.exp(-0.5))


def test_clipped_tokens_keep_a_gradient_where_the_ppo_clip_gives_none():
    logprobs, old, adv, mask = _tiny()
    ppo, _ = policy_loss(logprobs, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    (ppo_grad,) = torch.autograd.grad(ppo.sum(), logprobs)
    assert ppo_grad[0, 0] == 0  # A > 0 and r > 1.2: PPO drops the token
    loss, _ = cispo_loss(logprobs, old, adv, mask, cispo_clip_low=0.2, cispo_clip_high=0.2)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert grad[0, 0] == pytest.approx(-1.2 * 2.0)  # the capped weight times A


def test_gradient_matches_the_papers_objective_written_as_a_loop():
    # MiniMax-M1 eq. 4: J = (1 / Σ_i |o_i|) Σ_i Σ_t sg(clip(r_it)) A_i log π(o_it)
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=gen, dtype=torch.float64) * 3
    logprobs = (old + 0.5 * torch.randn(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(3, generator=gen, dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]).double()
    low, high = 0.3, 0.25
    total, tokens = torch.zeros((), dtype=torch.float64), 0
    for i in range(3):
        for t in range(5):
            if mask[i, t]:
                r = math.exp(float(logprobs[i, t].detach() - old[i, t]))
                w = min(max(r, 1 - low), 1 + high)
                total = total + w * float(adv[i]) * logprobs[i, t]
                tokens += 1
    objective = total / tokens
    loss, _ = cispo_loss(logprobs, old, adv, mask, cispo_clip_low=low, cispo_clip_high=high)
    reduced = aggregate_loss(loss, mask, "token_mean")
    assert reduced.item() == pytest.approx(-objective.item(), rel=1e-12)
    (ours,) = torch.autograd.grad(reduced, logprobs)
    (theirs,) = torch.autograd.grad(-objective, logprobs)
    assert torch.allclose(ours, theirs, atol=1e-14)


def test_default_bounds_leave_no_lower_bound_and_cap_at_five():
    logprobs = torch.tensor([[-5.0, 1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -2.0]])
    loss, stats = cispo_loss(logprobs, old, torch.tensor([1.0]), torch.ones(1, 2))
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert grad[0, 0].item() == pytest.approx(-math.exp(-5.0))  # r = e^-5 kept as is
    assert grad[0, 1].item() == pytest.approx(-5.0)  # r = e^3 = 20.1 capped at 1 + 4
    assert stats["clip_fraction_low"].item() == 0.0
    assert stats["clip_fraction_high"].item() == 0.5


@pytest.mark.parametrize("option", ["cispo_clip_low", "cispo_clip_high"])
def test_negative_bounds_are_refused(option):
    logprobs, old, adv, mask = _tiny()
    with pytest.raises(ValueError, match=f"{option} must be >= 0"):
        cispo_loss(logprobs, old, adv, mask, **{option: -0.1})
