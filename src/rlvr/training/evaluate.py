"""Held-out evaluation with fixed decoding: greedy accuracy and pass@1 at temperature 1."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rlvr.rewards.exact import is_reasoning
from rlvr.rollout.types import SamplingParams


def evaluate(
    engine: Any,
    samples: Sequence[Mapping[str, Any]],
    prompt_ids: Sequence[list[int]],
    verifier: Callable[[str, Mapping[str, Any]], float],
    *,
    max_new_tokens: int,
    t1_samples: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Score a model on held-out samples.

    accuracy            greedy decoding, fraction of problems with reward >= 1 (reward == 1
                        for binary verifiers)
    pass1_t1            mean reward over `t1_samples` samples per problem at temperature 1
                        (an unbiased pass@1 estimate at T=1)
    reasoning_fraction  fraction of the temperature-1 completions that open a <think> block
    reasoning_fraction_greedy  the same for the greedy completions
    mean_length         mean completion length of the temperature-1 completions, tokens
    mean_length_greedy  the same for the greedy completions
    truncated_fraction  fraction of temperature-1 completions cut at max_new_tokens
    n                   number of problems

    The temperature-1 samples use a generator seeded with `seed`, so the evaluation of a given
    model is reproducible.
    """
    n = len(samples)
    if n == 0:
        return {"n": 0}
    greedy = engine.generate(
        list(prompt_ids), 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    )
    gen = torch.Generator().manual_seed(seed)
    sampled = engine.generate(
        list(prompt_ids),
        t1_samples,
        SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens),
        generator=gen,
    )
    greedy_rewards = [
        verifier(t, samples[i]) for t, i in zip(greedy.completion_text, greedy.prompt_index)
    ]
    t1_rewards = [
        verifier(t, samples[i]) for t, i in zip(sampled.completion_text, sampled.prompt_index)
    ]
    return {
        "accuracy": sum(r >= 1.0 for r in greedy_rewards) / n,
        "pass1_t1": sum(t1_rewards) / len(t1_rewards),
        "reasoning_fraction": _mean([is_reasoning(t) for t in sampled.completion_text]),
        "reasoning_fraction_greedy": _mean([is_reasoning(t) for t in greedy.completion_text]),
        "mean_length": _mean(sampled.completion_lengths),
        "mean_length_greedy": _mean(greedy.completion_lengths),
        "truncated_fraction": _mean(sampled.truncated),
        "n": n,
    }


def _mean(values: Sequence[float | bool | int]) -> float:
    return float(sum(values)) / len(values) if values else 0.0
