import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from rlvr.rollout import HFEngine, RolloutBatch, SamplingParams

PROMPTS = ["12+3=", "a", "What is 7*8?", "<think>x"]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def full_forward_logprobs(model, prompt: list[int], completion: torch.Tensor, temperature: float):
    """log_softmax(logits / T) of each completion token from one uncached forward pass."""
    ids = torch.tensor(prompt + completion.tolist())[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    positions = torch.arange(len(prompt) - 1, ids.shape[1] - 1)
    logprobs = (logits[positions] / temperature).log_softmax(-1)
    return logprobs.gather(1, completion[:, None])[:, 0]


class EosAfterPosition(torch.nn.Module):
    """Wraps a causal LM and makes EOS overwhelmingly likely at positions >= `position`."""

    def __init__(self, model, eos_id: int, position: int):
        super().__init__()
        self.model, self.eos_id, self.position = model, eos_id, position
        self.generation_config = model.generation_config
        self.training_flags: list[bool] = []

    def get_base_model(self):
        """The engine reads the wrapped model's signature (its KV-cache keyword is `cache` in
        newer transformers, `past_key_values` in older ones) as it does for a peft wrapper."""
        return self.model

    def forward(self, input_ids, attention_mask, position_ids, **kwargs):
        self.training_flags.append(self.model.training)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **kwargs,
        )
        late = position_ids[:, -out.logits.shape[1] :] >= self.position
        out.logits[..., self.eos_id] += 1e4 * late
        return out


