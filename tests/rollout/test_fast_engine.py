import math

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rlvr.errors import ConfigError
from rlvr.models.embedded import embedded_model_path
from rlvr.rollout import FastEngine, HFEngine, RolloutBatch, SamplingParams, build_engine
from rlvr.rollout.sampling import filter_logits

PROMPTS = ["12+3=", "a", "What is 7*8?", "<think>x", "9-4=5,"]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


def early_eos_ids(engine: HFEngine, prompts: list[list[int]]) -> list[int]:
    """A token that greedy decoding emits early in some rows and never in others: used as EOS,
    it makes rows end at different steps (so slots free up at different times)."""
    reference = engine.generate(prompts, 1, GREEDY)
    for token in sorted({t for c in reference.completion_ids for t in c[1:6].tolist()}):
        if any(token not in c.tolist() for c in reference.completion_ids):
            return [token]
    raise AssertionError("no token separates the rows; pick other prompts")


def assert_same_rollouts(
    fast: RolloutBatch, reference: RolloutBatch, atol: float = 1e-4, rtol: float = 0.0
):
    assert fast.prompt_index == reference.prompt_index
    assert fast.finish_reason == reference.finish_reason
    assert fast.completion_text == reference.completion_text
    for row, (a, b) in enumerate(zip(fast.completion_ids, reference.completion_ids, strict=True)):
        assert torch.equal(a, b), row
        assert torch.equal(fast.prompt_ids[row], reference.prompt_ids[row])
        torch.testing.assert_close(
            fast.logprobs[row], reference.logprobs[row], atol=atol, rtol=rtol
        )


