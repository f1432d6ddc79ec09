import math

import pytest
import torch

from rlvr.algorithms.covariance import clip_cov_loss, kl_cov_loss, token_covariance
from rlvr.algorithms.policy_loss import policy_loss


def test_token_covariance_by_hand():
    logprobs = torch.tensor([[-1.0, -3.0], [-2.0, float("-inf")]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    # tokens' log pi (-1, -3, -2): mean -2; their A (1, 1, -2): mean 0
    cov = token_covariance(logprobs, adv, mask)
    assert cov.tolist() == [[1.0, -1.0], [0.0, 0.0]]


def _batch(seed=0, rows=4, length=8, spread=0.3):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, length, generator=gen, dtype=torch.float64) * 4
    delta = spread * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    logprobs = (old + delta).requires_grad_()
    adv = 2 * torch.randn(rows, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([length, length // 2, 1, length - 1])[:rows]
    mask = (torch.arange(length)[None, :] < lengths[:, None]).double()
    return logprobs, old, adv, mask


# ---------------------------------------------------------------------------------------------
# KL-Cov


def test_kl_cov_by_hand_penalises_the_top_covariance_token():
    old = torch.tensor([[-1.2, -2.9], [-2.0, 0.0]], dtype=torch.float64)
    logprobs = torch.tensor([[-1.0, -3.0], [-2.0, -9.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    # Cov = (1, -1, 0) as above; k = floor(0.4 * 3) = 1 token: (0, 0), δ = 0.2
    loss, stats = kl_cov_loss(logprobs, old, adv, mask, kl_cov_ratio=0.4, kl_cov_coef=0.5)
    r = [math.exp(0.2), math.exp(-0.1), 1.0]
    expected = [[-r[0] + 0.5 * 0.2, -r[1]], [2.0 * r[2], 0.0]]
    assert torch.allclose(loss, torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    expected_grad = [[-r[0] + 0.5, -r[1]], [2.0 * r[2], 0.0]]  # ∂|δ|/∂log π = sign(δ) = 1
    assert torch.allclose(grad, torch.tensor(expected_grad, dtype=torch.float64), atol=1e-12)
    assert stats["kl_cov_fraction"].item() == pytest.approx(1 / 3)
    assert stats["abs_log_ratio_mean"].item() == pytest.approx(0.1)


def test_kl_cov_gradient_matches_an_independent_loop():
    ratio, coef = 0.2, 0.7
    logprobs, old, adv, mask = _batch(seed=3)
    tokens = [(i, t) for i in range(4) for t in range(8) if mask[i, t]]
    lp = {k: float(logprobs[k].detach()) for k in tokens}
    mean_lp = sum(lp.values()) / len(tokens)
    mean_a = sum(float(adv[i]) for i, _ in tokens) / len(tokens)
    cov = {(i, t): (lp[i, t] - mean_lp) * (float(adv[i]) - mean_a) for i, t in tokens}
    top = sorted(tokens, key=lambda k: -cov[k])[: max(1, math.floor(ratio * len(tokens)))]
    expected = torch.zeros((), dtype=torch.float64)
    for i, t in tokens:
        delta = logprobs[i, t] - old[i, t]
        expected = expected - float(adv[i]) * torch.exp(delta)
        if (i, t) in top:
            expected = expected + coef * torch.abs(delta)
    loss, stats = kl_cov_loss(logprobs, old, adv, mask, kl_cov_ratio=ratio, kl_cov_coef=coef)
    assert loss.sum().item() == pytest.approx(expected.item(), rel=1e-12)
    (ours,) = torch.autograd.grad(loss.sum(), logprobs)
    (theirs,) = torch.autograd.grad(expected, logprobs)
    assert torch.allclose(ours, theirs, atol=1e-13)
    assert stats["kl_cov_fraction"].item() == pytest.approx(len(top) / len(tokens))


def test_kl_cov_on_policy_is_the_plain_policy_gradient():
    logprobs, _, adv, mask = _batch(seed=4)
    old = logprobs.detach()
    loss, _ = kl_cov_loss(logprobs, old, adv, mask, kl_cov_ratio=1.0)  # every token penalised
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert torch.equal(grad, -adv[:, None].expand_as(mask) * mask)  # |δ| adds nothing at δ = 0


def test_kl_cov_ties_go_to_the_earlier_position_and_one_token_is_always_selected():
    logprobs = torch.tensor([[-1.0, -1.0, -3.0, -3.0]], requires_grad=True)
    mask = torch.ones(1, 4)
    # one row: A - mean A = 0, so every covariance is 0 (a four-way tie)
    old = logprobs.detach() - 0.5
    _, stats = kl_cov_loss(logprobs, old, torch.tensor([1.0]), mask, kl_cov_ratio=1e-9)
    assert stats["kl_cov_fraction"].item() == 0.25
    loss, _ = kl_cov_loss(logprobs, old, torch.tensor([1.0]), mask, kl_cov_ratio=1e-9)
    plain = -torch.exp(torch.tensor(0.5))
    assert loss[0, 0].item() == pytest.approx(plain.item() + 0.5)
    assert loss[0, 1:].tolist() == pytest.approx([plain.item()] * 3)


# ---------------------------------------------------------------------------------------------
# Clip-Cov


def _clip_cov(logprobs, old, adv, mask, **options):
    options = {"clip_cov_ratio": 0.25, "clip_cov_lb": 0.0, "clip_cov_ub": 3.0, **options}
    return clip_cov_loss(logprobs, old, adv, mask, **options)


def _dropped(loss, ppo):
    return (loss == 0) & (ppo != 0)


def test_clip_cov_drops_only_unclipped_tokens_inside_the_covariance_band():
    for seed in range(5):
        logprobs, old, adv, mask = _batch(seed, spread=0.5)
        loss, stats = _clip_cov(logprobs, old, adv, mask)
        ppo, _ = policy_loss(logprobs, old, adv, mask)
        cov = token_covariance(logprobs, adv, mask)
        r = torch.exp(logprobs.detach() - old)
        a = adv[:, None]
        ppo_clipped = ((a < 0) & (r < 0.8)) | ((a > 0) & (r > 1.2))
        band = (cov >= 0.0) & (cov <= 3.0) & (mask != 0) & ~ppo_clipped
        dropped = _dropped(loss, ppo)
        assert torch.all(band[dropped])
        n = int(mask.sum())
        assert int(dropped.sum()) == min(max(1, math.floor(0.25 * n)), int(band.sum()))
        assert stats["cov_clip_fraction"].item() == pytest.approx(int(dropped.sum()) / n)
        # the other tokens keep the clipped surrogate, value and gradient
        keep = (mask != 0) & ~dropped
        assert torch.equal(loss[keep], ppo[keep])
        (g,) = torch.autograd.grad(loss.sum(), logprobs, retain_graph=True)
        (g_ppo,) = torch.autograd.grad(ppo.sum(), logprobs)
        assert torch.all(g[dropped] == 0) and torch.equal(g[keep], g_ppo[keep])


def test_clip_cov_gradient_matches_an_independent_loop_given_the_drawn_tokens():
    logprobs, old, adv, mask = _batch(seed=6, spread=0.5)
    loss, _ = _clip_cov(logprobs, old, adv, mask, clip_ratio_low=0.1, clip_ratio_high=0.3)
    ppo, _ = policy_loss(logprobs, old, adv, mask, clip_ratio_low=0.1, clip_ratio_high=0.3)
    dropped = _dropped(loss, ppo)
    expected = torch.zeros((), dtype=torch.float64)
    for i in range(4):
        for t in range(8):
            if mask[i, t] and not dropped[i, t]:
                r = torch.exp(logprobs[i, t] - old[i, t])
                a = float(adv[i])
                expected = expected - min(r * a, torch.clamp(r, 0.9, 1.3) * a)
    (ours,) = torch.autograd.grad(loss.sum(), logprobs)
    (theirs,) = torch.autograd.grad(expected, logprobs)
    assert torch.allclose(ours, theirs, atol=1e-13)


def test_clip_cov_draw_is_deterministic_and_leaves_the_global_rng_alone():
    logprobs, old, adv, mask = _batch(seed=7, spread=0.5)
    state = torch.get_rng_state()
    first, _ = _clip_cov(logprobs, old, adv, mask, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    second, _ = _clip_cov(logprobs, old, adv, mask, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    assert torch.equal(first, second)
    assert torch.equal(torch.get_rng_state(), state)


def test_clip_cov_draw_varies_with_the_batch():
    # every unclipped token is a candidate and half are drawn: different batches, different draws
    patterns = set()
    for seed in range(8):
        logprobs, old, adv, mask = _batch(seed, spread=0.01)
        loss, _ = _clip_cov(logprobs, old, adv, mask, clip_cov_ratio=0.5, clip_cov_lb=-1e9,
                            clip_cov_ub=1e9)  # fmt: skip
        ppo, _ = policy_loss(logprobs, old, adv, mask)
        patterns.add(tuple(_dropped(loss, ppo).flatten().tolist()))
    assert len(patterns) > 4


def test_clip_cov_without_candidates_is_the_clipped_surrogate():
    logprobs, old, adv, mask = _batch(seed=8)
    loss, stats = _clip_cov(logprobs, old, adv, mask, clip_cov_lb=1e6, clip_cov_ub=2e6)
    ppo, _ = policy_loss(logprobs, old, adv, mask)
    assert torch.equal(loss, ppo)
    assert stats["cov_clip_fraction"].item() == 0.0


@pytest.mark.parametrize(
    "fn, options, message",
    [
        (clip_cov_loss, {"clip_cov_ratio": 0.0}, "clip_cov_ratio must be in"),
        (clip_cov_loss, {"clip_cov_lb": 2.0, "clip_cov_ub": 1.0}, "must be <= clip_cov_ub"),
        (kl_cov_loss, {"kl_cov_ratio": 1.5}, "kl_cov_ratio must be in"),
        (kl_cov_loss, {"kl_cov_coef": -1.0}, "kl_cov_coef must be >= 0"),
    ],
)
def test_bad_options_are_refused(fn, options, message):
    logprobs, old, adv, mask = _batch()
    with pytest.raises(ValueError, match=message):
        fn(logprobs, old, adv, mask, **options)
