"""Weighted sums of verifiers and the batch/async adapters."""

import asyncio

import pytest

from rlvr.errors import ConfigError
from rlvr.rewards.base import score_with_detail
from rlvr.rewards.compose import (
    CompositeVerifier,
    build_verifier,
    is_composite_spec,
    score_async,
    score_batch,
    score_batch_async,
)
from rlvr.rewards.format import format_reward
from rlvr.rewards.math import MathVerifier

GOOD = "<think>2+3</think><answer>5</answer>"
SAMPLE = {"answer": "5"}


def always(value):
    return lambda completion, sample: value


def test_weighted_sum_and_components_by_name():
    v = CompositeVerifier({"a": (always(1.0), 1.0), "b": (always(0.5), 0.1)})
    assert v("x", {}) == pytest.approx(1.05)
    assert v.score_components("x", {}) == {"a": 1.0, "b": 0.5}  # unweighted, for logging


def test_from_spec_resolves_builtins_with_weights():
    v = CompositeVerifier.from_spec("exact_answer:1.0, format:0.1")
    assert list(v.components) == ["exact_answer", "format"]
    assert v.components["format"] == (format_reward, 0.1)


def test_math_and_format_spec_scores_correct_and_well_formed():
    v = CompositeVerifier(
        {"math": (MathVerifier(isolate=False), 1.0), "format": (format_reward, 0.1)}
    )
    assert v(GOOD, SAMPLE) == pytest.approx(1.1)
    assert v("<answer>5</answer>", SAMPLE) == pytest.approx(1.0)
    assert v(GOOD, {"answer": "6"}) == pytest.approx(0.1)
    score = score_with_detail(v, GOOD, SAMPLE)
    assert score.reward == pytest.approx(1.1) and score.detail == "math=1 (5); format=1"


@pytest.mark.parametrize(
    "spec, composite",
    [
        ("math", False),
        ("rlvr.rewards.math:math_reward", False),
        ("path/to/my.py:verify", False),
        ("math:1.0", True),
        ("math:1,format:0.1", True),
        ("rlvr.rewards.math:math_reward:0.5", True),
    ],
)
def test_spec_kinds(spec, composite):
    assert is_composite_spec(spec) is composite


def test_build_verifier_passes_single_specs_to_the_registry():
    from rlvr.rewards.exact import exact_answer_reward

    assert build_verifier("exact_answer") is exact_answer_reward
    assert isinstance(build_verifier("exact_answer:2"), CompositeVerifier)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("math:1,math:2", "appears twice"),
        ("math:1,,format:1", "empty item"),
        ("math:nan", "must be finite"),
        ("nosuch:1", "unknown verifier 'nosuch'"),
    ],
)
def test_bad_specs_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        CompositeVerifier.from_spec(spec)


def test_batch_adapter_keeps_order_and_never_broadcasts():
    v = lambda c, s: float(c == s["answer"])  # noqa: E731
    assert score_batch(v, ["1", "2"], [{"answer": "1"}, {"answer": "1"}]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 completions but 1 samples"):
        score_batch(v, ["1", "2"], [{"answer": "1"}])


def test_async_adapters_keep_order_and_never_broadcast():
    v = lambda c, s: float(c == s["answer"])  # noqa: E731
    samples = [{"answer": str(i % 3)} for i in range(20)]
    completions = [str(i % 2) for i in range(20)]
    rewards = asyncio.run(score_batch_async(v, completions, samples, max_concurrency=4))
    assert rewards == [float(c == s["answer"]) for c, s in zip(completions, samples)]
    assert asyncio.run(score_async(v, "1", {"answer": "1"})) == 1.0
    with pytest.raises(ValueError, match="3 completions but 2 samples"):
        asyncio.run(score_batch_async(v, ["1"] * 3, samples[:2]))