def processed_logprobs(model, prompt: list[int], completion: torch.Tensor, sampling):
    """Log-probs of each completion token under the processed distribution (temperature,
    top-k, top-p), recomputed from one uncached forward pass of prompt + completion."""
    ids = torch.tensor(prompt + completion.tolist())[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logits = logits[len(prompt) - 1 : ids.shape[1] - 1]
    if sampling.temperature > 0:
        logits = filter_logits(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    return logits.log_softmax(-1).gather(1, completion[:, None])[:, 0]


def tiny_model(char_tokenizer, config_class, model_class, **overrides):
    torch.manual_seed(0)
    settings = dict(
        vocab_size=len(char_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=char_tokenizer.eos_token_id,
        pad_token_id=char_tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    settings.update(overrides)
    model = model_class(config_class(**settings)).eval()
    model.generation_config.bos_token_id = None
    return model


# -- equivalence with the reference engine -----------------------------------------------------


@pytest.mark.parametrize("max_batch_size", [1, 4, 256])
def test_greedy_equals_hf_engine_with_early_eos_groups_and_reused_slots(
    tiny_llama, char_tokenizer, prompts, max_batch_size
):
    eos = early_eos_ids(HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[]), prompts)
    reference = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=eos).generate(prompts, 3, GREEDY)
    assert "eos" in reference.finish_reason and "length" in reference.finish_reason
    engine = FastEngine(
        tiny_llama, char_tokenizer, eos_token_ids=eos, max_batch_size=max_batch_size
    )
    assert engine.fallback_reason is None
    assert_same_rollouts(engine.generate(prompts, 3, GREEDY), reference)


@pytest.mark.parametrize("architecture", ["gqa_llama", "qwen2_with_biases"])
def test_greedy_equals_hf_engine_for_gqa_and_qkv_bias_models(char_tokenizer, prompts, architecture):
    if architecture == "gqa_llama":
        model = tiny_model(char_tokenizer, LlamaConfig, LlamaForCausalLM, num_key_value_heads=1)
    else:
        model = tiny_model(char_tokenizer, Qwen2Config, Qwen2ForCausalLM)
    reference = HFEngine(model, char_tokenizer).generate(prompts, 2, GREEDY)
    engine = FastEngine(model, char_tokenizer, max_batch_size=3)
    assert engine.fallback_reason is None
    assert_same_rollouts(engine.generate(prompts, 2, GREEDY), reference)


@pytest.mark.parametrize("window, expect_fallback", [(64, False), (10, True)])
def test_sliding_window_shorter_than_the_call_falls_back_to_hf(
    char_tokenizer, prompts, monkeypatch, window, expect_fallback
):
    model = tiny_model(char_tokenizer, MistralConfig, MistralForCausalLM, sliding_window=window)
    engine = FastEngine(model, char_tokenizer, max_batch_size=3)
    fallback_calls = []
    original = engine._hf.generate
    monkeypatch.setattr(
        engine._hf, "generate", lambda *a, **k: fallback_calls.append(1) or original(*a, **k)
    )
    reference = HFEngine(model, char_tokenizer).generate(prompts, 2, GREEDY)
    assert_same_rollouts(engine.generate(prompts, 2, GREEDY), reference)
    assert bool(fallback_calls) == expect_fallback


def test_bfloat16_model_follows_hf_rounding(tiny_llama, char_tokenizer, prompts):
    # In half precision the engine rounds like HF's modules (no folded norms, no fused
    # multiply-adds), so even bf16 greedy decoding gives the same tokens. The log-probs agree
    # to bf16's resolution (2^-8 relative): the CPU's bf16 kernels accumulate in another order
    # for a differently shaped product (measured on an AVX2 CPU: 1.9e-3 at a log-prob of -4.1;
    # within 1e-3 on an AVX-512-BF16 one).
    model = tiny_llama.to(torch.bfloat16)
    reference = HFEngine(model, char_tokenizer).generate(prompts, 2, GREEDY)
    fast = FastEngine(model, char_tokenizer, max_batch_size=3).generate(prompts, 2, GREEDY)
    assert_same_rollouts(fast, reference, atol=1e-3, rtol=2**-8)


def test_bfloat16_packed_weights_follow_hf_rounding(tiny_llama, char_tokenizer, prompts):
    # Where the CPU has oneDNN's bf16 kernels, bf16 weights are held pre-packed too; each
    # product is still rounded, then added, as HF's modules do: the same greedy tokens.
    from rlvr.rollout.layer_plan import can_pack

    model = tiny_llama.to(torch.bfloat16)
    if not can_pack(model.model.layers[0].mlp.down_proj.weight):
        pytest.skip("no oneDNN bf16 kernels on this CPU (AVX-512-BF16 or AMX)")
    reference = HFEngine(model, char_tokenizer).generate(prompts, 2, GREEDY)
    engine = FastEngine(model, char_tokenizer, max_batch_size=3, pack_weights=True)
    fast = engine.generate(prompts, 2, GREEDY)
    assert all(plan.packed for plan in engine._decoder._kept_plans)
    assert_same_rollouts(fast, reference, atol=1e-3, rtol=2**-8)


def _teacher_forced_logprobs(model, prompts, batch, n):
    """log_softmax(model(prompt + completion)) at each completion token, per row."""
    rows = []
    for index, completion in enumerate(batch.completion_ids):
        prompt = torch.tensor(prompts[index // n])
        ids = torch.cat((prompt, completion)).unsqueeze(0)
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
        rows.append(logits.log_softmax(-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1))
    return rows


def test_fastest_bf16_numerics_stay_within_bf16_rounding(tiny_llama, char_tokenizer, prompts):
    # hf_rounding=False (a bf16 replica whose log-probs the learner recomputes): norms folded,
    # residual adds fused, regrouped attention. Its recorded log-probs are not HF's bf16 ones
    # (exact_logprobs is False), but no farther from the fp32 model's than HF's own bf16
    # forward is, and in fp32 the switch changes nothing.
    import copy

    fp32 = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, hf_rounding=False)
    assert fp32.exact_logprobs
    reference = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3).generate(
        prompts, 2, GREEDY
    )
    assert_same_rollouts(fp32.generate(prompts, 2, GREEDY), reference, atol=0.0, rtol=0.0)

    replica = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    engine = FastEngine(replica, char_tokenizer, max_batch_size=3, hf_rounding=False)
    assert not engine.exact_logprobs
    batch = engine.generate(prompts, 2, GREEDY)
    assert all(plan.qkv_floor is not None for plan in engine._decoder._kept_plans)  # folded
    learner = _teacher_forced_logprobs(tiny_llama, prompts, batch, 2)
    hf_bf16 = _teacher_forced_logprobs(replica, prompts, batch, 2)
    fast_error = torch.cat([a - b for a, b in zip(batch.logprobs, learner)]).abs().mean()
    hf_error = torch.cat([a - b for a, b in zip(hf_bf16, learner)]).abs().mean()
    assert fast_error <= 2 * hf_error + 1e-3, (fast_error, hf_error)


def test_unfused_module_path_gives_the_same_rollouts(tiny_llama, char_tokenizer, prompts):
    fused = FastEngine(tiny_llama, char_tokenizer).generate(prompts, 2, GREEDY)
    unfused = FastEngine(tiny_llama, char_tokenizer, fuse_projections=False).generate(
        prompts, 2, GREEDY
    )
    assert_same_rollouts(unfused, fused)


def test_lora_adapters_are_applied(tiny_llama, char_tokenizer, prompts):
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    model = peft.get_peft_model(tiny_llama, config)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # peft initialises B = 0: make the adapters change the outputs
            torch.nn.init.normal_(param, std=0.5)
    reference = HFEngine(model, char_tokenizer).generate(prompts, 1, GREEDY)
    with model.disable_adapter():
        base = HFEngine(model, char_tokenizer).generate(prompts, 1, GREEDY)
    assert reference.completion_text != base.completion_text
    engine = FastEngine(model, char_tokenizer)
    assert engine.fallback_reason is None
    assert_same_rollouts(engine.generate(prompts, 1, GREEDY), reference)


def test_embedded_model_greedy_equals_hf_engine_on_addition_prompts():
    path = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = ["347+285=", "12+9=", "999+1=", "5+5=", "100+250="]
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=48)
    reference = HFEngine(model, tokenizer).generate(prompts, 2, sampling)
    assert "eos" in reference.finish_reason
    fast = FastEngine(model, tokenizer, max_batch_size=3).generate(prompts, 2, sampling)
    assert_same_rollouts(fast, reference)


def test_weights_changed_in_place_are_used_by_the_next_call(
    tiny_llama, char_tokenizer, prompts, make_tiny_llama
):
    engine = FastEngine(tiny_llama, char_tokenizer)
    before = engine.generate(prompts, 1, GREEDY)
    with torch.no_grad():
        for mine, other in zip(
            tiny_llama.parameters(), make_tiny_llama(1).parameters(), strict=True
        ):
            mine.copy_(other)
    after = engine.generate(prompts, 1, GREEDY)
    assert after.completion_text != before.completion_text
    assert_same_rollouts(after, HFEngine(tiny_llama, char_tokenizer).generate(prompts, 1, GREEDY))


def test_compiled_decode_step_keeps_greedy_outputs(tiny_llama, char_tokenizer, prompts):
    # The "eager" backend runs the traced graph without code generation: it checks that the
    # decode step traces and that the static-width schedule (5 rows -> 8 slots) is right,
    # without the tens of seconds inductor needs on a CPU.
    engine = FastEngine(tiny_llama, char_tokenizer, compile=True, compile_backend="eager")
    batch = engine.generate(prompts, 1, GREEDY)
    assert engine._cache.slots == 8
    assert_same_rollouts(batch, HFEngine(tiny_llama, char_tokenizer).generate(prompts, 1, GREEDY))


def test_unsupported_architecture_falls_back_to_hf_engine(char_tokenizer, prompts):
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(char_tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = char_tokenizer.eos_token_id
    engine = FastEngine(model, char_tokenizer)
    assert "gpt2" in engine.fallback_reason
    reference = HFEngine(model, char_tokenizer).generate(prompts, 2, GREEDY)
    assert_same_rollouts(engine.generate(prompts, 2, GREEDY), reference, atol=0)


# -- sampling --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0.7, max_new_tokens=10),
        SamplingParams(temperature=1.3, top_k=5, max_new_tokens=10),
        SamplingParams(temperature=1.0, top_p=0.8, max_new_tokens=10),
        SamplingParams(temperature=0.9, top_k=7, top_p=0.9, max_new_tokens=10),
    ],
    ids=["temperature", "top_k", "top_p", "top_k_top_p"],
)
def test_sampled_logprobs_equal_the_processed_distribution_of_a_full_forward_pass(
    tiny_llama, char_tokenizer, prompts, sampling
):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4, eos_token_ids=[5, 12])
    batch = engine.generate(prompts, 3, sampling, torch.Generator().manual_seed(3))
    assert len(set(batch.completion_lengths)) > 1  # rows ended at different steps
    for row, completion in enumerate(batch.completion_ids):
        prompt = prompts[batch.prompt_index[row]]
        expected = processed_logprobs(tiny_llama, prompt, completion, sampling)
        assert torch.isfinite(expected).all()  # every token was inside top-k / top-p
        torch.testing.assert_close(batch.logprobs[row], expected, atol=1e-4, rtol=0)


