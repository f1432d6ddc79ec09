import math

import pytest
import torch

from rlvr.algorithms.policy_loss import AGGREGATION_MODES, aggregate_loss, policy_loss

# ---------------------------------------------------------------------------------------------
# An independent, deliberately plain implementation: loops over sequences and tokens, Python
# min/max on scalars, explicit clip. Gradients of the vectorised code must match it exactly.
# ---------------------------------------------------------------------------------------------


def _reference_token_loss(ratio, a, low, high, dual_clip_c):
    if ratio < 1 - low:
        clipped_ratio = torch.tensor(1.0 - low, dtype=ratio.dtype)
    elif ratio > 1 + high:
        clipped_ratio = torch.tensor(1.0 + high, dtype=ratio.dtype)
    else:
        clipped_ratio = ratio
    loss = -min(ratio * a, clipped_ratio * a)
    if dual_clip_c is not None and a < 0:
        loss = min(loss, torch.tensor(-dual_clip_c * a, dtype=ratio.dtype))
    return loss


def reference_loss(logprobs, old, adv, mask, mode, *, low, high, dual_clip_c, level, max_tokens):
    batch, length = logprobs.shape
    sums, counts = [], []
    for i in range(batch):
        a = float(adv[i])
        tokens = [t for t in range(length) if mask[i, t] != 0]
        if level == "sequence" and tokens:
            mean_log_ratio = sum(logprobs[i, t] - old[i, t] for t in tokens) / len(tokens)
            s_i = torch.exp(mean_log_ratio).detach()
        seq_sum = torch.zeros((), dtype=logprobs.dtype)
        for t in tokens:
            if level == "token":
                ratio = torch.exp(logprobs[i, t] - old[i, t])
            else:
                ratio = s_i * torch.exp(logprobs[i, t] - logprobs[i, t].detach())
            seq_sum = seq_sum + _reference_token_loss(ratio, a, low, high, dual_clip_c)
        sums.append(seq_sum)
        counts.append(len(tokens))
    if mode == "seq_mean_token_mean":
        return sum(s / max(n, 1) for s, n in zip(sums, counts, strict=True)) / batch
    if mode == "token_mean":
        return sum(sums) / sum(counts)
    return sum(sums) / (batch * max_tokens)


