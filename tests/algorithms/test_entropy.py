import math

import pytest
import torch

from rlvr.algorithms.entropy import entropy_from_logits
from rlvr.algorithms.utils import masked_mean


def test_entropy_matches_minus_sum_p_log_p_on_random_logits():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p = logits.softmax(-1)
    expected = -(p * p.log()).sum(-1)
    assert torch.allclose(entropy_from_logits(logits), expected, atol=1e-12)


def test_entropy_of_uniform_logits_is_log_vocab_size():
    assert entropy_from_logits(torch.zeros(2, 7)).tolist() == pytest.approx([math.log(7)] * 2)


@pytest.mark.parametrize("scale", [1e4, 1e6, 1e30])
def test_entropy_with_very_large_logits_is_accurate_and_not_nan(scale):
    # two tied maxima and one far-away logit: H = log 2 exactly, in float32
    logits = torch.tensor([[scale, scale, -scale], [scale, 0.0, -scale]], requires_grad=True)
    entropy = entropy_from_logits(logits)
    assert entropy.tolist() == pytest.approx([math.log(2), 0.0], abs=1e-6)
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_entropy_is_differentiable_and_matches_autograd_of_the_direct_formula():
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    logits.requires_grad_(True)
    (grad,) = torch.autograd.grad(entropy_from_logits(logits).sum(), logits)
    p = logits.softmax(-1)
    (expected,) = torch.autograd.grad(-(p * p.log()).sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-12)


def test_masked_mean_ignores_padding_and_gives_zero_for_an_empty_mask():
    x = torch.tensor([[1.0, 3.0, float("nan")], [5.0, float("inf"), 0.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert masked_mean(x, mask).item() == 2.0
    assert masked_mean(x, mask, dim=-1).tolist() == [2.0, 0.0]
