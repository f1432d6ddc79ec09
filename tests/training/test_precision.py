"""model.precision: fp32 master weights keep the small AdamW updates pure bf16 loses, bf16-mixed
computes the loss and gradients of fp32 within a measured tolerance, and the default (fp32 on a
CPU) enters no autocast at all (docs/memory.md, "Precision")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import config_warnings, load_config
from rlvr.distributed.world import World
from rlvr.forward.logprobs import TokenBatch, chunked_token_logprobs, make_token_batch
from rlvr.forward.paths import build_forward
from rlvr.runs.optim import build_optimizer, build_scheduler
from rlvr.runs.policy import build_policy
from rlvr.training.learner import Learner

BF16_LINE = (
    "model.precision=bf16: AdamW updates below bf16 resolution (~2^-8 relative) are lost; "
    "use bf16-mixed"
)


def _cpu_runs_bf16() -> bool:
    try:
        a = torch.ones(4, 4, dtype=torch.bfloat16)
        return bool((a @ a).eq(4).all())
    except RuntimeError:
        return False


needs_bf16 = pytest.mark.skipif(
    not _cpu_runs_bf16(),
    reason=f"this CPU ({torch.backends.cpu.get_cpu_capability()}) cannot run bf16 matmuls",
)


def _learner(model_dir: Path, precision: str, *extra: str) -> Learner:
    cfg = load_config(
        None,
        [
            f"model.name_or_path={model_dir}",
            f"model.precision={precision}",
            "optimizer.lr=1e-6",
            "optimizer.warmup_steps=0",
            *extra,
        ],
    )
    policy = build_policy(cfg, World(), torch.device("cpu"))
    optimizer = build_optimizer(policy.model, cfg.optimizer)
    forward = build_forward(cfg, policy.tokenizer.pad_token_id, 1e-3)
    return Learner(
        policy,
        forward,
        optimizer,
        build_scheduler(optimizer, 100, cfg.optimizer),
        max_grad_norm=1.0,
        max_consecutive_skips=3,
    )


def _tokens(vocab: int, pad_id: int) -> TokenBatch:
    """8 rows of 12 random prompt tokens and 40 distinct completion tokens: every embedding row
    of the small vocabulary is almost surely in some input, so every weight has a gradient."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (12,), generator=gen) for _ in range(8)]
    completions = [torch.randperm(vocab, generator=gen)[:40] for _ in range(8)]
    return make_token_batch(prompts, completions, pad_id)


def _nll_backward(learner: Learner, tokens: TokenBatch) -> float:
    """Mean negative log-likelihood of the completion tokens, its gradient accumulated over the
    forward path's micro-batches."""
    learner.optimizer.zero_grad(set_to_none=True)
    count, total = tokens.completion_mask.sum(), 0.0
    for rows, unit in learner.forward.micro_batches(tokens, torch.arange(len(tokens))):
        lp, _ = learner.unit_logprobs(learner.model, unit)
        assert lp.dtype == torch.float32  # log-probs (and so the loss) in fp32 in every layout
        loss = -(lp * tokens.completion_mask[rows, : lp.shape[1]]).sum() / count
        learner.backward(loss)
        total += float(loss.detach())
    return total


def _changed_fraction(learner: Learner, tokens: TokenBatch, steps: int) -> float:
    before = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(steps):
        assert learner.step(_nll_backward(learner, tokens)) is not None
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(learner.model.parameters(), before))
    return changed / sum(b.numel() for b in before)


@needs_bf16
def test_bf16_mixed_keeps_the_small_adamw_updates_that_pure_bf16_loses(tiny_model_dir):
    # lr 1e-6 against weights of ~0.02 (and norm weights of 1): updates of ~5e-5 relative or
    # less, far below bf16's 2^-8 spacing, far above fp32's 2^-23.
    mixed = _learner(tiny_model_dir, "bf16-mixed")
    tokens = _tokens(len(mixed.policy.tokenizer), mixed.policy.tokenizer.pad_token_id)
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())  # fp32 masters
    mixed_changed = _changed_fraction(mixed, tokens, steps=10)
    moments = [s["exp_avg"].dtype for s in mixed.optimizer.state.values()]
    assert moments and set(moments) == {torch.float32}

    pure = _learner(tiny_model_dir, "bf16")
    assert all(p.dtype == torch.bfloat16 for p in pure.model.parameters())
    pure_changed = _changed_fraction(pure, tokens, steps=10)
    # measured: 0.9987 (the rest: embedding rows of tokens no input holds) against 0.019
    assert mixed_changed >= 0.99
    assert pure_changed < 0.05


