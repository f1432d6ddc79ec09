"""Packed attention without a dense mask: segments (and FlexAttention where it runs) against the
dense [S, 1, W, W] mask of block_causal_mask, on random shared-prompt layouts of a tiny Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import AttentionInterface

from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.forward import packing
from rlvr.forward.logprobs import make_token_batch
from rlvr.forward.packing import packed_completion_logprobs, packed_micro_batches
from rlvr.forward.paths import PackedForward, build_forward
from rlvr.forward.segment_attention import (
    BUCKET_RATIO,
    DENSE_MAX_WIDTH,
    DENSE_SHARED_MAX_WIDTH,
    PREFIX,
    attention_method,
    auto_attention,
    flex_unavailable,
    segment_pairs,
    segment_rows,
    use_packed_attention,
)
from tests.conftest import build_head32_llama, build_tiny_llama


def _shared_layout(vocab: int, seed: int, units: int = 5):
    """Rows of `units` prompts (1-11 tokens) with 1-4 completions each (1-30 tokens), plus two
    rows with prompts of their own: several units, several completions per unit, ragged."""
    g = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> torch.Tensor:
        return torch.randint(
            3, vocab, (int(torch.randint(low, high, (1,), generator=g)),), generator=g
        )

    prompts, completions = [], []
    for _ in range(units):
        prompt = draw(1, 12)
        for _ in range(int(torch.randint(1, 5, (1,), generator=g))):
            prompts.append(prompt)
            completions.append(draw(1, 31))
    for _ in range(2):
        prompts.append(draw(1, 12))
        completions.append(draw(1, 31))
    return prompts, completions


def _logprobs_and_grads(model, packs, method: str):
    lps = []
    for p in packs:
        lp, ent = packed_completion_logprobs(
            model, p, temperature=0.7, chunk_size=9, with_entropy=True, attention=method
        )
        weights = (torch.arange(p.width, device=lp.device) + 1.0) / 10  # a non-uniform loss
        (lp * weights).sum().backward()
        lps.append((lp.detach(), ent))
    grads = [q.grad.clone() for q in model.parameters() if q.requires_grad]
    model.zero_grad(set_to_none=True)
    return lps, grads


def _assert_same(dense, other):
    (lp_d, g_d), (lp_o, g_o) = dense, other
    for (a, ea), (b, eb) in zip(lp_d, lp_o):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(eb, ea, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_d, g_o):
        # fp32, summed in another order by other kernels (the error differs between AVX2 and
        # AVX-512 machines): 1e-4 relative, or 1e-5 of the tensor's largest entry
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * a.abs().max().item())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("build", ["tiny", "tied", "gqa"])
def test_segments_give_the_dense_masks_logprobs_and_gradients_on_shared_prompt_layouts(
    char_tokenizer, seed, build
):
    model = {
        "tiny": lambda: build_tiny_llama(char_tokenizer, seed=seed),
        "tied": lambda: build_tiny_llama(char_tokenizer, seed=seed, tie=True),
        "gqa": lambda: build_head32_llama(char_tokenizer, seed=seed),  # 2 query heads, 1 K/V
    }[build]()
    prompts, completions = _shared_layout(len(char_tokenizer), seed)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=160, max_rows=64, share_prompts=True
    )
    units = [u for p in packs for u in p.parent_ids.unique()]
    assert len(packs) >= 2 and len(units) > len(packs)  # several sequences and units
    dense = _logprobs_and_grads(model, packs, "dense")
    segments = _logprobs_and_grads(model, packs, "segments")
    assert model.config._attn_implementation == PREFIX + "sdpa"
    _assert_same(dense, segments)


def test_segments_agree_with_gradient_checkpointing_recomputing_the_layers(char_tokenizer):
    model = build_tiny_llama(char_tokenizer, seed=3)
    model.gradient_checkpointing_enable()  # as rlvr.models.loading does
    model.train()  # checkpointing replays the layers in backward only in training mode
    prompts, completions = _shared_layout(len(char_tokenizer), 3)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=160, max_rows=64, share_prompts=True
    )
    _assert_same(
        _logprobs_and_grads(model, packs, "dense"), _logprobs_and_grads(model, packs, "segments")
    )


def test_segments_agree_under_lora_adapters(char_tokenizer):
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(build_tiny_llama(char_tokenizer, seed=4), lora)
    prompts, completions = _shared_layout(len(char_tokenizer), 4)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=160, max_rows=64, share_prompts=True
    )
    _assert_same(
        _logprobs_and_grads(model, packs, "dense"), _logprobs_and_grads(model, packs, "segments")
    )


def test_segments_build_no_dense_mask(char_tokenizer, monkeypatch):
    model = build_tiny_llama(char_tokenizer)
    prompts, completions = _shared_layout(len(char_tokenizer), 4)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=400, max_rows=64, share_prompts=True
    )

    def refuse(*args, **kwargs):
        raise AssertionError("the segments path built a dense mask")

    monkeypatch.setattr(packing, "block_causal_mask", refuse)
    lp, _ = packed_completion_logprobs(model, packs[0], attention="segments")
    assert torch.isfinite(lp).all()


def test_segment_rows_write_every_position_once_from_the_row_that_owns_it():
    # sequence 0: unit [prompt 0 | c1 | c2] then a standalone row 3 then padding 4;
    # sequence 1: a standalone row, then a unit [prompt 1 | c2], then padding
    segment = torch.tensor([[0, 0, 1, 1, 1, 2, 3, 3, 4], [0, 0, 0, 1, 1, 2, 2, 3, 3]])
    parent = torch.tensor([[0, 0, 0, 0, 0, 0, 3, 3, 4], [0, 0, 0, 1, 1, 1, 1, 3, 3]])
    rows = segment_rows(segment, parent)
    assert len(set(rows.inverse.tolist())) == segment.numel()  # one writer per position
    flat = rows.index[rows.inverse]  # the position each output row-slot reads its query from
    assert flat.tolist() == list(range(segment.numel()))
    grids, offset = [], 0
    for n, length in rows.shapes:
        grid = rows.index[offset : offset + n * length].view(n, length).tolist()
        offset += n * length
        real = [list(dict.fromkeys(r)) for r in grid]  # the right padding repeats the last
        assert all(len(r) >= BUCKET_RATIO * length for r in real)
        grids += real
    assert offset == rows.index.numel()
    assert [0, 1, 2, 3, 4] in grids  # c1 sees its prompt, then itself
    assert [0, 1, 5] in grids  # c2 sees the prompt, not c1
    assert [6, 7] in grids and [8] in grids  # a standalone row, the padding tail
    assert [12, 13, 14, 15] in grids  # sequence 1's unit


def test_dispatcher_leaves_every_other_call_to_the_models_own_attention(char_tokenizer):
    model = build_tiny_llama(char_tokenizer)
    ids = torch.randint(3, len(char_tokenizer), (2, 12))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: the model's own mask must still be built and used
    before = model(input_ids=ids, attention_mask=mask).logits
    generated = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    use_packed_attention(model)
    use_packed_attention(model)  # idempotent
    assert model.config._attn_implementation == PREFIX + "sdpa"
    assert PREFIX + "sdpa" in AttentionInterface._global_mapping
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, before)
    again = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    assert torch.equal(again, generated)
    assert "_attn_implementation" not in model.config.to_json_string()


def _unit_ids(prompt: int, completions: list[int], width: int) -> tuple[torch.Tensor, ...]:
    """[1, width] segment and parent ids of one shared unit, padded with a segment of its own."""
    seg, par = [0] * prompt, [0] * prompt
    for k, n in enumerate(completions, start=1):
        seg += [k] * n
        par += [0] * n
    tail = width - len(seg)
    seg += [len(completions) + 1] * tail
    par += [len(completions) + 1] * tail
    return torch.tensor([seg]), torch.tensor([par])


def test_segment_pairs_counts_each_row_with_its_shared_prompt():
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2], [3] * 6 + [4] * 6])
    par = torch.tensor([[0] * 12, [3] * 6 + [4] * 6])
    # rows: prompt + 3, prompt + 5 (shared prompt of 4), a standalone 6, a padding tail of 6
    assert segment_pairs(seg, par) == 7**2 + 9**2 + 6**2 + 6**2
    assert segment_pairs(seg, None) == 4**2 + 3**2 + 5**2 + 6**2 + 6**2  # no sharing


def test_auto_keeps_the_dense_mask_where_it_spans_fewer_pairs_than_the_rows():
    def auto(prompt, completions, width=None):
        ids = _unit_ids(prompt, completions, width or prompt + sum(completions))
        return attention_method("auto", *ids)

    assert auto(8, [10] * 8) == "dense"  # the default run's widths
    assert auto(8, [47] * 8, DENSE_MAX_WIDTH) == "dense"
    assert auto(8, [48] * 8) == "segments"  # width 392: rows of 56, 8 x 56² < 392²
    # SmolLM2's few-shot prompts: 8 rows of 298 attend over 710k pairs, the mask spans 402k
    assert auto(250, [48] * 8) == "dense"
    assert auto(250, [400] * 8) == "segments"  # rows of 650: 3.4M pairs < 3,450² = 11.9M
    # above DENSE_SHARED_MAX_WIDTH the mask is never kept, whatever the pairs
    assert auto(DENSE_SHARED_MAX_WIDTH, [1] * 8) == "segments"
    assert attention_method("dense", *_unit_ids(8, [8192], 8200)) == "dense"
    assert attention_method("segments", *_unit_ids(2, [3], 5)) == "segments"
    assert auto_attention(DENSE_MAX_WIDTH + 1, 1, 0) == "segments"
    assert auto_attention(DENSE_SHARED_MAX_WIDTH, 1, DENSE_SHARED_MAX_WIDTH**2 + 1) == "dense"


def test_the_config_key_reaches_the_packed_forward_and_the_default_is_auto():
    assert build_forward(load_config(None, []), 0, 1e-3).attention == "auto"
    cfg = load_config(None, ["training.packed_attention=segments"])
    assert build_forward(cfg, 0, 1e-3).attention == "segments"


def _forward(attention: str) -> PackedForward:
    return PackedForward(
        token_budget=256,
        micro_batch_size=64,
        pad_id=0,
        share_prompts=True,
        pair_cost=1e-3,
        chunk_size=64,
        temperature=1.0,
        attention=attention,
    )


def test_the_run_start_check_accepts_segments_and_refuses_flex_without_a_cpu_backward(
    char_tokenizer,
):
    model = build_tiny_llama(char_tokenizer)
    prompts, completions = _shared_layout(len(char_tokenizer), 5)
    tokens = make_token_batch(prompts, completions, 0)
    for choice in ("auto", "segments"):
        forward = _forward(choice)
        forward.check(model, tokens)
        assert forward.attention == choice
    if flex_unavailable(torch.device("cpu")) is not None:
        with pytest.raises(ConfigError, match="training.packed_attention=flex"):
            _forward("flex").check(model, tokens)


def test_auto_falls_back_to_the_dense_mask_when_segments_cannot_model_the_attention(
    char_tokenizer, monkeypatch
):
    model = build_tiny_llama(char_tokenizer)
    prompts, completions = _shared_layout(len(char_tokenizer), 6)
    tokens = make_token_batch(prompts, completions, 0)

    def unsupported(*args, **kwargs):
        raise NotImplementedError("packed attention without a mask: softcap is not supported")

    monkeypatch.setattr("rlvr.forward.segment_attention.segment_attention", unsupported)
    forward = _forward("auto")
    with pytest.warns(UserWarning, match="softcap"):
        forward.check(model, tokens)
    assert forward.attention == "dense"
    with pytest.raises(ConfigError, match="softcap"):
        _forward("segments").check(model, tokens)


def test_the_run_start_check_runs_on_a_bounded_cut_of_long_rows(char_tokenizer, monkeypatch):
    """A whole 8k-token row through the check's dense pass grew a run by 4 GiB: the check runs on
    at most CHECK_TOKENS prompt and completion tokens, whatever the rows' lengths, and still
    catches a mismatch of the two paths on them."""
    from rlvr.forward import paths as forward_module

    model = build_tiny_llama(char_tokenizer)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, len(char_tokenizer), (300,), generator=g)] * 2
    completions = [torch.randint(3, len(char_tokenizer), (n,), generator=g) for n in (500, 7)]
    tokens = make_token_batch(prompts, completions, 0)
    widths = []

    def recording(real):
        def run(model, x, *args, **kwargs):
            widths.append(int(getattr(x, "input_ids", x).numel()))
            return real(model, x, *args, **kwargs)

        return run

    monkeypatch.setattr(
        forward_module, "check_output_head", recording(forward_module.check_output_head)
    )
    monkeypatch.setattr(
        forward_module,
        "packed_completion_logprobs",
        recording(forward_module.packed_completion_logprobs),
    )
    forward = _forward("segments")
    forward.check(model, tokens)
    cut = forward_module.CHECK_TOKENS
    assert widths[0] == 2 * cut  # the output-head check: one cut row
    # dense and segments on [shared prompt | 2 completions] + the row alone, padded
    assert len(widths) == 3 and max(widths[1:]) <= 2 * (3 * cut)
    assert forward.attention == "segments"


# -- FlexAttention: the same layout as a BlockMask ---------------------------------------------


def _flex_or_skip(grad: bool, device: torch.device) -> None:
    reason = flex_unavailable(device, grad=grad)
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.filterwarnings("ignore:.*without torch.compile")
@pytest.mark.parametrize("seed", [0, 1])
def test_flex_block_mask_gives_the_dense_masks_logprobs(char_tokenizer, seed):
    # On the CPU FlexAttention runs without gradients only (eager: exact, not memory-saving).
    _flex_or_skip(grad=False, device=torch.device("cpu"))
    model = build_tiny_llama(char_tokenizer, seed=seed)
    prompts, completions = _shared_layout(len(char_tokenizer), seed)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=160, max_rows=64, share_prompts=True
    )
    with torch.no_grad():
        for p in packs:
            dense, _ = packed_completion_logprobs(model, p, attention="dense")
            flex, _ = packed_completion_logprobs(model, p, attention="flex")
            torch.testing.assert_close(flex, dense, rtol=1e-5, atol=1e-5)


def test_flex_gives_the_dense_masks_gradients_on_cuda(char_tokenizer):
    device = torch.device("cuda")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: FlexAttention has no backward on the CPU in torch 2.13")
    _flex_or_skip(grad=True, device=device)
    model = build_tiny_llama(char_tokenizer).to(device)
    prompts, completions = _shared_layout(len(char_tokenizer), 7)
    packs = packed_micro_batches(
        prompts, completions, range(len(prompts)), token_budget=160, max_rows=64, share_prompts=True
    )
    _assert_same(
        _logprobs_and_grads(model, packs, "dense"), _logprobs_and_grads(model, packs, "flex")
    )
