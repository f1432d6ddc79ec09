"""evaluate() options the trainer's config sets: eval.t1_samples=0 (no temperature-1 pass) and
rollout.stop (evaluation completions end where rollouts end)."""

import pytest
import torch

from rlvr.config import config_warnings, load_config
from rlvr.evaluation.evaluate import evaluate, heldout_eval
from rlvr.rollout import HFEngine, RolloutBatch, SamplingParams

GREEDY_KEYS = {"accuracy", "reasoning_fraction_greedy", "mean_length_greedy", "n"}
T1_KEYS = {"pass1_t1", "reasoning_fraction", "mean_length", "truncated_fraction"}


class RecordingEngine:
    """Returns "7" for every row and records the SamplingParams of each generate call."""

    def __init__(self):
        self.calls: list[tuple[int, SamplingParams]] = []

    def generate(self, prompts, n, sampling, generator=None, samples=None):
        self.calls.append((n, sampling))
        rows = len(prompts) * n
        return RolloutBatch(
            prompt_ids=[torch.tensor([1]) for _ in range(rows)],
            completion_ids=[torch.tensor([7]) for _ in range(rows)],
            completion_text=["7"] * rows,
            logprobs=[torch.zeros(1) for _ in range(rows)],
            finish_reason=["eos"] * rows,
            prompt_index=[i for i in range(len(prompts)) for _ in range(n)],
        )


def _exact(text, sample):
    return float(text == sample["answer"])


SAMPLES = [{"prompt": "3+4=", "answer": "7"}, {"prompt": "1+1=", "answer": "2"}]


def test_t1_samples_0_with_k_0_skips_the_temperature_1_pass():
    engine = RecordingEngine()
    out = evaluate(engine, SAMPLES, [[1], [2]], _exact, max_new_tokens=4, t1_samples=0)
    assert [sampling.temperature for _, sampling in engine.calls] == [0.0]  # greedy only
    assert set(out) == GREEDY_KEYS
    assert out["accuracy"] == 0.5


def test_t1_samples_0_with_k_draws_k_samples_for_pass_at_k():
    engine = RecordingEngine()
    out = evaluate(engine, SAMPLES, [[1], [2]], _exact, max_new_tokens=4, t1_samples=0, k=3)
    assert [(n, s.temperature) for n, s in engine.calls] == [(1, 0.0), (3, 1.0)]
    assert T1_KEYS | {"pass@3", "maj@3"} <= set(out)
    assert out["pass1_t1"] == 0.5


def test_negative_t1_samples_is_refused():
    with pytest.raises(ValueError, match="t1_samples"):
        evaluate(RecordingEngine(), SAMPLES, [[1], [2]], _exact, max_new_tokens=4, t1_samples=-1)


def test_config_accepts_t1_samples_0_and_warns_only_when_k_draws_anyway():
    greedy_only = load_config(None, ["eval.t1_samples=0"])
    assert greedy_only.eval.t1_samples == 0
    assert not [line for line in config_warnings(greedy_only) if line.startswith("eval.")]
    with_k = config_warnings(load_config(None, ["eval.t1_samples=0", "eval.k=4"]))
    assert "eval.t1_samples=0 has no effect: eval.k=4 draws 4 temperature-1 samples" in "\n".join(
        with_k
    )


def test_the_trainers_heldout_eval_passes_rollout_stop_to_greedy_and_sampled_decoding():
    cfg = load_config(None, ["eval.size=2", 'rollout.stop=["</answer>", "\\n\\n"]'])
    engine = RecordingEngine()
    task = type("Task", (), {"heldout": lambda self, n: SAMPLES[:n]})()
    evaluation = heldout_eval(cfg, task, engine, lambda s: [1], _exact)
    evaluation()
    assert [s.temperature for _, s in engine.calls] == [0.0, 1.0]
    assert all(s.stop == ("</answer>", "\n\n") for _, s in engine.calls)


def test_evaluation_completions_end_at_a_stop_string_exactly_as_rollouts_do(
    tiny_llama, char_tokenizer
):
    engine = HFEngine(tiny_llama, char_tokenizer)
    samples = [{"prompt": f"{i}+{i}=", "answer": str(i)} for i in range(4)]
    ids = [list(char_tokenizer(s["prompt"])["input_ids"]) for s in samples]
    free = engine.generate(ids, 1, SamplingParams(temperature=0.0, max_new_tokens=8))
    stop = free.completion_text[0][1]  # the first greedy completion's second character
    seen: list[str] = []

    def recording(text, sample):
        seen.append(text)
        return 0.0

    evaluate(engine, samples, ids, recording, max_new_tokens=8, t1_samples=2, seed=3, stop=[stop])
    # What a rollout with the same stop string gives: greedy, then T=1 from the same seed.
    greedy = engine.generate(ids, 1, SamplingParams(0.0, max_new_tokens=8, stop=(stop,)))
    sampled = engine.generate(
        ids,
        2,
        SamplingParams(1.0, max_new_tokens=8, stop=(stop,)),
        generator=torch.Generator().manual_seed(3),
    )
    assert seen == greedy.completion_text + sampled.completion_text
    assert seen[0] == free.completion_text[0][:2]  # cut right after the stop string
    assert greedy.finish_reason[0] == "stop"