def test_first_token_frequencies_match_the_processed_softmax(tiny_llama, char_tokenizer):
    prompt = char_tokenizer.encode("7*8=")
    sampling = SamplingParams(temperature=2.0, top_k=6, max_new_tokens=1)
    draws = 4000
    batch = FastEngine(tiny_llama, char_tokenizer).generate(
        [prompt], draws, sampling, torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        logits = tiny_llama(input_ids=torch.tensor([prompt])).logits[0, -1]
    probs = filter_logits(logits[None], 2.0, 6)[0].softmax(-1)
    counts = torch.bincount(torch.cat(batch.completion_ids), minlength=probs.numel())
    assert int((counts > 0).sum()) == 6 and (counts[probs == 0] == 0).all()
    for token in probs.nonzero().flatten().tolist():
        p = probs[token].item()
        tolerance = 4 * math.sqrt(p * (1 - p) / draws)  # 4 standard errors
        assert abs(counts[token].item() / draws - p) < tolerance, token


def test_seeded_generator_reproduces_rollouts_and_other_seeds_differ(
    tiny_llama, char_tokenizer, prompts
):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4, eos_token_ids=[5])
    sampling = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8)

    def run(seed: int) -> RolloutBatch:
        return engine.generate(prompts, 2, sampling, torch.Generator().manual_seed(seed))

    first, again, other = run(3), run(3), run(4)
    assert first.completion_text == again.completion_text
    assert all(torch.equal(a, b) for a, b in zip(first.logprobs, again.logprobs, strict=True))
    assert first.completion_text != other.completion_text


