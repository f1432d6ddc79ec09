"""Padding-free GRPO update: packing, chunked log-probs, and exactness against the padded path."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import load_config
from rlvr.forward.logprobs import chunked_token_logprobs, completion_logprobs, make_token_batch
from rlvr.forward.packing import (
    attention_pair_cost,
    block_causal_mask,
    pack_groups_to_budget,
    pack_rows,
    pack_to_budget,
    packed_completion_logprobs,
    packed_micro_batches,
    prompt_groups,
)
from rlvr.rollout import RolloutBatch
from rlvr.training.grpo import GRPOTrainer, ScoredRollouts

# -- packing ----------------------------------------------------------------------------------


def test_pack_to_budget_fills_sequences_of_the_longest_row_within_the_token_budget():
    lengths = [7, 3, 12, 5, 5, 2, 9, 1, 4]
    batches = pack_to_budget(lengths, token_budget=24, max_rows=4)
    seqs = [seq for mb in batches for seq in mb]
    assert sorted(i for seq in seqs for i in seq) == list(range(len(lengths)))
    for seq in seqs:  # no sequence longer than the longest row (12)
        assert seq == sorted(seq) and sum(lengths[i] for i in seq) <= 12
    for mb in batches:
        width = max(sum(lengths[i] for i in seq) for seq in mb)
        assert len(mb) * width <= 24 and sum(len(seq) for seq in mb) <= 4
    real = sum(lengths)
    padded = sum(len(mb) * max(sum(lengths[i] for i in s) for s in mb) for mb in batches)
    assert 1 - real / padded < 0.1  # 48 tokens in 4 sequences of 12
    assert pack_to_budget(lengths, 24, 4) == batches  # deterministic
    assert pack_to_budget([30, 5], token_budget=10, max_rows=8) == [[[0]], [[1]]]  # over budget
    assert [len(mb) for mb in pack_to_budget([4] * 6, 100, 2)] == [2, 2, 2]  # row cap
    with pytest.raises(ValueError, match="token_budget"):
        pack_to_budget([1], token_budget=0, max_rows=1)


def test_pack_to_budget_widens_sequences_when_one_long_row_would_leave_them_half_empty():
    # a late-training embedded batch: 41/40-token traces, 12-token answers, one truncated row
    lengths = [72] + [41] * 60 + [40] * 20 + [12] * 47
    batches = pack_to_budget(lengths, token_budget=2048, max_rows=64)
    widths = [sum(lengths[i] for i in seq) for mb in batches for seq in mb]
    forward = sum(len(mb) * max(sum(lengths[i] for i in s) for s in mb) for mb in batches)
    assert max(widths) == 144  # capacity 2 x 72: two traces fit where one did
    assert 1 - sum(lengths) / forward < 0.05  # capacity 72 would leave 18% padding
    uniform = pack_to_budget([40, 41, 41, 39] * 8, token_budget=2048, max_rows=64)
    assert max(sum(len(s) for s in mb) for mb in uniform) <= 64
    assert all(len(seq) == 1 for mb in uniform for seq in mb)  # nothing gained by widening


def test_packed_rows_restart_positions_and_point_each_prediction_at_its_target():
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([9, 10])]
    completions = [torch.tensor([11, 12]), torch.tensor([13, 14, 15]), torch.tensor([16])]
    p = pack_rows(prompts, completions, [[2, 0], [1]], pad_id=0)
    assert p.input_ids.tolist() == [[9, 10, 16, 5, 6, 7, 11, 12], [8, 13, 14, 15, 0, 0, 0, 0]]
    assert p.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 2, 3, 0, 1, 2, 3]]
    assert p.segment_ids.tolist() == [[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]]
    assert torch.equal(p.input_ids.reshape(-1)[p.predict_pos + 1], p.target_ids)
    assert p.target_row.tolist() == [0, 1, 1, 2, 2, 2]
    assert p.target_col.tolist() == [0, 0, 1, 0, 1, 2]
    assert p.width == 3 and p.rows.tolist() == [2, 0, 1]
    assert (p.num_tokens, p.num_real_tokens) == (16, 12)
    with pytest.raises(ValueError, match="row 1 has an empty prompt"):
        pack_rows(
            [torch.tensor([1]), torch.tensor([], dtype=torch.long)], completions[:2], [[0, 1]]
        )


def test_a_shared_prompt_unit_lays_out_one_prompt_copy_and_each_completion_after_it():
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([5, 6, 7]), torch.tensor([9])]
    completions = [torch.tensor([11, 12]), torch.tensor([13, 14, 15]), torch.tensor([16])]
    p = pack_rows(prompts, completions, [[(0, 1), 2]], pad_id=0)
    assert p.input_ids.tolist() == [[5, 6, 7, 11, 12, 13, 14, 15, 9, 16]]
    # completions continue the prompt's positions: each sees what it sees on its own row
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 4, 5, 0, 1]]
    assert p.segment_ids.tolist() == [[0, 0, 0, 1, 1, 2, 2, 2, 3, 3]]
    assert p.parent_ids.tolist() == [[0, 0, 0, 0, 0, 0, 0, 0, 3, 3]]
    # the prompt's last position predicts the first token of both completions
    assert p.predict_pos.tolist() == [2, 3, 2, 5, 6, 8]
    assert torch.equal(
        p.input_ids.reshape(-1)[p.predict_pos[[1, 3, 4, 5]] + 1], p.target_ids[[1, 3, 4, 5]]
    )
    assert p.target_ids.tolist() == [11, 12, 13, 14, 15, 16]
    assert p.rows.tolist() == [0, 1, 2] and (p.num_tokens, p.num_real_tokens) == (10, 10)
    allowed = block_causal_mask(p.segment_ids, torch.float32, p.parent_ids)[0, 0] == 0
    # row 1's completion (positions 5-7) sees the prompt and itself, not row 0's completion
    assert allowed[6].nonzero().flatten().tolist() == [0, 1, 2, 5, 6]
    assert allowed[4].nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    assert allowed[9].nonzero().flatten().tolist() == [8, 9]
    with pytest.raises(ValueError, match="rows 0 and 2 share a unit but not a prompt"):
        pack_rows(prompts, completions, [[(0, 2)]])


def test_prompt_groups_and_group_packing_cover_every_row_once_within_the_caps():
    prompts = [torch.tensor([1, 2])] * 5 + [torch.tensor([3])] * 3 + [torch.tensor([1, 2])]
    assert prompt_groups(prompts, range(9)) == [[0, 1, 2, 3, 4, 8], [5, 6, 7]]
    completion_lengths = [6, 1, 4, 9, 2, 3, 3, 8, 5]
    prompt_lengths = [p.numel() for p in prompts]
    groups = prompt_groups(prompts, range(9))
    for pair_cost, budget, max_rows in ((0.0, 64, 64), (1e-3, 64, 3), (0.5, 64, 64), (0.0, 12, 64)):
        batches = pack_groups_to_budget(
            prompt_lengths, completion_lengths, groups, budget, max_rows, pair_cost
        )
        units = [u for mb in batches for seq in mb for u in seq]
        assert sorted(i for u in units for i in u) == list(range(9))
        for u in units:
            assert len({tuple(prompts[i].tolist()) for i in u}) == 1 and len(u) <= max_rows
        for mb in batches:
            assert sum(len(u) for seq in mb for u in seq) <= max_rows
    unit_size = lambda b: max(len(u) for mb in b for seq in mb for u in seq)  # noqa: E731
    # attention free: multi-row units, fewer forward positions than one row each
    free = pack_groups_to_budget(prompt_lengths, completion_lengths, groups, 64, 64)
    forward = sum(
        len(mb)
        * max(
            sum(prompt_lengths[u[0]] + sum(completion_lengths[i] for i in u) for u in seq)
            for seq in mb
        )
        for mb in free
    )
    assert unit_size(free) >= 3 and forward < sum(prompt_lengths) + sum(completion_lengths)
    dear = pack_groups_to_budget(prompt_lengths, completion_lengths, groups, 64, 64, 10.0)
    longest = max(p + c for p, c in zip(prompt_lengths, completion_lengths))
    assert all(
        sum(prompt_lengths[u[0]] + sum(completion_lengths[i] for i in u) for u in seq) <= longest
        for mb in dear
        for seq in mb
    )
    assert attention_pair_cost(object()) == 5e-4


def test_shared_prompt_logprobs_entropy_and_gradient_equal_one_row_each(tiny_llama, char_tokenizer):
    prompts, completions = _ragged(12, len(char_tokenizer), seed=5)
    prompts = [prompts[(i // 4) * 4] for i in range(12)]  # three groups of four
    cost = attention_pair_cost(tiny_llama)
    assert 0 < cost < 1
    results = []
    for share in (False, True):
        packs = packed_micro_batches(
            prompts,
            completions,
            range(12),
            token_budget=200,
            max_rows=64,
            share_prompts=share,
            pair_cost=0.0,
        )
        lp = torch.zeros(12, max(c.numel() for c in completions))
        ent = torch.zeros_like(lp)
        for p in packs:
            lp2, ent2 = packed_completion_logprobs(
                tiny_llama, p, temperature=0.7, chunk_size=7, with_entropy=True
            )
            lp[p.rows, : p.width] = lp2.detach()
            ent[p.rows, : p.width] = ent2
            weights = (torch.arange(p.width) + 1.0) / 20  # the same non-uniform loss
            (lp2 * weights).sum().backward()
        grads = [q.grad.clone() for q in tiny_llama.parameters()]
        tiny_llama.zero_grad(set_to_none=True)
        results.append((lp, ent, grads, sum(p.num_tokens for p in packs)))
    (lp1, ent1, g1, n1), (lp2, ent2, g2, n2) = results
    assert n2 < n1 - 2 * 3 * min(p.numel() for p in prompts)  # 3 of 4 prompt copies saved
    torch.testing.assert_close(lp2, lp1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent2, ent1, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def _ragged(n: int, vocab: int, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (int(k),), generator=g) for k in torch.randint(1, 12, (n,))]
    completions = [
        torch.randint(3, vocab, (int(k),), generator=g) for k in torch.randint(1, 20, (n,))
    ]
    return prompts, completions


def test_packed_logprobs_entropy_and_gradient_equal_the_padded_layout(tiny_llama, char_tokenizer):
    prompts, completions = _ragged(7, len(char_tokenizer))
    tokens = make_token_batch(prompts, completions, char_tokenizer.pad_token_id)
    lp, ent = completion_logprobs(tiny_llama, tokens, temperature=0.7, with_entropy=True)
    mask = tokens.completion_mask
    (lp * mask).sum().backward()
    padded_grads = [p.grad.clone() for p in tiny_llama.parameters()]
    tiny_llama.zero_grad()
    packs = packed_micro_batches(prompts, completions, range(7), token_budget=96, max_rows=64)
    assert len(packs) > 1 and packs[0].input_ids.shape[0] > 1  # a few sequences per micro-batch
    assert all(p.num_tokens <= 96 for p in packs) and len(packs[0].rows) > 3
    for p in packs:
        lp2, ent2 = packed_completion_logprobs(
            tiny_llama, p, temperature=0.7, chunk_size=5, with_entropy=True
        )
        m = mask[p.rows, : p.width]
        torch.testing.assert_close(lp2 * m, lp[p.rows, : p.width].detach() * m)
        torch.testing.assert_close(ent2 * m, ent[p.rows, : p.width] * m)
        (lp2 * m).sum().backward()
    for a, p in zip(padded_grads, tiny_llama.parameters()):
        torch.testing.assert_close(p.grad, a, rtol=1e-4, atol=1e-6)


def test_chunked_logprobs_keep_one_chunk_of_logits_alive_and_recompute_it_in_backward(tiny_llama):
    hidden = torch.randn(11, 32, requires_grad=True)
    targets = torch.randint(0, tiny_llama.config.vocab_size, (11,))
    rows_seen: list[int] = []
    hook = tiny_llama.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: rows_seen.append(args[0].shape[0])
    )
    try:
        lp, ent = chunked_token_logprobs(
            tiny_llama, hidden, targets, temperature=2.0, chunk_size=4, with_entropy=True
        )
        assert rows_seen == [4, 4, 3]
        (lp.sum() + ent.sum()).backward()
        # each chunk's logits are recomputed once in backward (last chunk first)
        assert rows_seen == [4, 4, 3, 3, 4, 4]
    finally:
        hook.remove()
    grad = hidden.grad.clone()
    hidden.grad = None
    logits = tiny_llama.get_output_embeddings()(hidden).float() / 2.0
    log_p = logits.log_softmax(-1)
    expected = log_p.gather(-1, targets[:, None]).squeeze(-1)
    torch.testing.assert_close(lp, expected)
    torch.testing.assert_close(ent, -(log_p.exp() * log_p).sum(-1))
    (expected.sum() - (log_p.exp() * log_p).sum()).backward()
    torch.testing.assert_close(grad, hidden.grad)
    with torch.no_grad():  # no graph, no checkpoint: same numbers
        lp_ng, ent_ng = chunked_token_logprobs(tiny_llama, hidden, targets, temperature=2.0)
    torch.testing.assert_close(lp_ng, lp.detach())
    assert ent_ng is None


# -- the trainer's update: packed == padded -------------------------------------------------


def _trainer(tmp_path, model_dir, name: str, *overrides: str) -> GRPOTrainer:
    cfg = load_config(
        None,
        [
            f"model.name_or_path={model_dir}",
            "rollout.prompts_per_step=3",
            "rollout.group_size=4",
            "rollout.max_new_tokens=24",
            "rollout.temperature=0.8",
            "eval.size=0",
            "optimizer.lr=1e-3",
            "optimizer.warmup_steps=0",
            *overrides,
        ],
    )
    run = tmp_path / name
    run.mkdir()
    return GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)


def _scored(vocab: int, eos: int) -> ScoredRollouts:
    prompts, completions = _ragged(12, vocab, seed=3)
    group_prompts = [prompts[(i // 4) * 4] for i in range(12)]  # 4 completions per prompt
    finish = ["length" if len(c) >= 18 else "eos" for c in completions]
    completions = [
        torch.cat([c, torch.tensor([eos])]) if f == "eos" else c
        for c, f in zip(completions, finish)
    ]
    batch = RolloutBatch(
        prompt_ids=group_prompts,
        completion_ids=completions,
        completion_text=["x"] * 12,
        logprobs=[torch.zeros(len(c)) for c in completions],
        finish_reason=finish,
        prompt_index=[i // 4 for i in range(12)],
    )
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.2, 0.0, 0.3, 0.9, 0.1])
    return ScoredRollouts(batch, [{}] * 12, rewards, 0)


def _update_both(tmp_path, model_dir, *overrides: str):
    out = []
    for name, budget in (
        ("padded", "training.token_budget=0"),
        ("packed", "training.token_budget=48"),
    ):
        trainer = _trainer(
            tmp_path, model_dir, name, "training.micro_batch_size=5", budget, *overrides
        )
        scored = _scored(len(trainer.tokenizer), trainer.tokenizer.eos_token_id)
        tokens = make_token_batch(
            scored.batch.prompt_ids, scored.batch.completion_ids, trainer.tokenizer.pad_token_id
        )
        before = trainer.learner.logprobs(trainer.model, tokens)
        stats, advantages = trainer.update(scored)
        grads = {
            k: p.grad.clone() for k, p in trainer.model.named_parameters() if p.grad is not None
        }
        weights = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
        out.append((stats, advantages, before * tokens.completion_mask, grads, weights))
    return out


def _assert_same_update(padded, packed):
    (s1, a1, lp1, g1, w1), (s2, a2, lp2, g2, w2) = padded, packed
    torch.testing.assert_close(a2, a1, rtol=0, atol=0)
    torch.testing.assert_close(lp2, lp1, rtol=1e-5, atol=1e-5)
    for key in ("loss", "grad_norm", "entropy", "clip_fraction", "ratio_mean", "kl"):
        if key in s1:
            assert s2[key] == pytest.approx(s1[key], rel=1e-4, abs=1e-6), key
    assert s2["padding_fraction"] < s1["padding_fraction"] / 2
    assert g1.keys() == g2.keys() and g1
    for k in g1:
        torch.testing.assert_close(g2[k], g1[k], rtol=1e-4, atol=1e-5, msg=k)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.parametrize(
    "aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
)
def test_packed_update_equals_padded_for_every_loss_aggregation(
    tmp_path, tiny_model_dir, aggregation
):
    padded, packed = _update_both(
        tmp_path, tiny_model_dir, f"algorithm.loss_aggregation={aggregation}"
    )
    _assert_same_update(padded, packed)


@pytest.mark.parametrize(
    "overrides",
    [
        ("training.ppo_epochs=2", "training.mini_batch_size=4", "algorithm.kl_coef=0.1"),
        (
            "algorithm.ratio_level=sequence",
            "algorithm.clip_ratio_low=3e-4",
            "training.ppo_epochs=2",
        ),
        ("algorithm.kl_coef=0.05", "algorithm.entropy_coef=0.01", "reward.mask_truncated=true"),
        ("model.lora_rank=4", "algorithm.kl_coef=0.1", "training.ppo_epochs=2"),
        ("model.gradient_checkpointing=true", "training.ppo_epochs=2"),
    ],
    ids=["ppo2-minibatch-kl", "gspo", "kl-entropy-masked", "lora-kl", "grad-checkpointing"],
)
def test_packed_update_equals_padded_with_kl_epochs_gspo_lora(tmp_path, tiny_model_dir, overrides):
    padded, packed = _update_both(tmp_path, tiny_model_dir, *overrides)
    _assert_same_update(padded, packed)


@pytest.mark.parametrize(
    ("overrides", "passes"),
    [
        ((), 0),  # mu = 1, one mini-batch, beta = 0: neither old nor reference pass
        (("algorithm.kl_coef=0.1",), 1),  # reference only
        (("training.ppo_epochs=2",), 1),  # old only
        (("training.mini_batch_size=4", "algorithm.kl_coef=0.1"), 2),
    ],
)
def test_packed_update_runs_only_the_log_prob_passes_it_needs(
    tmp_path, tiny_model_dir, monkeypatch, overrides, passes
):
    trainer = _trainer(tmp_path, tiny_model_dir, "run", "training.token_budget=64", *overrides)
    calls = []
    original = trainer.learner.logprobs
    monkeypatch.setattr(trainer.learner, "logprobs", lambda m, t: calls.append(m) or original(m, t))
    trainer.update(_scored(len(trainer.tokenizer), trainer.tokenizer.eos_token_id))
    assert len(calls) == passes


def test_lora_packed_reference_is_the_adapter_disabled_base(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    trainer = _trainer(
        tmp_path, tiny_model_dir, "lora", "model.lora_rank=4", "training.token_budget=32"
    )
    assert trainer.policy.ref_model is None
    with torch.no_grad():  # move the adapters away from their zero init
        for k, p in trainer.model.named_parameters():
            if "lora_B" in k:
                p.normal_(0, 0.5)
    scored = _scored(len(trainer.tokenizer), trainer.tokenizer.eos_token_id)
    tokens = make_token_batch(
        scored.batch.prompt_ids, scored.batch.completion_ids, trainer.tokenizer.pad_token_id
    )
    ref = trainer.learner.reference_logprobs(tokens) * tokens.completion_mask
    policy = trainer.learner.logprobs(trainer.model, tokens) * tokens.completion_mask
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        expected, _ = completion_logprobs(base, tokens, temperature=0.8)
    torch.testing.assert_close(ref, expected * tokens.completion_mask, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(policy, ref, atol=1e-3)


def test_packed_update_refuses_a_model_whose_forward_transforms_the_head(tmp_path, tiny_model_dir):
    from rlvr.errors import ConfigError

    trainer = _trainer(tmp_path, tiny_model_dir, "run", "training.token_budget=64")
    forward = trainer.model.forward

    def doubled_logits(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out

    trainer.model.forward = doubled_logits
    with pytest.raises(ConfigError, match="training.token_budget=0"):
        trainer.update(_scored(len(trainer.tokenizer), trainer.tokenizer.eos_token_id))


def test_packing_config_fields_default_on_and_reject_bad_values():
    from rlvr.errors import ConfigError

    cfg = load_config(None, [])
    assert cfg.training.token_budget == 2048 and cfg.training.logprob_chunk == 1024
    with pytest.raises(ConfigError, match="training.token_budget: must be >= 0"):
        load_config(None, ["training.token_budget=-1"])
    with pytest.raises(ConfigError, match="training.logprob_chunk: must be >= 1"):
        load_config(None, ["training.logprob_chunk=0"])


def test_the_trainer_drops_the_engines_weight_copies_after_each_rollout(tmp_path, tiny_model_dir):
    trainer = _trainer(tmp_path, tiny_model_dir, "release", "rollout.engine=fast")
    decoder = trainer.engine._decoder
    assert decoder is not None  # the tiny Llama runs on the fast path
    scored = trainer.collect(0)
    assert len(scored.batch) == 12
    # the update is about to change every weight: nothing kept to add to its peak memory
    assert decoder._kept_plans == [] and decoder._kept_head is None
    trainer.engine.generate([[5, 6]], 1, trainer.sampling)  # outside training they are kept
    assert decoder._kept_plans and all(p is not None for p in decoder._kept_plans)


def test_shared_prompt_capacity_search_takes_fractions_of_the_longest_row():
    # three groups of three rows, longest row 12 tokens, pair cost 0.05: the cheapest layout has
    # units of up to 15 tokens (1.25 x the longest row), 5 sequences of width 15:
    # 5 * 15 * (1 + 0.05 * 15) = 131.25; the best capacity that is a multiple of 12 costs 134.4
    prompt_lengths = [2, 2, 2, 4, 4, 4, 3, 3, 3]
    completion_lengths = [5, 8, 7, 8, 6, 4, 5, 3, 2]
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    batches = pack_groups_to_budget(prompt_lengths, completion_lengths, groups, 10**6, 64, 0.05)
    cost = 0.0
    for mb in batches:
        width = max(
            sum(prompt_lengths[u[0]] + sum(completion_lengths[i] for i in u) for u in seq)
            for seq in mb
        )
        cost += len(mb) * width * (1 + 0.05 * width)
    assert cost == pytest.approx(131.25)
    units = sorted(u for mb in batches for seq in mb for u in seq)
    assert units == [(0, 1), (2,), (3,), (4, 5), (6, 7, 8)]


def test_tied_input_embeddings_take_a_sparse_gradient_with_the_same_values(
    make_tiny_llama, char_tokenizer
):
    from rlvr.forward.logprobs import _sparse_grad_embeddings

    model = make_tiny_llama(tie=True)
    ids = torch.tensor([[3, 4, 5]])
    assert _sparse_grad_embeddings(model, ids) is not None
    with torch.no_grad():
        assert _sparse_grad_embeddings(model, ids) is None  # nothing to differentiate
    untied = make_tiny_llama()
    assert _sparse_grad_embeddings(untied, ids) is None  # its .grad would become sparse

    prompts, completions = _ragged(7, len(char_tokenizer), seed=3)
    tokens = make_token_batch(prompts, completions, char_tokenizer.pad_token_id)
    lp, _ = completion_logprobs(model, tokens)  # the model's own (dense) embedding lookup
    (lp * tokens.completion_mask).sum().backward()
    dense = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    packs = packed_micro_batches(prompts, completions, range(7), token_budget=96, max_rows=64)
    assert len(packs) > 1  # the second micro-batch adds into the first one's gradient
    for p in packs:
        lp2, _ = packed_completion_logprobs(model, p, chunk_size=5)
        (lp2 * tokens.completion_mask[p.rows, : p.width]).sum().backward()
    weight = model.get_input_embeddings().weight
    assert weight.grad.layout == torch.strided  # dense, for clipping and fused AdamW
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, dense[k], rtol=1e-4, atol=1e-6, msg=k)