def random_batch(seed, batch=4, length=6):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=gen, dtype=torch.float64) * 3
    logprobs = old + 0.4 * torch.randn(batch, length, generator=gen, dtype=torch.float64)
    adv = torch.randn(batch, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([length, 3, 1, length - 2])[:batch]
    mask = (torch.arange(length)[None, :] < lengths[:, None]).double()
    return logprobs.requires_grad_(True), old, adv, mask


def _grad(loss, x):
    return torch.autograd.grad(loss, x)[0]


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("dual_clip_c", [None, 1.5])
def test_gradient_matches_plain_loop_implementation(mode, level, dual_clip_c):
    clip = {"low": 0.1, "high": 0.15}
    if level == "sequence":  # keep some sequences inside and some outside the clip range
        clip = {"low": 0.03, "high": 0.05}
    for seed in range(3):
        logprobs, old, adv, mask = random_batch(seed)
        per_token, _ = policy_loss(
            logprobs,
            old,
            adv,
            mask,
            clip_ratio_low=clip["low"],
            clip_ratio_high=clip["high"],
            dual_clip_c=dual_clip_c,
            ratio_level=level,
        )
        loss = aggregate_loss(per_token, mask, mode, max_tokens=8)
        expected = reference_loss(
            logprobs, old, adv, mask, mode, **clip, dual_clip_c=dual_clip_c, level=level,
            max_tokens=8,
        )  # fmt: skip
        assert torch.allclose(loss, expected, rtol=1e-12, atol=1e-12)
        assert torch.allclose(_grad(loss, logprobs), _grad(expected, logprobs), atol=1e-12)


def test_gspo_sequence_ratio_equals_exp_of_mean_log_ratio():
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0]], dtype=torch.float64)
    logprobs = torch.tensor([[-0.8, -2.3, -0.4, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    # mean log-ratio over the 3 valid tokens = (0.2 - 0.3 + 0.1) / 3 = 0
    _, stats = policy_loss(logprobs, old, torch.ones(1), mask, ratio_level="sequence")
    assert stats["ratio_min"].item() == pytest.approx(1.0, abs=1e-12)
    assert stats["ratio_max"].item() == pytest.approx(1.0, abs=1e-12)
    logprobs = torch.tensor([[-0.4, -1.6, -0.5, -9.0]], dtype=torch.float64)
    # mean log-ratio = (0.6 + 0.4 + 0.0) / 3 = 1/3
    _, stats = policy_loss(logprobs, old, torch.ones(1), mask, ratio_level="sequence")
    assert stats["ratio_min"].item() == pytest.approx(math.exp(1 / 3), rel=1e-12)
    assert stats["ratio_max"].item() == pytest.approx(math.exp(1 / 3), rel=1e-12)


def test_gspo_gradient_matches_the_papers_sequence_level_objective():
    # GSPO (Zheng et al. 2025, eq. 5): J = (1/B) Σ_i min(s_i A_i, clip(s_i) A_i), s_i computed
    # directly as exp(mean log-ratio) with the gradient flowing through the mean.
    low, high = 0.03, 0.05
    for seed in range(3):
        logprobs, old, adv, mask = random_batch(seed)
        n = mask.sum(-1)
        s = torch.exp(((logprobs - old) * mask).sum(-1) / n)
        objective = torch.minimum(s * adv, torch.clamp(s, 1 - low, 1 + high) * adv).mean()
        per_token, _ = policy_loss(
            logprobs, old, adv, mask, clip_ratio_low=low, clip_ratio_high=high,
            ratio_level="sequence",
        )  # fmt: skip
        loss = aggregate_loss(per_token, mask, "seq_mean_token_mean")
        assert torch.allclose(loss, -objective, atol=1e-12)
        assert torch.allclose(_grad(loss, logprobs), _grad(-objective, logprobs), atol=1e-12)


def _single_token(ratio, advantage, **kwargs):
    logprobs = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, stats = policy_loss(logprobs, old, torch.tensor([advantage]), torch.ones(1, 1), **kwargs)
    return loss[0, 0].item(), _grad(loss.sum(), logprobs).item(), stats


@pytest.mark.parametrize(
    "ratio, advantage, binds",
    [
        (1.5, 1.0, True),  # A > 0, ratio above 1 + eps_high: clipped, no gradient
        (1.1, 1.0, False),  # A > 0, inside the range
        (0.5, 1.0, False),  # A > 0, below 1 - eps_low: the lower clip never binds for A > 0
        (0.5, -1.0, True),  # A < 0, below 1 - eps_low: clipped
        (0.9, -1.0, False),
        (1.5, -1.0, False),  # A < 0, above 1 + eps_high: unclipped (pessimistic bound)
    ],
)
def test_clip_binds_only_on_the_side_matching_the_advantage_sign(ratio, advantage, binds):
    loss, grad, stats = _single_token(ratio, advantage)
    if binds:
        assert grad == 0.0
        assert loss == pytest.approx(-advantage * min(max(ratio, 0.8), 1.2))
    else:
        # d(−r·A)/d log r = −r·A
        assert grad == pytest.approx(-ratio * advantage)
        assert loss == pytest.approx(-ratio * advantage)
    assert stats["clip_fraction"].item() == float(binds)


@pytest.mark.parametrize(
    "ratio, advantage, binds",
    [(1.25, 1.0, False), (1.3, 1.0, True), (0.85, -1.0, False), (0.75, -1.0, True)],
)
def test_asymmetric_clip_higher_bounds(ratio, advantage, binds):
    # DAPO clip-higher: eps_low = 0.2, eps_high = 0.28
    _, grad, stats = _single_token(ratio, advantage, clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert (grad == 0.0) == binds
    assert stats["clip_fraction"].item() == float(binds)


@pytest.mark.parametrize(
    "ratio, advantage, dual_binds, grad_is_zero",
    [
        (4.0, -1.0, True, True),  # A < 0 and ratio > c: loss capped at c·|A|
        (2.0, -1.0, False, False),  # A < 0, 1 + eps_high < ratio < c: unclipped
        (4.0, 1.0, False, True),  # A > 0: ordinary upper clip, dual clip not involved
    ],
)
def test_dual_clip_binds_only_for_negative_advantage_and_ratio_above_c(
    ratio, advantage, dual_binds, grad_is_zero
):
    loss, grad, stats = _single_token(ratio, advantage, dual_clip_c=3.0)
    assert (grad == 0.0) == grad_is_zero
    assert stats["dual_clip_fraction"].item() == float(dual_binds)
    if dual_binds:
        assert loss == pytest.approx(3.0 * abs(advantage))


def test_dual_clip_c_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
        _single_token(1.0, 1.0, dual_clip_c=1.0)


def test_clip_fraction_stats_count_binding_tokens_over_completion_tokens():
    ratios = torch.tensor(
        [[1.5, 0.5, 1.0, 4.0, 7.0], [0.5, 1.5, 0.7, 1.0, 1.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    # row 0 (A > 0): 1.5 and 4.0 are above 1.2 -> 2 high; row 1 (A < 0): 0.5, 0.7 -> 2 low.
    # 7 completion tokens; dual clip c = 3: no A < 0 token above 3 (7.0 is padding).
    _, stats = policy_loss(ratios.log(), torch.zeros_like(ratios), adv, mask, dual_clip_c=3.0)
    assert stats["clip_fraction_high"].item() == pytest.approx(2 / 7)
    assert stats["clip_fraction_low"].item() == pytest.approx(2 / 7)
    assert stats["clip_fraction"].item() == pytest.approx(4 / 7)
    assert stats["dual_clip_fraction"].item() == 0.0
    assert stats["ratio_max"].item() == pytest.approx(4.0)
    assert stats["ratio_min"].item() == pytest.approx(0.5)
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1 + 4 + 0.5 + 1.5 + 0.7) / 7)


def test_padding_with_infinite_logprobs_gives_zero_loss_and_finite_gradient():
    logprobs = torch.tensor([[-1.0, -float("inf")]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.2, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    for level in ("token", "sequence"):
        loss, stats = policy_loss(logprobs, old, torch.ones(1), mask, ratio_level=level)
        assert loss[0, 1].item() == 0.0
        assert torch.isfinite(_grad(loss.sum(), logprobs)).all()
        assert torch.isfinite(stats["ratio_max"])


# ------------------------------------- aggregation ------------------------------------------

# Two sequences with 3 and 1 valid tokens, plus one with none; padding values are junk.
RAGGED_LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0], [7.0, 7.0, 7.0]])
RAGGED_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_seq_mean_token_mean_matches_hand_computation():
    # per-sequence means 6/3 = 2, 4/1 = 4, empty = 0; mean over 3 sequences = 2
    loss = aggregate_loss(RAGGED_LOSS, RAGGED_MASK, "seq_mean_token_mean")
    assert loss.item() == pytest.approx(2.0)
    loss = aggregate_loss(RAGGED_LOSS[:2], RAGGED_MASK[:2], "seq_mean_token_mean")
    assert loss.item() == pytest.approx(3.0)


def test_token_mean_matches_hand_computation():
    # (1 + 2 + 3 + 4) / 4 tokens
    loss = aggregate_loss(RAGGED_LOSS, RAGGED_MASK, "token_mean")
    assert loss.item() == pytest.approx(2.5)


def test_seq_mean_token_sum_norm_matches_hand_computation():
    # (1 + 2 + 3 + 4) / (3 sequences * max_tokens 5)
    loss = aggregate_loss(RAGGED_LOSS, RAGGED_MASK, "seq_mean_token_sum_norm", max_tokens=5)
    assert loss.item() == pytest.approx(10 / 15)


def test_seq_mean_token_sum_norm_requires_max_tokens():
    with pytest.raises(ValueError, match="needs max_tokens"):
        aggregate_loss(RAGGED_LOSS, RAGGED_MASK, "seq_mean_token_sum_norm")


def test_unknown_aggregation_mode_lists_valid_modes():
    with pytest.raises(ValueError, match="seq_mean_token_mean, token_mean"):
        aggregate_loss(RAGGED_LOSS, RAGGED_MASK, "sum")


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_all_empty_sequences_give_zero_not_nan(mode):
    mask = torch.zeros(2, 3)
    loss = aggregate_loss(torch.full((2, 3), float("nan")), mask, mode, max_tokens=3)
    assert loss.item() == 0.0
    # a micro-batch of a mini-batch that has no completion tokens at all
    loss = aggregate_loss(mask, mask, mode, max_tokens=3, num_sequences=0.0, num_tokens=0.0)
    assert loss.item() == 0.0


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_micro_batches_with_global_counts_give_the_full_batch_gradient(mode, level):
    logprobs, old, adv, mask = random_batch(seed=7)
    kwargs = {"ratio_level": level, "clip_ratio_low": 0.1, "clip_ratio_high": 0.1}
    per_token, _ = policy_loss(logprobs, old, adv, mask, **kwargs)
    full = _grad(aggregate_loss(per_token, mask, mode, max_tokens=8), logprobs)

    counts = {"num_sequences": float(mask.shape[0]), "num_tokens": mask.sum().item()}
    accumulated = torch.zeros_like(logprobs)
    for rows in (slice(0, 1), slice(1, 4)):  # unequal micro-batches
        micro = logprobs.detach()[rows].requires_grad_(True)
        per_token, _ = policy_loss(micro, old[rows], adv[rows], mask[rows], **kwargs)
        loss = aggregate_loss(per_token, mask[rows], mode, max_tokens=8, **counts)
        accumulated[rows] = _grad(loss, micro)
    assert torch.allclose(accumulated, full, atol=1e-12)
