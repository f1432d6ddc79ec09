import math

import pytest
import torch

from rlvr.rollout.sampling import check_sampling_params, filter_logits, sample_next
from rlvr.rollout.types import SamplingParams


def kept(logits: torch.Tensor) -> set[int]:
    return set(torch.isfinite(logits[0]).nonzero().squeeze(-1).tolist())


def test_top_k_keeps_exactly_the_k_largest_logits():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    assert kept(filter_logits(logits, top_k=2)) == {1, 3}
    assert kept(filter_logits(logits, top_k=1)) == {1}


def test_top_k_keeps_k_tokens_even_when_logits_tie():
    logits = torch.tensor([[2.0, 2.0, 2.0, 1.0]])
    assert len(kept(filter_logits(logits, top_k=2))) == 2


def test_top_p_keeps_smallest_prefix_reaching_p():
    # probabilities in shuffled order: token 2 = 0.5, token 0 = 0.3, token 3 = 0.15, token 1 = 0.05
    logits = torch.tensor([[0.3, 0.05, 0.5, 0.15]]).log()
    assert kept(filter_logits(logits, top_p=0.4)) == {2}
    assert kept(filter_logits(logits, top_p=0.7)) == {2, 0}
    assert kept(filter_logits(logits, top_p=0.9)) == {2, 0, 3}
    assert kept(filter_logits(logits, top_p=0.99)) == {0, 1, 2, 3}


def test_top_p_always_keeps_the_most_likely_token():
    logits = torch.tensor([[0.0, 10.0, 0.0]])
    assert kept(filter_logits(logits, top_p=1e-6)) == {1}


def test_top_p_applies_to_the_top_k_renormalised_distribution():
    # top-k=2 leaves {0: 0.4, 1: 0.3} -> renormalised 4/7 = 0.571, 3/7; p=0.5 keeps only token 0.
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    assert kept(filter_logits(logits, top_k=2, top_p=0.5)) == {0}
    assert kept(filter_logits(logits, top_k=2, top_p=0.6)) == {0, 1}


def test_no_filtering_is_identity_and_temperature_divides_logits():
    logits = torch.randn(3, 11)
    torch.testing.assert_close(filter_logits(logits, temperature=1.0, top_k=0, top_p=1.0), logits)
    torch.testing.assert_close(filter_logits(logits, temperature=0.5), logits * 2)
    torch.testing.assert_close(filter_logits(logits, top_k=11), logits)


def test_sampled_tokens_always_lie_in_the_kept_set():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=generator)
    params = SamplingParams(temperature=0.8, top_k=10, top_p=0.7)
    allowed = torch.isfinite(filter_logits(logits, 0.8, 10, 0.7))
    draws = 500
    tokens, logprobs = sample_next(logits.repeat(draws, 1), params, generator)
    assert allowed.repeat(draws, 1).gather(1, tokens[:, None]).all()
    assert torch.isfinite(logprobs).all()


def test_top_k_logprobs_are_renormalised_over_the_kept_tokens():
    # top-2 of probabilities (0.1, 0.2, 0.3, 0.4) renormalise to 3/7 and 4/7.
    logits = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).log().repeat(4000, 1)
    generator = torch.Generator().manual_seed(1)
    tokens, logprobs = sample_next(logits, SamplingParams(top_k=2), generator)
    assert set(tokens.tolist()) == {2, 3}
    expected = torch.where(tokens == 2, math.log(3 / 7), math.log(4 / 7))
    torch.testing.assert_close(logprobs, expected.float(), atol=1e-5, rtol=0)
    assert abs((tokens == 3).float().mean().item() - 4 / 7) < 0.03


def test_greedy_picks_argmax_with_raw_log_softmax():
    logits = torch.randn(5, 20)
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=0.0, top_k=3, top_p=0.5))
    assert torch.equal(tokens, logits.argmax(-1))
    torch.testing.assert_close(logprobs, logits.log_softmax(-1).gather(1, tokens[:, None])[:, 0])


def test_seeded_generator_reproduces_samples():
    logits = torch.randn(8, 30)
    params = SamplingParams(temperature=1.0, top_p=0.9)
    first = sample_next(logits, params, torch.Generator().manual_seed(7))
    second = sample_next(logits, params, torch.Generator().manual_seed(7))
    assert torch.equal(first[0], second[0])
    assert torch.equal(first[1], second[1])


@pytest.mark.parametrize(
    "params, field",
    [
        (SamplingParams(temperature=-1.0), "temperature"),
        (SamplingParams(top_k=-1), "top_k"),
        (SamplingParams(top_p=0.0), "top_p"),
        (SamplingParams(top_p=1.5), "top_p"),
        (SamplingParams(max_new_tokens=0), "max_new_tokens"),
        (SamplingParams(stop=("",)), "stop"),
    ],
)
def test_out_of_range_sampling_params_name_the_field(params, field):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        check_sampling_params(params)


def test_the_blocked_inverse_cdf_draws_what_the_exact_one_draws():
    """A cast replica's sampler (`blocked=True`): two levels, float32 probabilities, the same
    token as the float64 CDF except within rounding of a boundary, and never a token of zero
    probability (a masked one, a padded block's tail)."""
    from rlvr.rollout.sampling import CDF_BLOCK, _inverse_cdf, _inverse_cdf_blocked

    gen = torch.Generator().manual_seed(0)
    vocab = 3 * CDF_BLOCK + 77  # a last block padded
    logits = torch.randn(32, vocab, generator=gen) * 4
    logits[:, ::5] = float("-inf")  # masked tokens (top-k / top-p leave -inf)
    logprobs = logits.log_softmax(dim=-1)
    same = total = 0
    for _ in range(100):
        u = torch.rand(32, dtype=torch.float64, generator=gen)
        exact, blocked = _inverse_cdf(logprobs, u), _inverse_cdf_blocked(logprobs, u)
        assert torch.isfinite(logprobs.gather(1, blocked[:, None])).all()
        same += int((exact == blocked).sum())
        total += 32
    assert same >= total - 2
    # u at the ends: the first and the last token of nonzero mass
    ends = torch.tensor([0.0, 1.0 - 2**-53] * 16, dtype=torch.float64)
    for tokens in (_inverse_cdf(logprobs, ends), _inverse_cdf_blocked(logprobs, ends)):
        assert torch.isfinite(logprobs.gather(1, tokens[:, None])).all()
    # the engine's switch: sample_next draws the same token either way here, and the exact
    # path is what every engine whose log-probs are the learner's keeps
    params = SamplingParams(temperature=1.0, max_new_tokens=1)
    u = torch.rand(32, dtype=torch.float64, generator=gen)
    a, lp_a = sample_next(logits, params, uniforms=u)
    b, lp_b = sample_next(logits, params, uniforms=u, blocked=True)
    assert int((a == b).sum()) >= 31 and torch.equal(lp_a[a == b], lp_b[a == b])
