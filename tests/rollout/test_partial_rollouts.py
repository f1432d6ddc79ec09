"""Partial rollouts in the fast engine: a `WeightFeed` polled before each decode forward; new
weights continue the unfinished rows at a token boundary, each token tagged with its version."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.rollout import FastEngine, HFEngine, SamplingParams
from rlvr.rollout.multi_turn import MultiTurnEngine
from rlvr.rollout.sampling import filter_logits

PROMPTS = ["12+3=", "a", "What is 7*8?", "<think>x", "9-4=5,"]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=10)


class SwitchAt:
    """A WeightFeed whose `at`-th poll applies `change` to the model: version 0, then 1."""

    def __init__(self, at: int, change=None) -> None:
        self.at, self.change, self.polls, self.version = at, change, 0, 0

    def poll(self) -> bool:
        self.polls += 1
        if self.polls != self.at:
            return False
        if self.change is not None:
            self.change()
        self.version = 1
        return True


def logprobs_under(model, prompt: list[int], completion: torch.Tensor) -> torch.Tensor:
    """Each completion token's log-prob under `model` at T=1, from one uncached forward."""
    ids = torch.tensor(prompt + completion.tolist())[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()[len(prompt) - 1 : ids.shape[1] - 1]
    return filter_logits(logits, 1.0, 0, 1.0).log_softmax(-1).gather(1, completion[:, None])[:, 0]


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


def test_a_feed_without_new_weights_changes_nothing(tiny_llama, char_tokenizer, prompts):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    plain = engine.generate(prompts, 3, SAMPLING, torch.Generator().manual_seed(1))
    feed = SwitchAt(at=-1)
    fed = engine.generate(prompts, 3, SAMPLING, torch.Generator().manual_seed(1), feed=feed)
    assert plain.versions is None and feed.polls > 0
    assert fed.completion_text == plain.completion_text
    for a, b, v in zip(fed.logprobs, plain.logprobs, fed.versions, strict=True):
        assert torch.equal(a, b) and v.dtype == torch.long and (v == 0).all()
        assert v.numel() == a.numel()


@pytest.mark.parametrize("at", [1, 4, 9])
def test_tokens_after_a_switch_are_sampled_by_the_new_weights(
    tiny_llama, char_tokenizer, prompts, at
):
    """The switch scales the final norm, which no key or value depends on, so keeping the K/V
    cache is exact here: every token's log-prob must be the old model's when tagged 0 and the
    new one's when tagged 1 (including rows whose prompt was prefilled before the switch and
    took a slot after it: their first token comes from the old weights' prefill)."""
    old = copy.deepcopy(tiny_llama)

    def change() -> None:
        with torch.no_grad():
            tiny_llama.model.norm.weight.mul_(1.7)

    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    feed = SwitchAt(at, change)
    batch = engine.generate(prompts, 3, SAMPLING, torch.Generator().manual_seed(2), feed=feed)
    assert feed.version == 1
    both = torch.cat(batch.versions)
    assert (both == 0).any() and (both == 1).any()
    for row, (completion, versions) in enumerate(zip(batch.completion_ids, batch.versions)):
        assert (versions[1:] >= versions[:-1]).all()
        prompt = prompts[batch.prompt_index[row]]
        expected = torch.where(
            versions == 0,
            logprobs_under(old, prompt, completion),
            logprobs_under(tiny_llama, prompt, completion),
        )
        torch.testing.assert_close(batch.logprobs[row], expected, atol=1e-4, rtol=0)


def test_the_hf_engine_finishes_on_the_weights_it_started_with(tiny_llama, char_tokenizer, prompts):
    feed = SwitchAt(at=1, change=lambda: None)
    batch = HFEngine(tiny_llama, char_tokenizer).generate(prompts, 1, SAMPLING, feed=feed)
    assert batch.versions is None and feed.polls == 0


class Echo:
    """An environment that answers every turn with 'ok' until the row's second turn."""

    def __init__(self) -> None:
        self.turns = 0

    def reset(self, sample):
        return None

    def step(self, text):
        from rlvr.environments import StepResult

        self.turns += 1
        return StepResult(observation="ok", done=self.turns >= 2)


def test_multi_turn_rows_carry_each_turns_versions(tiny_llama, char_tokenizer, prompts):
    engine = MultiTurnEngine(
        FastEngine(tiny_llama, char_tokenizer, max_batch_size=4), char_tokenizer, Echo, max_turns=3
    )
    feed = SwitchAt(at=3)
    batch = engine.generate(prompts, 2, SAMPLING, torch.Generator().manual_seed(0), feed=feed)
    assert batch.versions is not None
    for versions, completion, mask in zip(batch.versions, batch.completion_ids, batch.loss_masks):
        assert versions.numel() == completion.numel() == mask.numel()
        assert (versions[1:] >= versions[:-1]).all()
    assert int(torch.cat(batch.versions).max()) == 1
