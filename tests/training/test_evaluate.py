"""evaluate(): default keys unchanged; with k > 0, pass@k / maj@k / per-source / budgets."""

import pytest
import torch

from rlvr.evaluation.evaluate import evaluate
from rlvr.rollout import HFEngine, RolloutBatch

BASE_KEYS = {
    "accuracy",
    "pass1_t1",
    "reasoning_fraction",
    "reasoning_fraction_greedy",
    "mean_length",
    "mean_length_greedy",
    "truncated_fraction",
    "n",
}


def _first_digit(text):
    return next((ch for ch in text if ch.isdigit()), None)


def _verifier(text, sample):
    """A deterministic verifier that random completions pass sometimes: first digit == answer."""
    return 1.0 if _first_digit(text) == sample["answer"] else 0.0


def _problem_set(char_tokenizer, count=6):
    samples = [
        {"prompt": f"{i}+{i}=", "answer": str(i % 3), "source": "even" if i % 2 else "odd"}
        for i in range(count)
    ]
    ids = [list(char_tokenizer(s["prompt"])["input_ids"]) for s in samples]
    return samples, ids


def test_default_keys_and_values_unchanged_by_k(tiny_llama, char_tokenizer):
    engine = HFEngine(tiny_llama, char_tokenizer)
    samples, ids = _problem_set(char_tokenizer)
    base = evaluate(engine, samples, ids, _verifier, max_new_tokens=6, t1_samples=3, seed=1)
    assert set(base) == BASE_KEYS
    again = evaluate(engine, samples, ids, _verifier, max_new_tokens=6, t1_samples=3, seed=1, k=0)
    assert again == base


def test_with_k_reports_pass_maj_source_and_budget_metrics(tiny_llama, char_tokenizer):
    engine = HFEngine(tiny_llama, char_tokenizer)
    samples, ids = _problem_set(char_tokenizer)
    out = evaluate(
        engine,
        samples,
        ids,
        _verifier,
        max_new_tokens=6,
        t1_samples=2,
        seed=1,
        k=4,
        budgets=(2, 6),
        extract=_first_digit,
    )
    expected = BASE_KEYS | {
        "pass@1",
        "pass@4",
        "maj@4",
        "accuracy/even",
        "accuracy/odd",
        "accuracy_within_2",
        "accuracy_within_6",
    }
    assert set(out) == expected
    for key in expected - {"n", "mean_length", "mean_length_greedy"}:
        assert 0.0 <= out[key] <= 1.0, key
    assert out["pass@4"] >= out["pass@1"]
    assert out["pass@1"] == pytest.approx(out["pass1_t1"])  # binary verifier, same samples
    assert out["accuracy_within_2"] <= out["accuracy_within_6"] == out["accuracy"]
    assert (out["accuracy/even"] + out["accuracy/odd"]) / 2 == pytest.approx(out["accuracy"])


class _ScriptedEngine:
    """Returns fixed completions: greedy -> `greedy`, sampled -> `sampled[i]` per prompt."""

    def __init__(self, greedy, sampled):
        self.greedy, self.sampled = greedy, sampled

    def generate(self, prompts, n, sampling, generator=None, samples=None):
        if sampling.temperature == 0.0:
            texts = [[t] for t in self.greedy]
        else:
            texts = [rows[:n] for rows in self.sampled]
        flat = [t for rows in texts for t in rows]
        return RolloutBatch(  # one token per character: completion length = len(text)
            prompt_ids=[torch.tensor([1]) for _ in flat],
            completion_ids=[torch.ones(len(t), dtype=torch.long) for t in flat],
            completion_text=flat,
            logprobs=[torch.zeros(len(t)) for t in flat],
            finish_reason=["eos"] * len(flat),
            prompt_index=[i for i, rows in enumerate(texts) for _ in rows],
        )


def test_hand_computed_metrics_on_scripted_completions():
    samples = [{"prompt": "a", "answer": "7", "source": "x"}, {"prompt": "b", "answer": "3"}]
    engine = _ScriptedEngine(
        greedy=["7", "<think>1+2+0=03</think>3"],
        sampled=[["7", "1", "1", "7"], ["9", "9", "3", "x"]],
    )

    def verifier(text, sample):
        from rlvr.rewards.exact import exact_answer_reward

        return exact_answer_reward(text, sample)

    out = evaluate(engine, samples, [[1], [2]], verifier, max_new_tokens=64, k=2, budgets=(1, 64))
    # problem 0: c=2 of m=4, problem 1: c=1 of 4
    assert out["pass@1"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert out["pass@2"] == pytest.approx(((1 - 1 / 6) + (1 - 3 / 6)) / 2)
    # first k=2 samples: ["7","1"] tie -> "7" (first) correct; ["9","9"] -> "9" wrong
    assert out["maj@2"] == 0.5
    assert out["accuracy"] == 1.0
    assert out["accuracy/x"] == 1.0  # only the sample that carries a source
    assert out["accuracy_within_1"] == 0.5 and out["accuracy_within_64"] == 1.0


def test_negative_k_is_rejected(tiny_llama, char_tokenizer):
    engine = HFEngine(tiny_llama, char_tokenizer)
    samples, ids = _problem_set(char_tokenizer, 1)
    with pytest.raises(ValueError):
        evaluate(engine, samples, ids, _verifier, max_new_tokens=2, k=-1)