@needs_bf16
@pytest.mark.parametrize("token_budget", [512, 0], ids=["packed", "padded"])
def test_bf16_mixed_loss_and_gradients_agree_with_fp32(tiny_model_dir, token_budget):
    budget = f"training.token_budget={token_budget}"
    fp32 = _learner(tiny_model_dir, "fp32", budget)
    mixed = _learner(tiny_model_dir, "bf16-mixed", budget)
    tokens = _tokens(len(fp32.policy.tokenizer), fp32.policy.tokenizer.pad_token_id)
    loss_fp32, loss_mixed = _nll_backward(fp32, tokens), _nll_backward(mixed, tokens)
    grads_fp32 = torch.cat([p.grad.flatten() for p in fp32.model.parameters()])
    grads_mixed = torch.cat([p.grad.flatten() for p in mixed.model.parameters()])
    assert grads_mixed.dtype == torch.float32
    error = float((grads_mixed - grads_fp32).norm() / grads_fp32.norm())
    # measured on this model: loss within 1e-5 relative, gradients 0.2% (packed) and 0.3%
    # (padded) relative in norm, log-probs within 1.5e-3 nats
    assert abs(loss_mixed - loss_fp32) <= 1e-3 * abs(loss_fp32)
    assert 0 < error < 0.02  # > 0: the mixed passes did compute in bf16
    lp_fp32, lp_mixed = fp32.logprobs(fp32.model, tokens), mixed.logprobs(mixed.model, tokens)
    assert float(((lp_mixed - lp_fp32) * tokens.completion_mask).abs().max()) < 1e-2


