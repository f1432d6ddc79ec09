"""Scorer: failures contained and counted; composite rewards and components, with and without
a worker pool."""

import math

import pytest

from rlvr.errors import ConfigError
from rlvr.rewards.compose import CompositeVerifier, build_verifier
from rlvr.rewards.pool import VerifierPool
from rlvr.rewards.scoring import Scorer

PARTS = """
import math

def tenth(completion, sample):
    return len(completion) / 10

def third(completion, sample):
    if completion == "nan":
        return math.nan
    if completion == "raise":
        raise ZeroDivisionError("boom")
    return len(completion) / 3
"""

TEXTS = ["a", "bb", "ccc", "nan", "raise", "dddddddd"]


def test_a_crashing_or_nan_verifier_gives_zero_reward_and_is_counted():
    def verifier(text, sample):
        if text == "boom":
            raise RuntimeError("bug in user code")
        if text == "nan":
            return math.nan
        return 1.0

    rewards, failures = Scorer(verifier)(["ok", "boom", "nan", "ok"], [{}] * 4)
    assert rewards == [1.0, 0.0, 0.0, 1.0]
    assert failures == 2


def test_a_user_error_still_stops_the_run():
    def verifier(text, sample):
        raise ConfigError("reward.verifier: needs an extra")

    with pytest.raises(ConfigError, match="needs an extra"):
        Scorer(verifier)(["x"], [{}])


def test_unequal_lengths_are_a_bug_not_broadcast():
    with pytest.raises(ValueError, match="2 completions for 1 samples"):
        Scorer(lambda text, sample: 1.0)(["a", "b"], [{}])


def test_a_composite_reward_is_bit_identical_to_the_weighted_sum_of_its_components():
    values = {"a": 0.1, "b": 0.7, "c": 1 / 3}
    weights = {"a": 0.3, "b": 0.1, "c": 0.7}
    v = CompositeVerifier(
        {name: (lambda t, s, x=values[name]: x, weights[name]) for name in values}
    )
    rewards, failures = Scorer(v)(["x"], [{}])
    expected = sum(w * values[name] for name, (_, w) in v.components.items())
    assert failures == 0
    assert rewards[0].hex() == expected.hex()
    assert rewards[0].hex() == v("x", {}).hex()


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("verifiers") / "parts.py"
    path.write_text(PARTS)
    return f"{path}:tenth:0.3,{path}:third:0.7"


def test_components_are_reported_in_process_and_popped(spec):
    scorer = Scorer(build_verifier(spec))
    rewards, failures = scorer(TEXTS, [{}] * len(TEXTS))
    tenth, third = (f"{spec.split(',')[i].rsplit(':', 1)[0]}" for i in range(2))
    assert failures == 2  # the component that returned NaN and the one that raised
    assert rewards[3] == rewards[4] == 0.0
    # a failed completion logs no component (a NaN one fails it: it never reaches the mean)
    kept = [t for t in TEXTS if t not in ("nan", "raise")]
    assert scorer.components[tenth] == [len(t) / 10 for t in kept]
    assert scorer.components[third] == [len(t) / 3 for t in kept]
    assert [f.component for f in scorer.pop_failures()] == [third, third]
    assert scorer.pop_components().keys() == {tenth, third}
    assert scorer.components == {}


def test_a_pool_gives_the_same_rewards_failures_and_components_as_in_process(spec):
    samples = [{}] * len(TEXTS)
    local = Scorer(build_verifier(spec))
    expected = local(TEXTS, samples)
    with VerifierPool(spec, workers=2, timeout_s=10.0) as pool:
        pooled = Scorer(build_verifier(spec), pool)
        rewards, failures = pooled(TEXTS, samples)
        assert [r.hex() for r in rewards] == [r.hex() for r in expected[0]]
        assert failures == expected[1]
        got, want = pooled.pop_components(), local.pop_components()
        assert list(got) == list(want)
        for name in want:
            assert [repr(x) for x in got[name]] == [repr(x) for x in want[name]]
        assert pooled.components == {}


def test_a_pool_reports_no_components_for_a_single_verifier(spec):
    single = spec.split(",")[0].rsplit(":", 1)[0]
    with VerifierPool(single, workers=1, timeout_s=10.0) as pool:
        scorer = Scorer(build_verifier(single), pool)
        assert scorer(["ab"], [{}]) == ([0.2], 0)
        assert scorer.pop_components() == {}


def _picky(completion, sample):
    if completion == "boom":
        raise RuntimeError("picky failed")
    return float(completion == sample["answer"])


def test_rows_an_environment_scored_are_not_scored_and_failures_keep_their_rows():
    calls = []

    def counted(completion, sample):
        calls.append(completion)
        return _picky(completion, sample)

    scorer = Scorer(counted)
    texts = ["1", "boom", "3", "boom"]
    samples = [{"id": f"s{i}", "answer": str(i + 1)} for i in range(4)]
    rewards, failed = scorer(texts, samples, first_row=10, skip=[True, False, False, True])
    assert rewards == [0.0, 0.0, 1.0, 0.0] and failed == 1
    assert calls == ["boom", "3"]  # the skipped rows never reach the verifier
    (failure,) = scorer.pop_failures()
    assert (failure.row, failure.sample_id) == (11, "s1")  # numbered as if all were scored
    assert scorer(texts, samples, skip=[False] * 4)[0] == scorer(texts, samples)[0]


def test_the_environment_verifier_scores_0_and_reads_no_field():
    verifier = build_verifier("environment")
    assert Scorer(verifier)(["632", "<think>x</think>1"], [{}, {"prompt": "p"}]) == ([0.0, 0.0], 0)
