"""The Bradley-Terry loss against a hand computation and autograd, and pairwise accuracy."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.reward_model.loss import bradley_terry_loss, bradley_terry_losses, pairwise_accuracy


def test_loss_equals_the_hand_computed_negative_log_sigmoid_of_the_difference():
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([1.0, 0.0, 1.0])
    # -log sigma(d) = log(1 + exp(-d)) for d = 1, 0, -2
    expected = [math.log(1 + math.exp(-1)), math.log(2), math.log(1 + math.exp(2))]
    torch.testing.assert_close(bradley_terry_losses(chosen, rejected), torch.tensor(expected))
    torch.testing.assert_close(
        bradley_terry_loss(chosen, rejected), torch.tensor(sum(expected) / 3)
    )


def test_margin_and_centering_terms_follow_trls_formula():
    chosen, rejected = torch.tensor([2.0, 0.5]), torch.tensor([1.0, -0.5])
    margin = torch.tensor([0.5, 2.0])
    c = 0.01
    d = [2.0 - 1.0 - 0.5, 0.5 + 0.5 - 2.0]
    s = [2.0 + 1.0, 0.5 - 0.5]
    expected = [math.log(1 + math.exp(-x)) + c * y**2 for x, y in zip(d, s)]
    got = bradley_terry_losses(chosen, rejected, margin, center_coef=c)
    torch.testing.assert_close(got, torch.tensor(expected))


def test_gradient_is_the_analytic_one_from_autograd():
    # d/dr_c [-log sigma(r_c - r_r)] = -(1 - sigma(r_c - r_r)) = -sigma(r_r - r_c)
    chosen = torch.tensor([0.3, -1.2, 4.0], requires_grad=True)
    rejected = torch.tensor([0.1, 0.7, -2.0], requires_grad=True)
    bradley_terry_loss(chosen, rejected).backward()
    analytic = -torch.sigmoid(rejected - chosen).detach() / 3
    torch.testing.assert_close(chosen.grad, analytic)
    torch.testing.assert_close(rejected.grad, -analytic)
    assert torch.autograd.gradcheck(
        lambda c, r: bradley_terry_loss(c, r, center_coef=0.1),
        (chosen.detach().double().requires_grad_(), rejected.detach().double().requires_grad_()),
    )


def test_loss_is_finite_for_huge_reward_differences():
    losses = bradley_terry_losses(torch.tensor([1e4, -1e4]), torch.tensor([-1e4, 1e4]))
    assert losses[0] == 0.0 and losses[1] == pytest.approx(2e4)


def test_loss_rejects_unequal_or_non_vector_rewards():
    with pytest.raises(ValueError, match="must both be"):
        bradley_terry_losses(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="must both be"):
        bradley_terry_losses(torch.zeros(2, 1), torch.zeros(2, 1))


def test_pairwise_accuracy_counts_a_tie_as_wrong():
    assert (
        pairwise_accuracy(torch.tensor([1.0, 2.0, 0.0, 3.0]), torch.tensor([0.0, 2.0, 1.0, 1.0]))
        == 0.5
    )
    assert math.isnan(pairwise_accuracy(torch.zeros(0), torch.zeros(0)))
