import math

import pytest
import torch

from rlvr.algorithms.kl import KL_ESTIMATORS, kl_in_reward, kl_penalty

LOGP = torch.tensor([-1.0, -0.5, -3.0], dtype=torch.float64)
REF = torch.tensor([-2.0, -0.5, -1.0], dtype=torch.float64)


def test_k1_is_the_log_ratio():
    # logp - ref = [1, 0, -2]
    assert torch.allclose(kl_penalty(LOGP, REF, "k1"), torch.tensor([1.0, 0.0, -2.0]).double())


def test_k2_is_half_the_squared_log_ratio():
    assert torch.allclose(kl_penalty(LOGP, REF, "k2"), torch.tensor([0.5, 0.0, 2.0]).double())


def test_k3_matches_its_formula():
    # d = ref - logp = [-1, 0, 2]; k3 = e^d - d - 1
    expected = torch.tensor([math.exp(-1) + 1 - 1, 0.0, math.exp(2) - 2 - 1]).double()
    assert torch.allclose(kl_penalty(LOGP, REF, "k3"), expected)


@pytest.mark.parametrize("estimator", ["k2", "k3"])
def test_k2_and_k3_are_non_negative(estimator):
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(1000, generator=gen) * 3
    ref = torch.randn(1000, generator=gen) * 3
    assert (kl_penalty(logp, ref, estimator) >= 0).all()


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_k1_and_k3_are_unbiased_estimates_of_kl_under_samples_from_the_policy(estimator):
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2], dtype=torch.float64)
    exact = (p * (p / q).log()).sum().item()  # KL(p || q) = 0.2502 nats
    samples = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    estimate = kl_penalty(p.log()[samples], q.log()[samples], estimator).mean().item()
    assert estimate == pytest.approx(exact, abs=0.01)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(LOGP, REF, "k4")
    assert KL_ESTIMATORS == ("k1", "k2", "k3")


def test_kl_in_reward_subtracts_beta_times_detached_masked_kl_sum():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.5, -5.0], [-2.0, -float("inf"), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    kl = kl_penalty(logp, ref, "k1")  # valid tokens: [0.5, 0.5], [1.0]; padding may be inf
    shaped = kl_in_reward(torch.tensor([1.0, 0.0]), kl, mask, beta=0.1)
    assert torch.allclose(shaped, torch.tensor([1.0 - 0.1 * 1.0, 0.0 - 0.1 * 1.0]))
    assert not shaped.requires_grad
