"""Keyed sampling: a row's draws depend only on (seed, global row index, position), so batch
composition, slot schedule, engine and the split of a batch across callers do not change them."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.rollout import FastEngine, HFEngine, SamplingParams
from rlvr.rollout.sampling import keyed_uniform, row_keys, sample_next

PROMPTS = ["12+34=", "7+8=", "100+1=", "5+55=", "9+9="]
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=10)


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


def texts_and_logprobs(batch):
    return batch.completion_text, [lp.tolist() for lp in batch.logprobs]


def test_keyed_uniforms_are_deterministic_uniform_and_distinct():
    keys = row_keys(7, torch.arange(20000))
    positions = torch.arange(20000) % 13
    u = keyed_uniform(keys, positions)
    assert u.dtype == torch.float64
    assert torch.equal(u, keyed_uniform(keys, positions))
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert len(set(u.tolist())) == len(u)  # no collisions among 20k draws (53-bit values)
    # Kolmogorov-Smirnov distance to U(0, 1); the 0.1% critical value for n = 20000 is ~0.0138
    sorted_u = u.sort().values
    n = len(u)
    grid = torch.arange(1, n + 1, dtype=torch.float64) / n
    ks = torch.maximum(grid - sorted_u, sorted_u - (grid - 1.0 / n)).max()
    assert float(ks) < 0.0138
    # other seeds and other positions give other numbers
    assert not torch.equal(u, keyed_uniform(row_keys(8, torch.arange(20000)), positions))
    assert not torch.equal(u, keyed_uniform(keys, positions + 1))


def test_keyed_draws_follow_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    n = 40000
    logits = probs.log().expand(n, -1)
    tokens, logprobs = sample_next(
        logits,
        SamplingParams(temperature=1.0),
        keys=row_keys(3, torch.arange(n)),
        positions=torch.zeros(n, dtype=torch.long),
    )
    counts = torch.bincount(tokens, minlength=5).double()
    expected = probs.double() * n
    assert counts[4] == 0  # zero probability is never drawn
    sigma = (expected[:4] * (1 - probs[:4].double())).sqrt()
    assert bool(((counts[:4] - expected[:4]).abs() < 4 * sigma).all()), counts
    torch.testing.assert_close(logprobs, probs.log()[tokens])


def test_uniforms_given_directly_draw_what_the_keys_draw():
    # what FastEngine does: each row's uniforms for every position at once, one gather per step
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=gen) * 3
    keys, at = row_keys(9, torch.arange(64)), torch.randint(0, 16, (64,), generator=gen)
    table = keyed_uniform(keys.unsqueeze(1), torch.arange(16).unsqueeze(0))  # [rows, positions]
    assert torch.equal(table[torch.arange(64), at], keyed_uniform(keys, at))
    for params in (SamplingParams(temperature=0.7), SamplingParams(temperature=1.0, top_p=0.9)):
        keyed = sample_next(logits, params, keys=keys, positions=at)
        direct = sample_next(logits, params, uniforms=table[torch.arange(64), at])
        assert torch.equal(keyed[0], direct[0]) and torch.equal(keyed[1], direct[1])
    assert len(set(keyed[0].tolist())) > 10


def test_keyed_draws_respect_top_k_and_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]).expand(5000, -1)
    keys, at = row_keys(0, torch.arange(5000)), torch.zeros(5000, dtype=torch.long)
    top_k = SamplingParams(temperature=1.0, top_k=2)
    tokens, _ = sample_next(logits, top_k, keys=keys, positions=at)
    assert set(tokens.tolist()) == {0, 1}
    top_p = SamplingParams(temperature=1.0, top_p=0.6)
    tokens, _ = sample_next(logits, top_p, keys=keys, positions=at)
    assert set(tokens.tolist()) == {0}  # p(0) = 0.64 >= 0.6 alone


@pytest.mark.parametrize("engine_cls", [FastEngine, HFEngine])
def test_completions_do_not_depend_on_the_batch_size(
    tiny_llama, char_tokenizer, prompts, engine_cls
):
    runs = [
        engine_cls(tiny_llama, char_tokenizer, max_batch_size=size).generate(
            prompts, 3, SAMPLED, torch.Generator().manual_seed(11)
        )
        for size in (1, 4, 64)
    ]
    assert texts_and_logprobs(runs[0])[0] == texts_and_logprobs(runs[1])[0]
    assert texts_and_logprobs(runs[0])[0] == texts_and_logprobs(runs[2])[0]
    assert len(set(runs[0].completion_text)) > 5  # sampled, not greedy


def test_fast_and_hf_engines_draw_the_same_completions(tiny_llama, char_tokenizer, prompts):
    fast = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4).generate(
        prompts, 3, SAMPLED, torch.Generator().manual_seed(5)
    )
    reference = HFEngine(tiny_llama, char_tokenizer).generate(
        prompts, 3, SAMPLED, torch.Generator().manual_seed(5)
    )
    assert fast.completion_text == reference.completion_text
    for a, b in zip(fast.logprobs, reference.logprobs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_a_batch_split_across_callers_gives_the_same_rows(tiny_llama, char_tokenizer, prompts):
    """What data-parallel ranks and Ray workers rely on: prompts 0-1 and 2-4 generated by two
    callers with first_row offsets equal the whole batch generated at once."""
    engine = FastEngine(tiny_llama, char_tokenizer)
    whole = engine.generate(prompts, 3, SAMPLED, torch.Generator().manual_seed(9))
    head = engine.generate(prompts[:2], 3, SAMPLED, torch.Generator().manual_seed(9), first_row=0)
    tail = engine.generate(prompts[2:], 3, SAMPLED, torch.Generator().manual_seed(9), first_row=6)
    assert whole.completion_text == head.completion_text + tail.completion_text
    other = engine.generate(prompts, 3, SAMPLED, torch.Generator().manual_seed(10))
    assert other.completion_text != whole.completion_text
    assert math.isfinite(sum(float(lp.sum()) for lp in whole.logprobs))


def test_inverse_cdf_past_the_last_token_with_mass_takes_the_mode():
    # u * total equal to the total would land on the trailing zero-mass tokens: the mode is
    # taken instead, for that row only (the other row keeps its inverse-CDF token)
    from rlvr.rollout.sampling import _inverse_cdf

    probs = torch.tensor([[0.2, 0.5, 0.3, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25, 0.0]])
    logprobs = probs.log()
    tokens = _inverse_cdf(logprobs, torch.tensor([1.0, 0.3], dtype=torch.float64))
    assert tokens.tolist() == [1, 1]
