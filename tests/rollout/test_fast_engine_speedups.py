"""FastEngine's kept weight copies and its cheaper decode step.

The fused (and oneDNN-packed) projection copies are kept between generate calls and rebuilt
only when a weight they were made from changed (`weight_stamp.Stamp`); the decode step
applies RoPE as a complex multiply on interleaved q/k rows and writes keys and values with one
index_put_. Every test compares against HFEngine or a fresh engine, so stale copies show up as
different tokens.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.rollout import (
    FastEngine,
    HFEngine,
    SamplingParams,
    layer_plan,
    llama_decoder,
    weight_stamp,
)
from rlvr.rollout.kv_cache import SlotKVCache

PROMPTS = ["12+3=", "a", "What is 7*8?", "9-4=5,"]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


@pytest.fixture
def prompts(char_tokenizer) -> list[list[int]]:
    return [char_tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture
def builds(monkeypatch) -> dict[str, int]:
    """Counts of layer plans built and weights packed (by any engine) while the test runs."""
    counts = {"plans": 0, "packs": 0}
    plan_class, pack = llama_decoder.LayerPlan, layer_plan.pack_weight

    class CountedPlan(plan_class):
        def __init__(self, *args, **kwargs) -> None:
            counts["plans"] += 1
            super().__init__(*args, **kwargs)

    def counted_pack(weight: torch.Tensor) -> torch.Tensor:
        counts["packs"] += 1
        return pack(weight)

    monkeypatch.setattr(llama_decoder, "LayerPlan", CountedPlan)
    monkeypatch.setattr(llama_decoder, "pack_weight", counted_pack)  # the output head
    monkeypatch.setattr(layer_plan, "pack_weight", counted_pack)  # the layers' weights
    return counts


def packing_available(model: torch.nn.Module) -> bool:
    return llama_decoder.can_pack(next(model.parameters()))


def assert_same_tokens(batch, reference) -> None:
    assert batch.completion_text == reference.completion_text
    for row, (a, b) in enumerate(zip(batch.completion_ids, reference.completion_ids, strict=True)):
        assert torch.equal(a, b), row
        torch.testing.assert_close(batch.logprobs[row], reference.logprobs[row], atol=1e-4, rtol=0)


def hf_greedy(model, tokenizer, prompts):
    return HFEngine(model, tokenizer).generate(prompts, 2, GREEDY)


# -- kept weight copies -----------------------------------------------------------------------


@pytest.mark.parametrize("pack", [False, True])
def test_unchanged_weights_are_not_fused_or_packed_again(
    tiny_llama, char_tokenizer, prompts, builds, pack
):
    if pack and not packing_available(tiny_llama):
        pytest.skip("this torch build has no oneDNN")
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, pack_weights=pack)
    first = engine.generate(prompts, 2, GREEDY)
    layers = len(tiny_llama.model.layers)
    assert builds["plans"] == layers
    assert builds["packs"] == (4 * layers + 1 if pack else 0)  # qkv, o, gate_up, down; head
    built = dict(builds)
    second = engine.generate(prompts, 2, GREEDY)
    sampled = engine.generate(prompts, 2, SamplingParams(temperature=0.8, max_new_tokens=6))
    assert builds == built
    assert_same_tokens(second, first)
    assert len(sampled.completion_ids) == 2 * len(prompts)
    # between calls the copies are kept, but no call is in progress
    decoder = engine._decoder
    assert decoder._plans is None and decoder._head is None
    assert all(plan is not None for plan in decoder._kept_plans)


@pytest.mark.parametrize(
    "pack, implementation", [(False, "foreach"), (True, "for-loop"), (True, "fused")]
)
def test_an_optimizer_step_is_used_by_the_next_call(
    tiny_llama, char_tokenizer, prompts, builds, pack, implementation
):
    """Including a fused AdamW step, whose kernel does not bump version counters by itself:
    the owner steps through `optimizer_step`, which bumps them (no global hook)."""
    from rlvr.runs.optim import optimizer_step

    if pack and not packing_available(tiny_llama):
        pytest.skip("this torch build has no oneDNN")
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, pack_weights=pack)
    before = engine.generate(prompts, 2, GREEDY)
    options = {
        "foreach": {"foreach": True},
        "for-loop": {"foreach": False},
        "fused": {"fused": True},
    }
    optimizer = torch.optim.AdamW(tiny_llama.parameters(), lr=0.05, **options[implementation])
    ids = torch.tensor([prompts[0] + prompts[2]])
    tiny_llama.train()
    tiny_llama(input_ids=ids, labels=ids).loss.backward()
    optimizer_step(optimizer)
    tiny_llama.eval()
    built = dict(builds)
    after = engine.generate(prompts, 2, GREEDY)
    assert builds["plans"] - built["plans"] == len(tiny_llama.model.layers)
    assert after.completion_text != before.completion_text
    assert_same_tokens(after, hf_greedy(tiny_llama, char_tokenizer, prompts))
    fresh = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3, pack_weights=pack)
    assert_same_tokens(after, fresh.generate(prompts, 2, GREEDY))


def test_building_an_engine_installs_no_process_wide_optimizer_hook(
    tiny_llama, char_tokenizer, prompts
):
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    before = (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks))
    FastEngine(tiny_llama, char_tokenizer, pack_weights=False).generate(prompts, 1, GREEDY)
    assert (dict(_global_optimizer_pre_hooks), dict(_global_optimizer_post_hooks)) == before


def test_a_fused_step_bumps_the_versions_of_exactly_the_parameters_it_updated():
    from rlvr.runs.optim import optimizer_step

    stepped, frozen = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([stepped], lr=0.1, fused=True)
    stepped.grad = torch.ones(3)
    versions = (stepped._version, frozen._version)
    optimizer_step(optimizer)
    assert stepped._version > versions[0] and frozen._version == versions[1]
    assert not torch.equal(stepped.detach(), torch.ones(3))


def test_only_layers_whose_weights_changed_are_rebuilt(tiny_llama, char_tokenizer, prompts, builds):
    if not packing_available(tiny_llama):
        pytest.skip("this torch build has no oneDNN")
    engine = FastEngine(tiny_llama, char_tokenizer, pack_weights=True)
    engine.generate(prompts, 2, GREEDY)
    kept = list(engine._decoder._kept_plans)
    built = dict(builds)
    with torch.no_grad():  # an RMSNorm weight: folded into the fused q/k/v copy
        tiny_llama.model.layers[1].input_layernorm.weight.mul_(1.5)
    changed = engine.generate(prompts, 2, GREEDY)
    assert builds["plans"] - built["plans"] == 1
    assert builds["packs"] - built["packs"] == 4  # that layer's four weights; not the head
    assert engine._decoder._kept_plans[0] is kept[0]
    assert engine._decoder._kept_plans[1] is not kept[1]
    assert_same_tokens(changed, hf_greedy(tiny_llama, char_tokenizer, prompts))


def test_load_state_dict_and_replaced_parameters_are_seen(
    tiny_llama, char_tokenizer, prompts, make_tiny_llama
):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3)
    engine.generate(prompts, 2, GREEDY)
    other = make_tiny_llama(1)
    engine.load_weights(other.state_dict())  # copies in place: version counters move
    assert_same_tokens(
        engine.generate(prompts, 2, GREEDY), hf_greedy(other, char_tokenizer, prompts)
    )
    # a new Parameter object (same values as another seed's) replaces an old one
    donor = make_tiny_llama(2)
    for name in ("q_proj", "v_proj"):
        projection = getattr(tiny_llama.model.layers[0].self_attn, name)
        projection.weight = torch.nn.Parameter(
            getattr(donor.model.layers[0].self_attn, name).weight.detach().clone()
        )
    assert_same_tokens(
        engine.generate(prompts, 2, GREEDY), hf_greedy(tiny_llama, char_tokenizer, prompts)
    )


def test_lora_adapters_added_after_a_call_are_applied(tiny_llama, char_tokenizer, prompts):
    peft = pytest.importorskip("peft")
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3)
    base = engine.generate(prompts, 2, GREEDY)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    model = peft.get_peft_model(tiny_llama, config)  # wraps the engine's model's linears
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    adapted = engine.generate(prompts, 2, GREEDY)
    assert adapted.completion_text != base.completion_text
    assert_same_tokens(adapted, hf_greedy(model, char_tokenizer, prompts))
    with model.disable_adapter():
        assert_same_tokens(engine.generate(prompts, 2, GREEDY), base)
    merged = model.merge_and_unload()  # plain linears again, with the adapters merged in
    assert_same_tokens(
        engine.generate(prompts, 2, GREEDY), hf_greedy(merged, char_tokenizer, prompts)
    )


def test_release_cache_frees_the_kept_weight_copies(tiny_llama, char_tokenizer, prompts, builds):
    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=3)
    first = engine.generate(prompts, 2, GREEDY)
    engine.release_cache()
    assert engine._cache is None and engine._decoder._kept_plans == []
    assert engine._decoder._kept_head is None
    # e.g. after a write that bypasses the version counter
    with torch.no_grad():
        tiny_llama.model.layers[0].mlp.up_proj.weight.data.mul_(3.0)
    built = builds["plans"]
    after = engine.generate(prompts, 2, GREEDY)
    assert builds["plans"] - built == len(tiny_llama.model.layers)
    assert after.completion_text != first.completion_text
    assert_same_tokens(after, hf_greedy(tiny_llama, char_tokenizer, prompts))


def test_stamp_tracks_identity_version_pointer_and_hooks():
    linear = torch.nn.Linear(4, 4)
    sources = weight_stamp.module_sources((linear,))
    stamp = weight_stamp.Stamp(sources)
    assert stamp.matches(sources)
    with torch.no_grad():
        linear.weight.add_(0)  # in place, even without a change of value
    assert not stamp.matches(weight_stamp.module_sources((linear,)))
    stamp = weight_stamp.Stamp(weight_stamp.module_sources((linear,)))
    linear.bias = torch.nn.Parameter(linear.bias.detach().clone())
    assert not stamp.matches(weight_stamp.module_sources((linear,)))
    stamp = weight_stamp.Stamp(weight_stamp.module_sources((linear,)))
    handle = linear.register_forward_hook(lambda *args: None)
    assert not stamp.matches(weight_stamp.module_sources((linear,)))
    handle.remove()
    assert stamp.matches(weight_stamp.module_sources((linear,)))
    # what else makes a linear unfusable (is_plain_linear) makes a kept plan stale too
    handle = linear.register_full_backward_hook(lambda *args: None)
    assert not stamp.matches(weight_stamp.module_sources((linear,)))
    handle.remove()
    linear.forward = lambda x: torch.nn.functional.linear(x, linear.weight) * 2.0  # accelerate-like
    assert not stamp.matches(weight_stamp.module_sources((linear,)))


# -- the decode step ----------------------------------------------------------------------------


def test_interleaved_rope_equals_hf_rotation(tiny_llama):
    """Rows permuted by `_interleave_rope_rows` and rotated by one complex multiply give HF's
    apply_rotary_pos_emb, permuted."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    head_dim, heads, steps = 16, 3, 7
    torch.manual_seed(0)
    x = torch.randn(steps, heads, head_dim)
    positions = torch.arange(steps).unsqueeze(0)
    rotary = type(tiny_llama.model.rotary_emb)(
        config=type(tiny_llama.config)(hidden_size=head_dim * heads, num_attention_heads=heads)
    )
    cos, sin = rotary(x, position_ids=positions)  # [1, T, D]
    expected, _ = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], cos, sin)
    expected = expected[0].transpose(0, 1)  # [T, heads, D]
    order = layer_plan.interleave_rope_rows(torch.arange(heads * head_dim), head_dim)
    interleaved = x.reshape(steps, -1)[:, order].view(steps, heads, head_dim).clone()
    half = head_dim // 2
    signed_sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
    freqs = llama_decoder._rope_freqs(cos[0], signed_sin).unsqueeze(1)
    llama_decoder._rotate_interleaved(interleaved, freqs)
    torch.testing.assert_close(
        interleaved,
        expected.reshape(steps, -1)[:, order].view(steps, heads, head_dim),
        atol=1e-6,
        rtol=0,
    )


def test_one_write_stores_keys_and_values_at_each_slots_position():
    slots, kv_heads, max_len, head_dim = 4, 2, 16, 8
    cache = SlotKVCache(3, slots, kv_heads, max_len, head_dim, torch.float32, "cpu")
    positions = torch.tensor([5, 0, 15])  # three of the four slots
    key_value = torch.randn(3, 2 * kv_heads, head_dim)
    cache.write(1, cache.write_index(positions), key_value)
    rows = torch.arange(3)
    assert torch.equal(cache.keys[1][rows, :, positions], key_value[:, :kv_heads])
    assert torch.equal(cache.values[1][rows, :, positions], key_value[:, kv_heads:])
    written = torch.zeros(slots, max_len, dtype=torch.bool)
    written[rows, positions] = True
    for buffers in (cache.keys, cache.values):
        assert not buffers[0].any() and not buffers[2].any()  # other layers untouched
        assert not buffers[1].permute(0, 2, 1, 3)[~written].any()  # other positions untouched