def test_the_packed_head_runs_in_fp32_under_autocast(tiny_llama):
    hidden = torch.randn(10, tiny_llama.config.hidden_size)
    targets = torch.randint(0, tiny_llama.config.vocab_size, (10,))
    rounded = hidden.bfloat16()
    expected, _ = chunked_token_logprobs(tiny_llama, hidden, targets, chunk_size=4)
    exact, _ = chunked_token_logprobs(tiny_llama, rounded.float(), targets, chunk_size=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = chunked_token_logprobs(tiny_llama, rounded.float(), targets, chunk_size=4)
        from_bf16, _ = chunked_token_logprobs(tiny_llama, rounded, targets, chunk_size=4)
    assert got.dtype == from_bf16.dtype == torch.float32
    assert torch.equal(got, exact) and torch.equal(from_bf16, exact)  # bit for bit: fp32 head
    assert torch.allclose(got, expected, atol=0.05)


@needs_bf16
def test_lora_under_bf16_mixed_trains_fp32_adapters_over_a_bf16_base(tiny_model_dir):
    pytest.importorskip("peft")
    learner = _learner(tiny_model_dir, "bf16-mixed", "model.lora_rank=4")
    params = dict(learner.model.named_parameters())
    trained = {name for name, p in params.items() if p.requires_grad}
    assert trained and all("lora_" in name for name in trained)
    assert {params[name].dtype for name in trained} == {torch.float32}
    assert {p.dtype for name, p in params.items() if name not in trained} == {torch.bfloat16}
    tokens = _tokens(len(learner.policy.tokenizer), learner.policy.tokenizer.pad_token_id)
    before = {name: params[name].detach().clone() for name in trained}
    for _ in range(10):
        assert learner.step(_nll_backward(learner, tokens)) is not None
    changed = sum(int((params[n].detach() != b).sum()) for n, b in before.items())
    assert changed >= 0.99 * sum(b.numel() for b in before.values())
    # the adapters are fp32 under pure bf16 too (peft's default): no warning with LoRA
    assert config_warnings(load_config(None, ["model.precision=bf16", "model.lora_rank=4"])) == []


def test_fp32_on_cpu_is_the_default_and_enters_no_autocast(tiny_model_dir):
    learner = _learner(tiny_model_dir, "auto")
    assert learner.policy.compute_dtype is None
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    with learner.policy.autocast():
        assert not torch.is_autocast_enabled("cpu")
    mixed = _learner(tiny_model_dir, "bf16-mixed")
    with mixed.policy.autocast():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


@pytest.mark.parametrize(
    ("precision", "dtype", "device", "layout"),
    [
        ("auto", "auto", "cpu", "fp32"),
        ("auto", "auto", "cuda", "bf16-mixed"),
        ("auto", "bfloat16", "cuda", "bf16"),  # an explicit dtype keeps meaning pure weights
        ("auto", "float32", "cuda", "fp32"),
        ("auto", "float16", "cuda", "fp16"),
        ("bf16-mixed", "auto", "cpu", "bf16-mixed"),
        ("fp32", "bfloat16", "cuda", "fp32"),  # precision, once set, decides
    ],
)
def test_training_precision_resolves(precision, dtype, device, layout):
    cfg = load_config(None, [f"model.precision={precision}", f"model.dtype={dtype}"])
    assert cfg.model.training_precision(device) == layout
    if device == "cuda":  # a GPU without bf16 falls back to fp32 under auto/auto
        expected = "fp32" if (precision, dtype) == ("auto", "auto") else layout
        assert cfg.model.training_precision(device, bf16_supported=False) == expected


def test_pure_16_bit_training_is_warned_about():
    assert config_warnings(load_config()) == []
    assert config_warnings(load_config(None, ["model.precision=bf16"])) == [BF16_LINE]
    [line] = config_warnings(load_config(None, ["model.dtype=bfloat16"]))
    assert line.startswith("model.dtype=bfloat16 (model.precision=auto trains pure bf16")
    assert "~2^-8 relative" in line
    [line] = config_warnings(load_config(None, ["model.dtype=float16"]))
    assert "~2^-11 relative" in line
    assert config_warnings(load_config(None, ["model.precision=bf16-mixed"])) == []
    [line] = config_warnings(
        load_config(None, ["model.precision=bf16-mixed", "model.dtype=float32"])
    )
    assert line.startswith("model.dtype=float32 has no effect: model.precision=bf16-mixed")


def test_rlvr_train_prints_the_bf16_warning(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "metrics.jsonl").write_text("{}\n")
    # the warnings come before the run directory check, which stops this run before any work
    assert main(["train", "--output-dir", str(taken), "model.precision=bf16"]) == 2
    assert f"rlvr: warning: {BF16_LINE}" in capsys.readouterr().err.splitlines()


@needs_bf16
def test_rlvr_train_in_bf16_mixed_gives_finite_metrics(tmp_path):
    out = tmp_path / "run"
    args = ["training.steps=2", "model.precision=bf16-mixed", "eval.size=0"]
    assert main(["train", "--quiet", "--output-dir", str(out), *args]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["skipped_updates"] == 0
        numbers = [v for v in row.values() if isinstance(v, (int, float))]
        assert all(torch.isfinite(torch.tensor(float(v))) for v in numbers)
        assert row["grad_norm"] > 0


def test_estimate_plans_fp32_masters_and_a_bf16_compute_copy(tmp_path, capsys):
    def report(*args: str) -> dict[str, str]:
        assert main(["estimate", *args]) == 0
        rows = [ln.split("  ", 1) for ln in capsys.readouterr().out.splitlines() if "  " in ln]
        return {key.strip(): value.strip() for key, value in rows}

    mixed = report("model.precision=bf16-mixed")
    fp32 = report("model.device=cpu")  # auto on a CPU
    pure = report("--precision", "bf16")
    assert mixed["precision"] == "bf16-mixed" and fp32["precision"] == "fp32"
    assert mixed["weights"] == fp32["weights"] and mixed["optimizer"] == fp32["optimizer"]
    assert mixed["bytes/trainable param"] == fp32["bytes/trainable param"] == "16.0"
    assert pure["bytes/trainable param"] == "8.0"
    assert fp32["compute_copy"] == pure["compute_copy"] == "0.0 MiB"
    assert mixed["compute_copy"] != "0.0 MiB"
    # under bf16-mixed the engines decode a bf16 copy (rollout.dtype=auto): a cast replica,
    # half the K/V; rollout.dtype=float32 decodes the fp32 masters themselves
    assert fp32["replica"] == "0.0 MiB"
    masters = report("model.precision=bf16-mixed", "rollout.dtype=float32")
    assert masters["replica"] == "0.0 MiB" and masters["kv_cache"] == fp32["kv_cache"]
    cast = report("model.precision=bf16-mixed", "rollout.dtype=bfloat16")
    # (the kv_cache row is the larger of generation and evaluation: evaluation decodes fp32)
    half = float(fp32["generation phase"].split()[0]) / 2
    assert cast["replica"] != "0.0 MiB" and float(cast["generation phase"].split()[0]) == half
    assert (
        mixed["replica"] == cast["replica"]
        and mixed["generation phase"] == cast["generation phase"]
    )
    gpu = report("model.precision=bf16-mixed", "model.device=cuda")
    assert gpu["replica"] == cast["replica"] and gpu["generation phase"] == cast["generation phase"]


@needs_bf16
def test_under_bf16_mixed_rollouts_decode_a_bf16_copy_synced_before_each_rollout(tmp_path):
    """rollout.dtype=bfloat16 under bf16-mixed: the engine decodes a replica cast to bf16, which
    holds the learner's weights (cast) whenever a batch is drawn; the update corrects for the
    sampler and reports its drift, which stays small; rollout.dtype=auto does the same, and
    rollout.dtype=float32 decodes the fp32 masters themselves."""
    from rlvr.training.grpo import GRPOTrainer

    bf16 = ["model.precision=bf16-mixed", "rollout.dtype=bfloat16"]
    cfg = load_config(None, ["training.steps=3", *bf16, "eval.size=4", "optimizer.lr=3e-3"])
    (tmp_path / "run").mkdir()
    (tmp_path / "masters").mkdir()
    t = GRPOTrainer(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    policy = t.policy
    assert (
        policy.rollout_cast and t.correct_sampler and t.drift_limit == cfg.rollout.max_logprob_drift
    )
    assert next(policy.rollout_model.parameters()).dtype == torch.bfloat16
    assert next(policy.model.parameters()).dtype == torch.float32
    # the replica's log-probs are recomputed: the fast engine takes its fastest bf16 kernels
    assert not t.engine._decoder.hf_rounding and not t.engine.exact_logprobs
    synced = []
    collect = t.collector.collect

    def check(step, feed=None):
        for (name, p), q in zip(policy.model.named_parameters(), policy.rollout_model.parameters()):
            assert torch.equal(q, p.detach().to(torch.bfloat16)), name
        synced.append(step)
        return collect(step, feed)

    t.collector.collect = check
    t.train()
    assert synced == [1, 2, 3]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    drift = [r["rollout_logprob_drift_mean"] for r in rows if r.get("step", 0) >= 1]
    assert len(drift) == 3 and all(0 < d < 0.1 for d in drift)
    auto = load_config(None, ["training.steps=1", "model.precision=bf16-mixed"])
    (tmp_path / "auto").mkdir()
    chosen = GRPOTrainer(auto, tmp_path / "auto", progress=False, log=lambda _m: None)
    assert next(chosen.policy.rollout_model.parameters()).dtype == torch.bfloat16
    fp32 = load_config(
        None, ["training.steps=1", "model.precision=bf16-mixed", "rollout.dtype=float32"]
    )
    masters = GRPOTrainer(fp32, tmp_path / "masters", progress=False, log=lambda _m: None)
    assert masters.policy.rollout_model is masters.policy.model and not masters.correct_sampler
    assert masters.engine._decoder.hf_rounding