# -- slots, finish reasons, stop strings -----------------------------------------------------


def test_rows_stay_prompt_major_when_later_rows_finish_first(tiny_llama, char_tokenizer):
    # Prompt 0's rows run to the length limit while prompt 1's end at once: slots freed by
    # prompt 1 are refilled with prompt 2 and 3 rows before prompt 0's rows are done.
    eos = early_eos_ids(HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[]), [[7], [8]])
    prompts = [[7], [8], [8, 9], [9]]
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, eos_token_ids=eos)
    batch = engine.generate(prompts, 2, GREEDY)
    assert batch.prompt_index == [0, 0, 1, 1, 2, 2, 3, 3]
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [p.tolist() for p in batch.prompt_ids] == [p for p in prompts for _ in range(2)]
    reference = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=eos).generate(prompts, 2, GREEDY)
    assert len(set(reference.completion_lengths)) > 1
    assert_same_rollouts(batch, reference)


def test_batch_narrows_once_an_eighth_of_the_slots_idle(tiny_llama, char_tokenizer, prompts):
    # Nothing pending (5 rows, 5 slots): after each finish at least an eighth of the slots idle,
    # so the busy rows move to the front and the next decode step runs only them. Decode
    # call i then has exactly the rows longer than i tokens (a row finishing at call i is still
    # fed once); the outputs are unchanged.
    eos = early_eos_ids(HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[]), prompts)
    engine = FastEngine(tiny_llama, char_tokenizer, eos_token_ids=eos)
    widths = []
    decode = engine._decode

    def spy(tokens, *args):
        widths.append(tokens.shape[0])
        return decode(tokens, *args)

    engine._decode = spy
    batch = engine.generate(prompts, 1, GREEDY)
    lengths = [c.numel() for c in batch.completion_ids]
    assert len(set(lengths)) > 2
    assert widths == [sum(n > i for n in lengths) for i in range(len(widths))]
    reference = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=eos).generate(prompts, 1, GREEDY)
    assert_same_rollouts(batch, reference)


