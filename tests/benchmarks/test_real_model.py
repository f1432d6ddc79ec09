"""benchmarks/real_model.py: its configs are valid rlvr configs that keep the held-out problems
out of training and evaluate the retention task with the same prompt settings, and its standard
errors are the textbook ones. (The run itself takes ~30 minutes; docs/real-model.md has it.)"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import real_model  # noqa: E402


def _args(**kw) -> argparse.Namespace:
    defaults = dict(
        steps=40, prompts=8, group_size=8, max_new_tokens=32, lr=2e-6, beta=0.0, fewshot=3,
        eval_size=200, seed=0, retention_task="letter_counting", out=Path("x"),
    )  # fmt: skip
    return argparse.Namespace(**{**defaults, **kw})


def test_the_training_and_retention_configs_load(tmp_path):
    from rlvr.config import load_config

    train = real_model.settings(_args(), tmp_path)
    retention = real_model.retention_settings(train, "letter_counting", [])
    for name, tree in (("train", train), ("retention", retention)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(tree))
        cfg = load_config(path)
        assert cfg.data.fewshot == 3 and cfg.eval.size == 200 and cfg.eval.t1_samples == 0
        assert cfg.reward.verifier == "gym" and cfg.model.gguf_file == real_model.GGUF
    assert load_config(tmp_path / "retention.yaml").data.gym_name == "letter_counting"
    assert load_config(tmp_path / "train.yaml").data.gym_config == ["min_words=2", "max_words=3"]


def test_the_standard_error_of_a_difference():
    d = real_model.difference(0.25, 0.45, 200)
    se = math.sqrt(0.25 * 0.75 / 200 + 0.45 * 0.55 / 200)
    assert d["se"] == pytest.approx(se, abs=1e-4)
    assert d["gain"] == pytest.approx(0.2) and d["gain_in_se"] == pytest.approx(0.2 / se, abs=0.01)
    assert real_model.difference(0.0, 0.0, 200)["gain_in_se"] is None


def test_training_never_sees_a_heldout_problem_or_shot():
    pytest.importorskip("reasoning_gym")
    import random

    from rlvr.config import DataConfig
    from rlvr.data.registry import build_task

    task = build_task(DataConfig(task="gym", gym_name=real_model.TASK[0],
                                 gym_config=real_model.TASK[1], fewshot=3))  # fmt: skip
    held = {s["prompt"] for s in task.heldout(200)}
    rng = random.Random(0)
    train = {task.sample_train(rng)["prompt"] for _ in range(500)}
    assert len(held) == 200 and not held & train
    assert not held & {s["prompt"] for s in task.shots}