@pytest.fixture
def tiny_gpt2(char_tokenizer) -> GPT2LMHeadModel:
    """Absolute position embeddings: unlike RoPE, wrong position_ids under left padding show."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(char_tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        eos_token_id=char_tokenizer.eos_token_id,
        pad_token_id=char_tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.bos_token_id = None
    return model


@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
def test_greedy_matches_hf_generate_for_prompts_of_different_lengths(
    model_name, request, char_tokenizer, prompts
):
    model = request.getfixturevalue(model_name)
    batch = HFEngine(model, char_tokenizer).generate(prompts, n=1, sampling=GREEDY)
    ids, mask = left_padded(prompts, char_tokenizer.pad_token_id)
    reference = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=GREEDY.max_new_tokens,
        pad_token_id=char_tokenizer.pad_token_id,
        eos_token_id=char_tokenizer.eos_token_id,
    )[:, ids.shape[1] :]
    for row, completion in enumerate(batch.completion_ids):
        assert torch.equal(completion, reference[row, : completion.numel()])
        if batch.finish_reason[row] == "length":
            assert completion.numel() == GREEDY.max_new_tokens


def test_chunking_by_max_batch_size_does_not_change_greedy_outputs(
    tiny_llama, char_tokenizer, prompts
):
    whole = HFEngine(tiny_llama, char_tokenizer).generate(prompts, n=2, sampling=GREEDY)
    chunked = HFEngine(tiny_llama, char_tokenizer, max_batch_size=3).generate(
        prompts, n=2, sampling=GREEDY
    )
    for a, b in zip(whole.completion_ids, chunked.completion_ids, strict=True):
        assert torch.equal(a, b)
    assert whole.completion_text == chunked.completion_text


def test_sampled_logprobs_match_an_uncached_forward_pass_at_temperature(
    tiny_llama, char_tokenizer, prompts
):
    sampling = SamplingParams(temperature=0.7, max_new_tokens=10)
    generator = torch.Generator().manual_seed(0)
    batch = HFEngine(tiny_llama, char_tokenizer).generate(prompts, 2, sampling, generator)
    for row, completion in enumerate(batch.completion_ids):
        prompt = prompts[batch.prompt_index[row]]
        expected = full_forward_logprobs(tiny_llama, prompt, completion, temperature=0.7)
        assert batch.logprobs[row].shape == completion.shape
        torch.testing.assert_close(batch.logprobs[row], expected, atol=1e-4, rtol=0)


def test_greedy_logprobs_are_raw_log_softmax_of_an_uncached_forward_pass(
    tiny_llama, char_tokenizer, prompts
):
    batch = HFEngine(tiny_llama, char_tokenizer).generate(prompts, 1, GREEDY)
    for row, completion in enumerate(batch.completion_ids):
        expected = full_forward_logprobs(tiny_llama, prompts[row], completion, temperature=1.0)
        torch.testing.assert_close(batch.logprobs[row], expected, atol=1e-4, rtol=0)


def test_seeded_generator_reproduces_rollouts_and_other_seeds_differ(
    tiny_llama, char_tokenizer, prompts
):
    engine = HFEngine(tiny_llama, char_tokenizer)
    sampling = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8)

    def run(seed: int) -> RolloutBatch:
        return engine.generate(prompts, 2, sampling, torch.Generator().manual_seed(seed))

    first, again, other = run(3), run(3), run(4)
    assert first.completion_text == again.completion_text
    assert all(torch.equal(a, b) for a, b in zip(first.logprobs, again.logprobs, strict=True))
    assert first.completion_text != other.completion_text


def test_n_samples_per_prompt_form_contiguous_groups(tiny_llama, char_tokenizer, prompts):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4)
    batch = HFEngine(tiny_llama, char_tokenizer, max_batch_size=5).generate(
        prompts[:3], 3, sampling, torch.Generator().manual_seed(0)
    )
    assert len(batch) == 9
    assert batch.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert torch.equal(batch.group_ids, torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2]))
    for row, prompt_ids in enumerate(batch.prompt_ids):
        assert prompt_ids.tolist() == prompts[batch.prompt_index[row]]
    # Rows of one group are sampled independently, not copies of one another.
    assert len(set(batch.completion_text[:3])) > 1


def test_eos_ends_each_row_keeps_the_token_and_hides_it_from_text(
    tiny_llama, char_tokenizer, prompts
):
    eos = char_tokenizer.eos_token_id
    forced_at = 8  # absolute position: rows with longer prompts stop sooner
    model = EosAfterPosition(tiny_llama, eos, forced_at)
    batch = HFEngine(model, char_tokenizer).generate(prompts, 1, GREEDY)
    unforced = HFEngine(tiny_llama, char_tokenizer).generate(prompts, 1, GREEDY)
    for row, prompt in enumerate(prompts):
        completion = batch.completion_ids[row]
        # The logits at the last prompt position produce completion token 0.
        expected_length = max(forced_at - len(prompt) + 1, 0) + 1
        assert batch.finish_reason[row] == "eos"
        assert completion.numel() == expected_length == batch.logprobs[row].numel()
        assert completion[-1].item() == eos and (completion[:-1] != eos).all()
        assert torch.equal(completion[:-1], unforced.completion_ids[row][: expected_length - 1])
        assert batch.completion_text[row] == char_tokenizer.decode(completion[:-1].tolist())
        assert "<eos>" not in batch.completion_text[row]
    assert batch.completion_lengths == [max(8 - len(p) + 1, 0) + 1 for p in prompts]


def test_length_limit_truncates_with_finish_reason_length(tiny_llama, char_tokenizer, prompts):
    batch = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[]).generate(
        prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=5)
    )
    assert batch.finish_reason == ["length"] * len(prompts)
    assert batch.completion_lengths == [5] * len(prompts)
    assert batch.truncated == [True] * len(prompts)


def test_stop_string_ends_completion_at_the_token_that_completes_it(
    tiny_llama, char_tokenizer, prompts
):
    engine = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[])
    reference = engine.generate(prompts, 1, GREEDY)
    stop = reference.completion_text[0][3:5]
    batch = engine.generate(
        prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=12, stop=(stop,))
    )
    for row, full in enumerate(reference.completion_ids):
        prefixes = [char_tokenizer.decode(full[:k].tolist()) for k in range(1, full.numel() + 1)]
        hit = next((k for k, text in enumerate(prefixes, start=1) if stop in text), None)
        if hit is None:
            assert batch.finish_reason[row] == "length"
            assert torch.equal(batch.completion_ids[row], full)
        else:
            assert batch.finish_reason[row] == "stop"
            assert torch.equal(batch.completion_ids[row], full[:hit])
            assert batch.completion_text[row].endswith(stop)
    assert batch.finish_reason[0] == "stop"


def test_stop_string_can_be_a_special_token_that_stays_visible(tiny_llama, char_tokenizer):
    think_end = char_tokenizer.convert_tokens_to_ids("</think>")
    model = EosAfterPosition(tiny_llama, think_end, position=6)  # forces </think>, not EOS
    sampling = SamplingParams(temperature=0.0, max_new_tokens=12, stop=("</think>",))
    batch = HFEngine(model, char_tokenizer).generate(
        [char_tokenizer.encode("<think>12")], 1, sampling
    )
    assert batch.finish_reason == ["stop"]
    assert batch.completion_ids[0][-1].item() == think_end
    assert batch.completion_text[0].endswith("</think>")


def test_generate_restores_training_flag_and_runs_in_eval_mode(tiny_llama, char_tokenizer, prompts):
    model = EosAfterPosition(tiny_llama, char_tokenizer.eos_token_id, position=100)
    model.train()
    HFEngine(model, char_tokenizer).generate(prompts, 1, SamplingParams(max_new_tokens=3))
    assert model.training and tiny_llama.training
    assert model.training_flags and not any(model.training_flags)
    model.eval()
    HFEngine(model, char_tokenizer).generate(prompts, 1, SamplingParams(max_new_tokens=3))
    assert not model.training


def test_load_weights_copies_foreign_weights_and_skips_its_own(
    tiny_llama, char_tokenizer, make_tiny_llama
):
    engine = HFEngine(tiny_llama, char_tokenizer)
    own = tiny_llama.state_dict()
    engine.load_weights(own)  # same storage: nothing to copy
    other = make_tiny_llama(1)
    engine.load_weights(other.state_dict())
    for name, tensor in other.state_dict().items():
        assert torch.equal(tiny_llama.state_dict()[name], tensor)


def test_engine_works_on_a_model_loaded_from_disk(tiny_model_dir, tiny_llama, prompts):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    loaded = HFEngine(model, tokenizer).generate(prompts, 1, GREEDY)
    original = HFEngine(tiny_llama, tokenizer).generate(prompts, 1, GREEDY)
    assert loaded.completion_text == original.completion_text


def test_empty_prompt_is_rejected_with_its_index(tiny_llama, char_tokenizer):
    with pytest.raises(ValueError, match="prompt 1"):
        HFEngine(tiny_llama, char_tokenizer).generate([[5, 6], []], 1, GREEDY)