def test_n_samples_of_a_prompt_are_independent_draws(tiny_llama, char_tokenizer, prompts):
    batch = FastEngine(tiny_llama, char_tokenizer).generate(
        prompts[:2], 4, SamplingParams(max_new_tokens=6), torch.Generator().manual_seed(0)
    )
    assert len(set(batch.completion_text[:4])) > 1 and len(set(batch.completion_text[4:])) > 1


def test_eos_is_kept_in_ids_and_dropped_from_text(tiny_llama, char_tokenizer, prompts):
    eos = early_eos_ids(HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[]), prompts)
    batch = FastEngine(tiny_llama, char_tokenizer, eos_token_ids=eos).generate(prompts, 1, GREEDY)
    for row, completion in enumerate(batch.completion_ids):
        if batch.finish_reason[row] == "eos":
            assert completion[-1].item() == eos[0] and eos[0] not in completion[:-1].tolist()
            assert batch.completion_text[row] == char_tokenizer.decode(completion[:-1].tolist())
        else:
            assert batch.finish_reason[row] == "length"
            assert completion.numel() == GREEDY.max_new_tokens
    assert set(batch.finish_reason) == {"eos", "length"}


def test_length_limit_truncates_with_finish_reason_length(tiny_llama, char_tokenizer, prompts):
    batch = FastEngine(tiny_llama, char_tokenizer, eos_token_ids=[]).generate(
        prompts, 2, SamplingParams(temperature=0.0, max_new_tokens=5)
    )
    assert batch.finish_reason == ["length"] * 10
    assert batch.completion_lengths == [5] * 10 and batch.truncated == [True] * 10


def test_stop_strings_end_rows_like_the_hf_engine(tiny_llama, char_tokenizer, prompts):
    reference_engine = HFEngine(tiny_llama, char_tokenizer, eos_token_ids=[])
    unstopped = reference_engine.generate(prompts, 1, GREEDY)
    stops = (unstopped.completion_text[0][3:5], unstopped.completion_text[2][6:7])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=12, stop=stops)
    reference = reference_engine.generate(prompts, 2, sampling)
    batch = FastEngine(tiny_llama, char_tokenizer, eos_token_ids=[], max_batch_size=3).generate(
        prompts, 2, sampling
    )
    assert "stop" in batch.finish_reason
    assert_same_rollouts(batch, reference)
    for text, reason in zip(batch.completion_text, batch.finish_reason, strict=True):
        assert (reason == "stop") == any(text.endswith(s) for s in stops)


