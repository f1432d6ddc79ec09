"""Training with `rollout.engine=vllm`: the learner computes its own old log-probs, corrects the
loss for the sampler by importance sampling, logs the drift between the two, and stops when a
freshly synced sampler disagrees with it (the weights were not synced)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.training.grpo import GRPOTrainer
from rlvr.training.update import SamplerDriftError

pytestmark = pytest.mark.slow

VERIFIER = """
def digit_fraction(completion, sample):
    return sum(c.isdigit() for c in completion[:8]) / 8
"""


@pytest.fixture
def vllm_model_dir(tmp_path, char_tokenizer, make_head32_llama) -> Path:
    pytest.importorskip("vllm", reason="vLLM is not installed (scripts/install_vllm_cpu.sh)")
    out = tmp_path / "model"
    make_head32_llama(0).save_pretrained(out)
    char_tokenizer.save_pretrained(out)
    return out


def _config(tmp_path: Path, model_dir: Path, *extra: str):
    verifier = tmp_path / "digits.py"
    verifier.write_text(VERIFIER)
    return load_config(
        None,
        [
            f"model.name_or_path={model_dir}",
            f"reward.verifier={verifier}:digit_fraction",
            "rollout.engine=vllm",
            "rollout.vllm_kv_cache_gb=0.25",
            "rollout.prompts_per_step=4",
            "rollout.group_size=4",
            "rollout.max_new_tokens=8",
            "optimizer.warmup_steps=0",
            "eval.size=0",
            "logging.samples_every=0",
            "checkpoint.save_final=false",
            *extra,
        ],
    )


def test_a_vllm_run_corrects_for_the_sampler_and_logs_a_small_drift(tmp_path, vllm_model_dir):
    cfg = _config(tmp_path, vllm_model_dir, "training.steps=3", "optimizer.lr=3e-3")
    run = tmp_path / "run"
    run.mkdir()
    GRPOTrainer(cfg, run, progress=False, log=lambda _m: None).train()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:  # fp32 vLLM against the fp32 learner, synced before every step
        assert row["rollout_logprob_drift_mean"] <= 1e-3
        assert row["rollout_logprob_drift_max"] <= 1e-2
        assert row["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert rows[-1]["grad_norm"] > 0


def test_a_skipped_weight_sync_stops_the_run_with_a_one_line_error(tmp_path, vllm_model_dir):
    cfg = _config(tmp_path, vllm_model_dir, "training.steps=6", "optimizer.lr=3e-2")
    run = tmp_path / "run"
    run.mkdir()
    trainer = GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)
    engine_sync = trainer.source.sync
    syncs = []

    def sync_but_forget_after_the_first(model: torch.nn.Module) -> None:
        syncs.append(1)
        if len(syncs) == 1:  # the weights as loaded; after that the engine never hears again
            engine_sync(model)

    trainer.source.sync = sync_but_forget_after_the_first
    with pytest.raises(SamplerDriftError, match="weights are probably not the learner's"):
        trainer.train()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[0]["rollout_logprob_drift_mean"] <= 1e-3  # step 1 was in sync
    assert len(rows) < 6


def test_the_embedded_default_with_vllm_meets_the_default_runs_learning_bar(tmp_path):
    """`rlvr train rollout.engine=vllm` (the whole default: 60 steps of 16 x 8, 200 held-out
    problems): greedy +30 points, pass@1 at T=1 +40 points, reasoning from <= 20% to >= 80%."""
    pytest.importorskip("vllm", reason="vLLM is not installed (scripts/install_vllm_cpu.sh)")
    from rlvr.cli import main

    run = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(run), "rollout.engine=vllm", "eval.every=0"]
    assert main([*args, "checkpoint.save_final=false"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    assert after["accuracy"] >= before["accuracy"] + 0.30
    assert after["pass1_t1"] >= before["pass1_t1"] + 0.40
    assert before["reasoning_fraction"] <= 0.20 and after["reasoning_fraction"] >= 0.80
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] >= 1]  # step 0: the evaluation before training
    assert max(r["rollout_logprob_drift_mean"] for r in rows) <= 1e-3
