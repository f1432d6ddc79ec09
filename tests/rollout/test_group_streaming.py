"""FastEngine.stream (rollout.async_unit=group): continuous batching over an open-ended supply of
prompts, each group handed over as soon as its last row ends."""

from __future__ import annotations

import pytest
import torch

from rlvr.rollout import FastEngine, RolloutBatch, SamplingParams
from rlvr.rollout.sampling import filter_logits

PROMPTS = ["12+3=", "a", "What is 7*8?", "<think>x", "9-4=5,", "7", "bb+1=", "hello"]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12)


class Supply:
    """GroupRequests over a fixed list of prompts, handed out `per_take` at most per call;
    records what the engine did when: (event, index, forwards so far)."""

    def __init__(self, prompts: list[list[int]], engine: FastEngine, per_take: int = 8) -> None:
        self.prompts, self.engine, self.per_take = prompts, engine, per_take
        self.next = 0
        self.groups: dict[int, RolloutBatch] = {}
        self.events: list[tuple[str, int]] = []

    def take(self, limit: int, wait: bool) -> list[list[int]]:
        count = min(limit, self.per_take, len(self.prompts) - self.next)
        out = self.prompts[self.next : self.next + count]
        for i in range(self.next, self.next + count):
            self.events.append(("take", i))
        self.next += count
        return out

    def done(self, index: int, batch: RolloutBatch) -> None:
        assert index not in self.groups
        self.events.append(("done", index))
        self.groups[index] = batch


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


@pytest.mark.parametrize("slots", [3, 8, 64])
def test_streamed_groups_equal_one_generate_call_row_for_row(
    tiny_llama, char_tokenizer, prompts, slots
):
    """Rows are keyed by their index over the call, so whatever the slot schedule a streamed
    group holds exactly the completions `generate` samples for those rows."""
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=slots)
    whole = engine.generate(prompts, 3, SAMPLING, torch.Generator().manual_seed(5))
    supply = Supply(prompts, engine, per_take=2)
    engine.stream(supply, 3, SAMPLING, torch.Generator().manual_seed(5))
    assert sorted(supply.groups) == list(range(len(prompts)))
    for i, group in supply.groups.items():
        rows = slice(3 * i, 3 * i + 3)
        assert group.prompt_index == [0, 0, 0] and group.versions is None
        assert [p.tolist() for p in group.prompt_ids] == [prompts[i]] * 3
        assert group.completion_text == whole.completion_text[rows]
        assert group.finish_reason == whole.finish_reason[rows]
        for a, b in zip(group.logprobs, whole.logprobs[rows], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_long_group_holds_back_only_itself(tiny_llama, char_tokenizer, prompts):
    """With 2 groups' worth of slots, groups taken after a long one are handed over before it:
    its slots stay busy while the others' are refilled with new prompts."""
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    supply = Supply(prompts, engine, per_take=1)
    engine.stream(supply, 2, SAMPLING, torch.Generator().manual_seed(3))
    done = [i for event, i in supply.events if event == "done"]
    assert sorted(done) == list(range(len(prompts)))
    overtaken = [
        (i, j) for a, i in enumerate(done) for j in done[a + 1 :] if j < i
    ]  # j taken before i but handed over after it
    assert overtaken
    taken = [i for event, i in supply.events if event == "take"]
    assert taken == list(range(len(prompts)))  # prompts start in the order given
    lengths = {i: max(g.completion_lengths) for i, g in supply.groups.items()}
    slow = done[-1]
    assert lengths[slow] == max(lengths.values())  # the last one handed over is the longest


def test_a_prompt_longer_than_the_buffers_waits_for_the_rows_in_flight(
    tiny_llama, char_tokenizer, prompts
):
    """The K/V buffers fit the first prompts; a much longer one arrives later, waits until
    nothing is in flight, and is served from grown buffers with the same completions."""
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    long = char_tokenizer.encode("x" * 150)
    order = [prompts[0], prompts[1], long, prompts[2]]
    whole = engine.generate(order, 2, SAMPLING, torch.Generator().manual_seed(2))
    supply = Supply(order, engine, per_take=1)
    engine.stream(supply, 2, SAMPLING, torch.Generator().manual_seed(2))
    for i, group in supply.groups.items():
        assert group.completion_text == whole.completion_text[2 * i : 2 * i + 2]
    assert engine._cache is not None and engine._cache.max_len >= len(long) + 12


def test_weights_taken_mid_stream_are_tagged_and_used(tiny_llama, char_tokenizer, prompts):
    """A feed polled during the stream: tokens after the switch carry version 1, and rows begun
    after it are sampled from the new weights throughout (their log-probs are the changed
    model's; rows in flight keep the K/V of their earlier tokens)."""
    import copy

    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    changed = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for p in changed.parameters():
            p.mul_(1.5)

    class Feed:
        polls, version = 0, 0

        def poll(self) -> bool:
            self.polls += 1
            if self.polls != 6:
                return False
            tiny_llama.load_state_dict(changed.state_dict())
            self.version = 1
            return True

    supply = Supply(prompts, engine, per_take=1)
    engine.stream(supply, 2, SAMPLING, torch.Generator().manual_seed(4), feed=Feed())
    versions = torch.cat([v for g in supply.groups.values() for v in (g.versions or [])])
    assert (versions == 0).any() and (versions == 1).any()
    fresh = 0
    for group in supply.groups.values():
        assert group.versions is not None
        for prompt, completion, logprobs, v in zip(
            group.prompt_ids, group.completion_ids, group.logprobs, group.versions, strict=True
        ):
            assert (v[1:] >= v[:-1]).all()
            if (v == 1).all():  # started after the switch: the new weights' throughout
                fresh += 1
                ids = torch.cat([prompt, completion])[None]
                with torch.no_grad():
                    logits = changed(input_ids=ids).logits[0, prompt.numel() - 1 : -1].float()
                ref = filter_logits(logits, 1.0, 0, 1.0).log_softmax(-1)
                ref = ref.gather(1, completion[:, None])[:, 0]
                torch.testing.assert_close(logprobs, ref, rtol=0, atol=1e-4)
    assert fresh


def test_an_unsupported_architecture_cannot_stream(char_tokenizer, prompts):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(char_tokenizer), n_embd=32, n_layer=1, n_head=2)
    )
    engine = FastEngine(model, char_tokenizer, max_batch_size=4)
    with pytest.raises(ValueError, match="rollout.async_unit=group needs the fast engine"):
        engine.stream(Supply(prompts, engine), 2, SAMPLING)