def test_sampled_stop_strings_and_eos_match_hf_rules(tiny_llama, char_tokenizer, prompts):
    # Neither stop string occurs in the text of a special token ("<pad>", "<think>", ...).
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, stop=("Z", "7"))
    batch = FastEngine(tiny_llama, char_tokenizer, max_batch_size=2, eos_token_ids=[5]).generate(
        prompts, 3, sampling, torch.Generator().manual_seed(2)
    )
    for completion, text, reason in zip(
        batch.completion_ids, batch.completion_text, batch.finish_reason, strict=True
    ):
        ids = completion.tolist()
        # Only the last token may end the row: earlier tokens contain neither EOS nor a stop.
        assert 5 not in ids[:-1]
        assert not any(s in char_tokenizer.decode(ids[:-1]) for s in sampling.stop)
        if reason == "eos":
            assert ids[-1] == 5
        elif reason == "stop":
            assert any(text.endswith(s) for s in sampling.stop)
        else:
            assert len(ids) == 10
    assert {"stop", "length"} <= set(batch.finish_reason)


# -- engine plumbing -------------------------------------------------------------------------


def test_no_prompts_give_an_empty_batch(tiny_llama, char_tokenizer):
    batch = FastEngine(tiny_llama, char_tokenizer).generate([], 4, GREEDY)
    assert len(batch) == 0 and batch.group_ids.numel() == 0


def test_kv_buffers_are_reused_when_they_fit(tiny_llama, char_tokenizer, prompts):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=4)
    engine.generate(prompts, 2, GREEDY)
    buffers = engine._cache
    engine.generate(prompts[:1], 2, SamplingParams(temperature=0.0, max_new_tokens=3))
    assert engine._cache is buffers
    engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=100))
    assert engine._cache is not buffers and engine._cache.max_len >= 100
    engine.release_cache()
    assert engine._cache is None


@pytest.mark.parametrize("n", [1, 3])
def test_prefills_are_bounded_by_max_prefill_tokens_and_give_the_same_rollouts(
    tiny_llama, char_tokenizer, prompts, n
):
    # The longest prompt has 12 tokens: a 24-token budget prefills at most two prompts at once
    # (padded to the longer), so the 5 prompts take at least three prefills instead of one;
    # greedy and keyed sampled rollouts are the same as with one prefill of everything (the
    # tokens exactly; log-probs to float rounding, the padded width of a prefill differs).
    sampled = SamplingParams(temperature=1.0, max_new_tokens=6)
    reference = FastEngine(tiny_llama, char_tokenizer, max_batch_size=16)
    capped = FastEngine(tiny_llama, char_tokenizer, max_batch_size=16, max_prefill_tokens=24)
    batches = []
    prefill = capped._decoder.prefill

    def counting_prefill(ids, lengths):
        batches.append(tuple(ids.shape))
        return prefill(ids, lengths)

    capped._decoder.prefill = counting_prefill
    assert_same_rollouts(
        capped.generate(prompts, n, GREEDY), reference.generate(prompts, n, GREEDY)
    )
    assert len(batches) >= 3 and sum(b[0] for b in batches) == len(prompts)
    assert all(rows == 1 or rows * width <= 24 for rows, width in batches), batches
    batches.clear()
    assert_same_rollouts(
        capped.generate(prompts, n, sampled, torch.Generator().manual_seed(1)),
        reference.generate(prompts, n, sampled, torch.Generator().manual_seed(1)),
    )
    assert len(batches) >= 3
    with pytest.raises(ValueError, match="max_prefill_tokens must be >= 1"):
        FastEngine(tiny_llama, char_tokenizer, max_prefill_tokens=0)


def test_prefill_keeps_compact_keys_and_values_not_the_query_projection(
    tiny_llama, char_tokenizer, prompts
):
    engine = FastEngine(tiny_llama, char_tokenizer)
    decoder = engine._decoder
    decoder.prepare()
    try:
        ids = torch.tensor([prompts[2]])
        keys, values, _ = decoder.prefill(ids, torch.tensor([ids.shape[1]]))
    finally:
        decoder.release()
    kv_elements = 2 * decoder.kv_heads * ids.shape[1] * decoder.head_dim
    for k, v in zip(keys, values, strict=True):
        # the storage the prefill keeps per layer is the keys and values, nothing more
        assert k.untyped_storage().nbytes() == kv_elements * k.element_size()
        assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


