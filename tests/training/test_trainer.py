"""End-to-end: the same code path as `rlvr train` on a randomly initialised HF model."""

import json
import math
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from rlvr.cli import main

VERIFIER = '''
def digit_fraction(completion, sample):
    """Dense toy reward: the share of digits among the first 8 characters."""
    return sum(c.isdigit() for c in completion[:8]) / 8
'''

REQUIRED_METRICS = {
    "step",
    "reward_mean",
    "reward_std",
    "zero_std_group_fraction",
    "entropy",
    "completion_length_mean",
    "clip_fraction",
    "time_generate_s",
    "time_score_s",
    "time_update_s",
    "memory_peak_mib",
    "grad_norm",
    "lr",
}


def _train(tmp_path: Path, model_dir: Path, *extra: str) -> Path:
    verifier = tmp_path / "digits.py"
    verifier.write_text(VERIFIER)
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            "--quiet",
            "--output-dir",
            str(run),
            f"model.name_or_path={model_dir}",
            f"reward.verifier={verifier}:digit_fraction",
            "rollout.prompts_per_step=8",
            "rollout.group_size=8",
            "rollout.max_new_tokens=8",
            "optimizer.lr=3e-3",
            "optimizer.warmup_steps=0",
            "eval.size=8",
            "eval.t1_samples=2",
            *extra,
        ]
    )
    assert rc == 0
    return run


def _metrics(run: Path) -> list[dict]:
    """The training steps' rows; a step-0 row is the evaluation before training."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["step"] >= 1]


def test_rl_on_a_random_hf_model_raises_the_reward_and_leaves_a_loadable_run(
    tmp_path, tiny_model_dir
):
    run = _train(tmp_path, tiny_model_dir, "training.steps=24")
    rows = _metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 25))
    assert REQUIRED_METRICS <= set(rows[0])
    assert "kl" not in rows[0]  # beta = 0: no reference model, no KL
    first = sum(r["reward_mean"] for r in rows[:4]) / 4
    last = sum(r["reward_mean"] for r in rows[-4:]) / 4
    assert last > first + 0.15, (first, last)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 24 and summary["wall_seconds"] > 0
    for when in ("eval_before", "eval_after"):
        assert {"accuracy", "pass1_t1", "reasoning_fraction", "mean_length", "n"} <= set(
            summary[when]
        )
        assert summary[when]["n"] == 8
    assert (run / "config.yaml").is_file()
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert model.config.vocab_size > 0


def test_kl_to_a_reference_is_logged_and_several_updates_per_batch_run(tmp_path, tiny_model_dir):
    run = _train(
        tmp_path,
        tiny_model_dir,
        "training.steps=3",
        "algorithm.kl_coef=0.1",
        "training.ppo_epochs=2",
        "training.mini_batch_size=32",
        "training.micro_batch_size=16",
        "algorithm.loss_aggregation=token_mean",
        "algorithm.clip_ratio_high=0.28",
        "checkpoint.save_final=false",
        "eval.before=false",
    )
    rows = _metrics(run)
    assert all("kl" in r and r["kl"] >= 0 for r in rows)
    assert rows[-1]["kl"] > 0
    # with old-policy log-probs, later mini-batches see ratios away from 1
    assert rows[-1]["ratio_max"] > 1.0 or rows[-1]["ratio_min"] < 1.0
    assert not (run / "final").exists()
    assert all(math.isfinite(r["loss"]) for r in rows)


def test_dynamic_sampling_logs_its_fill_rate(tmp_path, tiny_model_dir):
    run = _train(
        tmp_path,
        tiny_model_dir,
        "training.steps=2",
        "algorithm.dynamic_sampling=true",
        "algorithm.max_sampling_rounds=2",
        "checkpoint.save_final=false",
        "eval.before=false",
        "eval.after=false",
    )
    rows = _metrics(run)
    for r in rows:
        assert 0.0 <= r["dynamic_sampling_fill_rate"] <= 1.0
        assert 1 <= r["dynamic_sampling_rounds"] <= 3


def test_composite_reward_overlong_shaping_and_truncation_masking(tmp_path, tiny_model_dir):
    verifier = tmp_path / "parts.py"
    verifier.write_text(
        "def digits(completion, sample):\n    return sum(c.isdigit() for c in completion[:8]) / 8\n"
    )
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            "--quiet",
            "--output-dir",
            str(run),
            f"model.name_or_path={tiny_model_dir}",
            f"reward.verifier={verifier}:digits:1.0,format:0.5",
            "reward.overlong_buffer=4",
            "reward.mask_truncated=true",
            "rollout.prompts_per_step=4",
            "rollout.group_size=4",
            "rollout.max_new_tokens=8",
            "training.steps=2",
            "eval.size=0",
            "checkpoint.save_final=false",
        ]
    )
    assert rc == 0
    rows = _metrics(run)
    assert {"reward/format_mean", "reward/format_std"} <= set(rows[0])
    assert any(k.startswith("reward/") and k.endswith("digits_mean") for k in rows[0])
    # a random model mostly runs to the length limit: the overlong penalty makes rewards negative
    assert rows[0]["truncated_fraction"] > 0.5
    assert rows[0]["reward_mean"] < 0


def test_training_on_a_jsonl_prompt_dataset_with_mapped_fields(tmp_path, tiny_model_dir):
    data = tmp_path / "prompts.jsonl"
    rows = [{"question": f"{i}+{i}=", "solution": 2 * i} for i in range(40)]
    rows.append({"question": "9" * 200, "solution": 0})  # too long: filtered out
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run = _train(
        tmp_path,
        tiny_model_dir,
        "training.steps=2",
        "data.task=dataset",
        f"data.path={data}",
        "data.prompt_field=question",
        "data.answer_field=solution",
        "data.eval_fraction=0.25",
        "data.max_prompt_tokens=50",
        "checkpoint.save_final=false",
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["data_filter"]["dropped_train"] + summary["data_filter"]["dropped_eval"] == 1
    assert summary["eval_before"]["n"] == 8
    assert len(_metrics(run)) == 2


@pytest.mark.parametrize(
    "variant, stat",
    [
        ("cispo", "is_weight_mean"),
        ("gmpo", "ratio_mean"),
        ("clip_cov", "cov_clip_fraction"),
        ("kl_cov", "kl_cov_fraction"),
    ],
)
def test_each_policy_loss_variant_is_selected_by_config_and_raises_the_reward(
    tmp_path, tiny_model_dir, variant, stat
):
    run = _train(
        tmp_path,
        tiny_model_dir,
        "training.steps=16",
        f"algorithm.policy_loss={variant}",
        "eval.size=0",
        "checkpoint.save_final=false",
    )
    rows = _metrics(run)
    assert all(stat in r and math.isfinite(r[stat]) for r in rows)
    first = sum(r["reward_mean"] for r in rows[:4]) / 4
    last = sum(r["reward_mean"] for r in rows[-4:]) / 4
    assert last > first + 0.1, (variant, first, last)
    if variant in ("clip_cov", "kl_cov"):  # rows are coupled: none may be skipped
        assert all(r["update_rows_skipped"] == 0 for r in rows)
