"""The trainer drives a task's curriculum: on_step before drawing prompts, observe after
scoring, the level logged every step and kept across a resume."""

import json

import torch

from rlvr.cli import main


def _run(tmp_path, model_dir, name, *extra):
    run = tmp_path / name
    args = [
        "train",
        "--quiet",
        "--output-dir",
        str(run),
        f"model.name_or_path={model_dir}",
        "data.task=arithmetic",
        "data.level=1",
        "data.max_level=4",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=3",
        "eval.size=0",
        "logging.samples_every=0",
        "optimizer.warmup_steps=0",
        *extra,
    ]
    assert main(args) == 0
    return [json.loads(line) for line in (run / "metrics.jsonl").open()]


def test_linear_difficulty_rises_over_the_run(tmp_path, tiny_model_dir):
    rows = _run(tmp_path, tiny_model_dir, "linear", "data.difficulty=linear", "training.steps=4")
    assert [r["data/level"] for r in rows] == [1.0, 2.0, 3.0, 4.0]


def test_adaptive_level_is_promoted_by_observed_rewards_and_survives_resume(
    tmp_path, tiny_model_dir
):
    # Every reward is 1, so each step's 4 completions fill the window and promote once.
    verifier = tmp_path / "always.py"
    verifier.write_text("def right(completion, sample):\n    return 1.0\n")
    common = [
        "data.difficulty=adaptive",
        "data.promote_at=1.0",
        "data.promote_window=4",
        f"reward.verifier={verifier}:right",
        "checkpoint.every=2",
    ]
    rows = _run(tmp_path, tiny_model_dir, "adaptive", *common, "training.steps=2")
    assert [r["data/level"] for r in rows] == [2.0, 3.0]
    state = torch.load(
        tmp_path / "adaptive/checkpoints/step-2/trainer_state.pt", weights_only=False
    )
    assert state["task"] == {"level": 3, "window": []}

    from rlvr.data.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(level=1, max_level=4, difficulty="adaptive")
    task.load_state_dict(state["task"])
    assert task.level == 3