def test_generate_restores_training_flag(tiny_llama, char_tokenizer, prompts):
    tiny_llama.train()
    FastEngine(tiny_llama, char_tokenizer).generate(prompts, 1, SamplingParams(max_new_tokens=3))
    assert tiny_llama.training


def test_load_weights_copies_foreign_weights(tiny_llama, char_tokenizer, make_tiny_llama):
    engine = FastEngine(tiny_llama, char_tokenizer)
    other = make_tiny_llama(1)
    engine.load_weights(other.state_dict())
    for name, tensor in other.state_dict().items():
        assert torch.equal(tiny_llama.state_dict()[name], tensor)


def test_bad_arguments_are_rejected_with_what_was_expected(tiny_llama, char_tokenizer):
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        FastEngine(tiny_llama, char_tokenizer, max_batch_size=0)
    engine = FastEngine(tiny_llama, char_tokenizer)
    with pytest.raises(ValueError, match="prompt 1"):
        engine.generate([[5, 6], []], 1, GREEDY)
    with pytest.raises(ValueError, match="n must be >= 1"):
        engine.generate([[5, 6]], 0, GREEDY)
    with pytest.raises(ValueError, match="top_p"):
        engine.generate([[5, 6]], 1, SamplingParams(top_p=0.0))


def test_engines_are_built_by_their_config_name(tiny_llama, char_tokenizer):
    fast = build_engine("fast", tiny_llama, char_tokenizer, max_batch_size=3)
    assert isinstance(fast, FastEngine) and fast.max_batch_size == 3
    assert isinstance(build_engine("hf", tiny_llama, char_tokenizer), HFEngine)
    with pytest.raises(ConfigError, match=r"rollout.engine: unknown engine 'sglang'.*'fast'"):
        build_engine("sglang", tiny_llama, char_tokenizer)


# -- oneDNN-packed weights -------------------------------------------------------------------


def test_packed_weights_give_the_same_greedy_rollouts_and_exact_sampled_logprobs(
    tiny_llama, char_tokenizer, prompts
):
    """pack_weights=True (on by default only for hidden >= 512) runs every projection and the
    output head through oneDNN's packed layout: greedy rows equal HFEngine's, and sampled
    log-probs equal the processed distribution of a full forward pass."""
    from rlvr.rollout.layer_plan import can_pack

    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, pack_weights=True)
    if not can_pack(next(tiny_llama.parameters())):
        pytest.skip("this torch build has no oneDNN")
    assert engine._decoder.pack_weights
    reference = HFEngine(tiny_llama, char_tokenizer).generate(prompts, 2, GREEDY)
    assert_same_rollouts(engine.generate(prompts, 2, GREEDY), reference)
    sampling = SamplingParams(temperature=0.9, top_k=7, max_new_tokens=10)
    batch = engine.generate(prompts, 2, sampling, torch.Generator().manual_seed(4))
    for row, completion in enumerate(batch.completion_ids):
        expected = processed_logprobs(
            tiny_llama, prompts[batch.prompt_index[row]], completion, sampling
        )
        torch.testing.assert_close(batch.logprobs[row], expected, atol=1e-4, rtol=0)
    # between calls the packed copies are kept for the next call, not in use
    assert engine._decoder._plans is None and engine._decoder._head is None
    assert engine._decoder._kept_head is not None


def test_weights_are_packed_by_default_only_for_wide_models(char_tokenizer):
    from rlvr.rollout.fast_engine import PACK_MIN_HIDDEN

    narrow = build_config_model(hidden=64)
    wide = build_config_model(hidden=PACK_MIN_HIDDEN)
    assert not FastEngine(narrow, char_tokenizer)._decoder.pack_weights
    assert FastEngine(wide, char_tokenizer)._decoder.pack_weights


def build_config_model(hidden: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()
