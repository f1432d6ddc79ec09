"""SFT: completion-only labels, packing, loss normalisation, LoRA, resume and bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.data.tasks.addition import AdditionTask
from rlvr.errors import ConfigError, DataError
from rlvr.forward.packing import block_causal_mask, pack
from rlvr.rewards.exact import exact_answer_reward
from rlvr.sft.data import (
    IGNORE_INDEX,
    SFTExample,
    batch_indices,
    collate,
    micro_batches,
    tokenize_example,
)
from rlvr.sft.trainer import SFTConfig, accumulate_gradients, completion_nll_sum, run_sft

X = IGNORE_INDEX


def _cfg(model_dir: Path, *overrides: str) -> SFTConfig:
    base = [
        f"model.name_or_path={model_dir}",
        "eval.size=0",
        "logging.progress=false",
        "optimizer.warmup_steps=0",
    ]
    return load_config(None, [*base, *overrides], schema=SFTConfig)


def _examples(tokenizer, texts: list[tuple[str, str]]) -> list[SFTExample]:
    return [tokenize_example(tokenizer, p, c, chat=False) for p, c in texts]


MIXED = [
    ("1+2=", "3"),
    ("12+3=", "15"),
    ("347+285=", "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632"),
    ("9+9=", "18"),
    ("100+200=", "300"),
    ("5+5=", "<think>5+5+0=10</think>10"),
    ("77+1=", "78"),
]


# --- the AdditionTask demonstrations ------------------------------------------------------------


def test_addition_demonstration_is_the_documented_trace_and_verifies():
    task = AdditionTask(digits=3)
    assert task.demonstration(task.make_sample(347, 285)) == (
        "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632"
    )
    rng = random.Random(0)
    for _ in range(50):
        sample = task.sample_train(rng)
        assert exact_answer_reward(task.demonstration(sample), sample) == 1.0


@pytest.mark.parametrize("prompt", ["34+285=", "347-285=", "347+285", None])
def test_addition_demonstration_rejects_a_foreign_prompt(prompt):
    with pytest.raises(DataError, match="is not 'a\\+b=' with two 3-digit operands"):
        AdditionTask(digits=3).demonstration({"id": "x", "prompt": prompt})


# --- labels and layout, by hand ----------------------------------------------------------------


def test_completion_only_labels_of_a_two_example_batch_by_hand(char_tokenizer):
    # char tokenizer: digit d -> d + 3, '+' -> 66, '=' -> 68, <eos> -> 1, <pad> -> 0
    a, b = _examples(char_tokenizer, [("1+2=", "3"), ("12+3=", "15")])
    assert a == SFTExample((4, 66, 5, 68), (6, 1))
    assert b == SFTExample((4, 5, 66, 6, 68), (4, 8, 1))

    unpacked = collate([[a], [b]], pad_id=0)
    assert unpacked.input_ids.tolist() == [
        [4, 66, 5, 68, 6, 1, 0, 0],
        [4, 5, 66, 6, 68, 4, 8, 1],
    ]
    assert unpacked.labels.tolist() == [
        [X, X, X, X, 6, 1, X, X],
        [X, X, X, X, X, 4, 8, 1],
    ]
    assert unpacked.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1], list(range(8))]
    assert unpacked.num_loss_tokens == 5
    assert unpacked.padding_fraction == pytest.approx(2 / 16)

    packed = collate([[a, b]], pad_id=0)
    assert packed.input_ids.tolist() == [[4, 66, 5, 68, 6, 1, 4, 5, 66, 6, 68, 4, 8, 1]]
    assert packed.labels.tolist() == [[X, X, X, X, 6, 1, X, X, X, X, X, 4, 8, 1]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7]]
    assert packed.segment_ids.tolist() == [[0] * 6 + [1] * 8]
    assert packed.padding_fraction == 0.0

    allowed = block_causal_mask(packed.segment_ids, torch.float32)[0, 0] == 0
    assert allowed[5, :6].all() and not allowed[5, 6:].any()  # a's EOS sees only a
    assert allowed[6, 6] and not allowed[6, :6].any()  # b's first token does not see a
    assert allowed[13, 6:].all() and not allowed[13, :6].any()


def test_pack_is_first_fit_decreasing_within_the_capacity():
    # 6 opens row 0, 5 row 1, 4 row 2; then 3 fits row 1 and 2 fits row 0
    assert pack([5, 3, 4, 2, 6], capacity=8) == [[3, 4], [0, 1], [2]]
    assert pack([3, 3], capacity=6) == [[0, 1]]
    with pytest.raises(ValueError, match="exceeds pack length 4"):
        pack([5], capacity=4)


# --- the loss -----------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_loss_equals_the_loss_of_each_example_alone(char_tokenizer, tiny_llama, attention):
    tiny_llama.set_attn_implementation(attention)
    assert tiny_llama.config._attn_implementation == attention
    examples = _examples(char_tokenizer, MIXED)
    reference = 0.0
    with torch.no_grad():
        for ex in examples:  # plain forward: no mask, default positions, one example
            ids = torch.tensor([ex.prompt_ids + ex.completion_ids])
            logp = tiny_llama(input_ids=ids).logits[0, :-1].log_softmax(-1)
            targets = ids[0, 1:]
            nll = -logp[torch.arange(len(targets)), targets]
            reference += float(nll[len(ex.prompt_ids) - 1 :].sum())

        packed = micro_batches(examples, 0, packing=True, pack_length=50, micro_batch_size=8)
        unpacked = micro_batches(examples, 0, packing=False, pack_length=0, micro_batch_size=3)
        assert len(packed) == 1 and packed[0].input_ids.shape[0] < len(examples)
        packed_sum = sum(float(completion_nll_sum(tiny_llama, b)) for b in packed)
        unpacked_sum = sum(float(completion_nll_sum(tiny_llama, b)) for b in unpacked)
    assert packed_sum == pytest.approx(reference, rel=1e-5)
    assert unpacked_sum == pytest.approx(reference, rel=1e-5)
    padding_packed = 1 - sum(b.num_real_tokens for b in packed) / sum(
        b.input_ids.numel() for b in packed
    )
    padding_unpacked = 1 - sum(b.num_real_tokens for b in unpacked) / sum(
        b.input_ids.numel() for b in unpacked
    )
    assert padding_packed < 0.05 < 0.4 < padding_unpacked


def test_gradient_accumulation_equals_one_big_batch(char_tokenizer, make_tiny_llama):
    examples = _examples(char_tokenizer, MIXED)
    grads, losses = [], []
    for micro in (8, 1):
        model = make_tiny_llama(0).train()
        batches = micro_batches(examples, 0, packing=False, pack_length=0, micro_batch_size=micro)
        loss, tokens = accumulate_gradients(model, batches)
        losses.append(loss)
        grads.append([p.grad.clone() for p in model.parameters()])
        # Uneven completion lengths: the mean of per-micro-batch means is not the batch mean.
        if micro == 1:
            with torch.no_grad():
                per_micro = [
                    float(completion_nll_sum(model, b)) / b.num_loss_tokens for b in batches
                ]
            assert sum(per_micro) / len(per_micro) != pytest.approx(loss, rel=1e-3)
    assert tokens == sum(len(e.completion_ids) for e in examples)
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for big, accumulated in zip(*grads):
        torch.testing.assert_close(accumulated, big, rtol=1e-5, atol=1e-7)


def test_batches_cover_every_example_once_per_epoch_in_a_seeded_order():
    first = [i for step in (1, 2, 3) for i in batch_indices(step, 10, 4, seed=0)]
    second = [i for step in (4, 5, 6) for i in batch_indices(step, 10, 4, seed=0)]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new order each epoch
    assert len(batch_indices(3, 10, 4, seed=0)) == 2  # the last batch of an epoch is smaller
    assert batch_indices(2, 10, 4, seed=0) == batch_indices(2, 10, 4, seed=0)


# --- runs ---------------------------------------------------------------------------------------


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_lora_trains_only_the_adapters_and_final_loads_as_a_plain_model(tmp_path, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = _cfg(
        tiny_model_dir,
        "model.lora_rank=4",
        "data.num_examples=16",
        "training.batch_size=8",
        "optimizer.lr=1e-2",
    )
    summary = run_sft(cfg, tmp_path / "run", log=lambda _: None, progress=False)
    assert summary["steps"] == 2
    base = _weights(tiny_model_dir)
    final = _weights(tmp_path / "run" / "final")
    assert 0 < summary["trainable_parameters"] < sum(t.numel() for t in base.values()) / 2
    # Layers without adapters are the base's, bit for bit; adapted ones moved.
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert torch.equal(final[name], base[name])
    assert not torch.equal(
        final["model.layers.0.self_attn.q_proj.weight"],
        base["model.layers.0.self_attn.q_proj.weight"],
    )
    # final/ = the untouched base + the saved adapter, merged.
    remerged = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "run" / "final" / "adapter"
    ).merge_and_unload()
    for name, tensor in remerged.state_dict().items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=1e-6)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    assert loaded.config.vocab_size == 77


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_resume_reaches_the_weights_of_an_uninterrupted_run(tmp_path, tiny_model_dir, lora_rank):
    overrides = (
        f"model.lora_rank={lora_rank}",
        "data.num_examples=24",
        "training.batch_size=8",
        "training.micro_batch_size=4",
        "training.epochs=2",
        "checkpoint.every=2",
        "checkpoint.keep_last=2",
        "optimizer.schedule=cosine",
        "optimizer.warmup_steps=2",
        "optimizer.lr=1e-2",
    )
    quiet = dict(log=lambda _: None, progress=False)
    whole = run_sft(_cfg(tiny_model_dir, *overrides), tmp_path / "whole", **quiet)
    assert whole["steps"] == 6

    def stop_after_3(step, _metrics):
        if step == 3:
            raise _Interrupt

    parted = tmp_path / "parted"
    with pytest.raises(_Interrupt):
        run_sft(_cfg(tiny_model_dir, *overrides), parted, on_step=stop_after_3, **quiet)
    summary = run_sft(_cfg(tiny_model_dir, *overrides), parted, resume=True, **quiet)
    assert summary["resumed_from_step"] == 2

    a, b = _weights(tmp_path / "whole" / "final"), _weights(parted / "final")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    steps = [json.loads(line)["step"] for line in (parted / "metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (parted / "checkpoints").iterdir()) == ["step-4", "step-6"]

    with pytest.raises(Exception, match="config differs .* optimizer.lr"):
        run_sft(_cfg(tiny_model_dir, *overrides, "optimizer.lr=0.5"), parted, resume=True, **quiet)


# --- bad input ----------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "row, field, expected",
    [
        ({"prompt": "1+2="}, "completion", "got None"),
        ({"prompt": "1+2=", "completion": ""}, "completion", "got ''"),
        ({"prompt": "1+2=", "completion": 3}, "completion", "got 3"),
        ({"prompt": "   ", "completion": "3"}, "prompt", "got '   '"),
        ({"prompt": "1+2=", "completion": "3", "system": 7}, "system", "got 7"),
    ],
)
def test_a_bad_row_names_file_row_and_field(tmp_path, tiny_model_dir, row, field, expected):
    path = _write_jsonl(tmp_path / "sft.jsonl", [{"prompt": "1+1=", "completion": "2"}, row])
    cfg = _cfg(tiny_model_dir, f"data.path={path}")
    with pytest.raises(DataError) as err:
        run_sft(cfg, tmp_path / "run", log=lambda _: None, progress=False)
    message = str(err.value)
    assert message.startswith(f"{path} row 2: field '{field}' must be a non-empty string")
    assert expected in message
    assert not (tmp_path / "run").exists()  # nothing written before the data is valid


def test_an_empty_file_and_remapped_fields(tmp_path, tiny_model_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty.jsonl: no rows"):
        run_sft(_cfg(tiny_model_dir, f"data.path={empty}"), tmp_path / "r0", progress=False)
    rows = [{"q": "1+2=", "a": "3"}, {"q": "12+3=", "a": "15"}, {"q": "1+1=", "a": "2" * 40}]
    path = _write_jsonl(tmp_path / "qa.jsonl", rows)
    cfg = _cfg(
        tiny_model_dir,
        f"data.path={path}",
        "data.prompt_field=q",
        "data.completion_field=a",
        "data.max_length=20",
    )
    lines: list[str] = []
    summary = run_sft(cfg, tmp_path / "r1", log=lines.append, progress=False)
    assert summary["examples"] == 2 and summary["dropped_long"] == 1
    assert any("dropped 1 train" in line for line in lines)
    metrics = [json.loads(line) for line in (tmp_path / "r1" / "metrics.jsonl").open()]
    assert metrics[0]["completion_tokens"] == 2 + 3  # "3"+EOS and "15"+EOS


def test_a_task_without_demonstrations_needs_data_path(tmp_path, tiny_model_dir):
    prompts = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "answer": "2"}] * 4)
    cfg = _cfg(tiny_model_dir, "task.task=dataset", f"task.path={prompts}")
    with pytest.raises(ConfigError, match="'dataset' has no demonstrations; set data.path"):
        run_sft(cfg, tmp_path / "run", progress=False)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["task.task=dataset"], "task.path: required when task.task is 'dataset'"),
        (
            ["data.max_length=64", "training.pack_length=32"],
            "training.pack_length: must be >= data.max_length = 64",
        ),
        (["data.eval_path=x.jsonl"], "data.eval_path: needs data.path"),
        (["training.batch_size=0"], "training.batch_size: must be >= 1"),
        (["training.pakcing=false"], "did you mean 'training.packing'?"),
    ],
)
def test_config_cross_field_checks(overrides, expected):
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.").replace("?", r"\?")):
        load_config(None, overrides, schema=SFTConfig)


def test_a_pack_length_shorter_than_an_example_is_a_config_error(tmp_path, tiny_model_dir):
    cfg = _cfg(tiny_model_dir, "data.num_examples=4", "training.pack_length=10")
    with pytest.raises(ConfigError, match="shorter than the longest example"):
        run_sft(cfg, tmp_path / "run", progress=False)


def test_heldout_sft_rows_report_a_completion_loss(tmp_path, tiny_model_dir):
    rows = [{"prompt": f"{a}+{a}=", "completion": str(2 * a)} for a in range(12)]
    path = _write_jsonl(tmp_path / "rows.jsonl", rows)
    cfg = _cfg(
        tiny_model_dir,
        f"data.path={path}",
        f"data.eval_path={path}",
        "training.batch_size=4",
        "training.epochs=3",
        "eval.every=3",
        "optimizer.lr=1e-2",
    )
    lines: list[str] = []
    summary = run_sft(cfg, tmp_path / "run", log=lines.append, progress=False)
    assert summary["eval_examples"] == 12
    assert summary["eval_after"]["loss"] < summary["eval_before"]["loss"]
    assert "accuracy" not in summary["eval_after"]  # eval.size=0: no generation
    assert any(line.startswith("eval after: sft loss") for line in lines)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    # step 0 is eval_before (metrics.jsonl's step-0 row), step 9 eval_after (summary.json only)
    assert [m["step"] for m in metrics if "eval_loss" in m] == [0, 3, 6]
    assert metrics[0] == {"step": 0, **{f"eval_{k}": v for k, v in summary["eval_before"].items()}}


def test_sft_follows_model_precision(tmp_path, tiny_model_dir):
    # bf16-mixed: fp32 weights and AdamW state, the forward in bf16 (a loss close to fp32's,
    # not equal to it); pure bf16: bf16 weights and the warning rlvr train gives.
    from rlvr.sft.trainer import accumulate_gradients, prepare_sft

    settings = ("data.num_examples=16", "training.batch_size=16")
    runs, lines = {}, []
    for precision in ("fp32", "bf16-mixed", "bf16"):
        cfg = _cfg(tiny_model_dir, f"model.precision={precision}", *settings)
        run = prepare_sft(cfg, None, lines.append)
        batches = micro_batches(
            run.data.train, 0, packing=True, pack_length=run.pack_length, micro_batch_size=16
        )
        loss, _ = accumulate_gradients(run.model, batches, run.compute_dtype)
        runs[precision] = (run, loss)
    fp32, mixed, pure = (runs[p] for p in ("fp32", "bf16-mixed", "bf16"))
    assert next(mixed[0].model.parameters()).dtype == torch.float32
    assert mixed[0].compute_dtype == torch.bfloat16 and fp32[0].compute_dtype is None
    assert next(pure[0].model.parameters()).dtype == torch.bfloat16
    assert mixed[1] != fp32[1] and mixed[1] == pytest.approx(fp32[1], rel=0.02)
    assert [line for line in lines if "warning" in line] == [
        "warning: model.precision=bf16: AdamW updates below bf16 resolution (~2^-8 relative) "
        "are lost; use bf16-mixed"
    ]
