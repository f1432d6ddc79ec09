"""Training-side log-probs agree with the rollout engine and with a plain forward pass."""

import torch

from rlvr.forward.logprobs import completion_logprobs, make_token_batch
from rlvr.rollout import HFEngine, SamplingParams


def _reference_logprobs(model, prompt, completion, temperature):
    ids = torch.cat([prompt, completion]).unsqueeze(0)
    logits = model(input_ids=ids).logits[0].float() / temperature
    logp = logits.log_softmax(-1)
    p = prompt.numel()
    return torch.stack([logp[p - 1 + t, completion[t]] for t in range(completion.numel())])


def test_padded_batch_logprobs_match_unpadded_forward_per_row(tiny_llama):
    torch.manual_seed(0)
    prompts = [torch.randint(5, 60, (n,)) for n in (3, 7, 5)]
    completions = [torch.randint(5, 60, (n,)) for n in (6, 2, 4)]
    batch = make_token_batch(prompts, completions, pad_id=0)
    with torch.no_grad():
        lp, ent = completion_logprobs(tiny_llama, batch, temperature=0.7, with_entropy=True)
        for i, (p, c) in enumerate(zip(prompts, completions)):
            ref = _reference_logprobs(tiny_llama, p, c, 0.7)
            torch.testing.assert_close(lp[i, : c.numel()], ref, atol=1e-5, rtol=1e-5)
    assert batch.completion_mask.sum(1).tolist() == [6, 2, 4]
    assert (ent[batch.completion_mask.bool()] > 0).all()


def test_sub_batches_trim_padding_and_keep_values(tiny_llama):
    torch.manual_seed(1)
    prompts = [torch.randint(5, 60, (n,)) for n in (2, 9, 4, 3)]
    completions = [torch.randint(5, 60, (n,)) for n in (5, 1, 8, 2)]
    full = make_token_batch(prompts, completions, pad_id=0)
    sub = full.rows(torch.tensor([0, 3]))
    assert sub.input_ids.shape[1] == 3 + 5  # widest prompt 3 (rows 0, 3), widest completion 5
    with torch.no_grad():
        lp_full, _ = completion_logprobs(tiny_llama, full)
        lp_sub, _ = completion_logprobs(tiny_llama, sub)
    torch.testing.assert_close(lp_sub[0, :5], lp_full[0, :5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lp_sub[1, :2], lp_full[3, :2], atol=1e-5, rtol=1e-5)


def test_training_logprobs_equal_the_engines_sampling_logprobs(tiny_llama, char_tokenizer):
    """The PPO ratio is exactly 1 on-policy only if both sides compute the same distribution."""
    engine = HFEngine(tiny_llama, char_tokenizer)
    prompts = [char_tokenizer("12+34=")["input_ids"], char_tokenizer("7+8=")["input_ids"]]
    out = engine.generate(
        prompts,
        3,
        SamplingParams(temperature=0.8, max_new_tokens=10),
        generator=torch.Generator().manual_seed(0),
    )
    batch = make_token_batch(out.prompt_ids, out.completion_ids, char_tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _ = completion_logprobs(tiny_llama, batch, temperature=0.8)
    for i, sampled in enumerate(out.logprobs):
        torch.testing.assert_close(lp[i, : sampled.numel()], sampled.float(), atol=1e-4, rtol=1e-4)


def test_unpadded_gives_back_each_rows_prompt_and_completion():
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([9, 10])]
    completions = [
        torch.tensor([11, 12]),
        torch.tensor([13, 14, 15]),
        torch.tensor([], dtype=torch.long),
    ]
    batch = make_token_batch(prompts, completions, pad_id=0)
    got_prompts, got_completions = batch.unpadded()
    assert [p.tolist() for p in got_prompts] == [p.tolist() for p in prompts]
    assert [c.tolist() for c in got_completions] == [c.tolist() for c in completions]
    # a trimmed sub-batch (fewer padding columns) gives back the same rows
    sub_prompts, sub_completions = batch.rows(torch.tensor([2, 0])).unpadded()
    assert [p.tolist() for p in sub_prompts] == [[9, 10], [5, 6, 7]]
    assert [c.tolist() for c in sub_completions] == [[], [11, 12]]
    assert all(t.dtype == torch.long for t in sub_prompts + sub_completions)


def test_loss_masks_leave_inserted_tokens_out_of_the_completion_mask():
    from rlvr.forward.logprobs import make_token_batch as build

    tb = build(
        [torch.tensor([1, 2]), torch.tensor([7])],
        [torch.tensor([3, 4, 5, 6]), torch.tensor([8, 9])],
        0,
        [torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([1.0, 1.0])],
    )
    assert tb.completion_mask.tolist() == [[1, 0, 0, 1], [1, 1, 0, 0]]
    assert tb.attention_mask[0].tolist() == [1, 1, 1, 1, 1, 1]  # inserted tokens are attended
