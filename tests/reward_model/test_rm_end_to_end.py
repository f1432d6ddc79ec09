"""rlvr rm, then rlvr train with the reward model as the reward and the rule watching it."""

from __future__ import annotations

import json
import random

import pytest

from rlvr.cli import main
from rlvr.data.tasks.addition import AdditionTask


def test_rm_reward_trains_the_policy_and_logs_its_agreement_with_the_rule(
    tmp_path, capsys, make_pairs_file
):
    task, rng = AdditionTask(), random.Random(0)
    rows = []
    for _ in range(64):  # a correct trace preferred to the carry-dropping direct answer
        a, b = task.sample_train_pair(rng)
        rows.append(
            {
                "prompt": task.format_prompt(a, b),
                "chosen": task.reasoning_completion(a, b),
                "rejected": task.direct_completion(a, b),
            }
        )
    pairs = make_pairs_file(rows)
    rm = tmp_path / "rm"
    args = [f"data.path={pairs}", "model.name_or_path=embedded-small", "optimizer.lr=1e-3"]
    assert main(["rm", *args, "training.epochs=4", "--output-dir", str(rm), "--quiet"]) == 0
    assert json.loads((rm / "summary.json").read_text())["eval_after"]["accuracy"] >= 0.8

    run = tmp_path / "train"
    rc = main(
        [
            "train",
            f"reward.verifier=rm:{rm / 'final'}:1.0,exact_answer:0",
            "training.steps=2",
            "rollout.prompts_per_step=4",
            "rollout.group_size=4",
            "eval.size=8",
            "eval.every=0",
            "eval.t1_samples=0",
            "--output-dir",
            str(run),
            "--quiet",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()][1:]
    name = f"rm:{rm / 'final'}"
    for row in rows:
        assert f"reward/{name}_mean" in row and "reward/exact_answer_mean" in row
        assert row["reward_mean"] == pytest.approx(row[f"reward/{name}_mean"], abs=1e-5)
        assert "reward/agreement_pairs/exact_answer" in row

    # where no resolver is given, rm: is a one-line error that says where it works
    assert main(["eval", "--config", str(run / "config.yaml")]) == 2
    assert "only rlvr train" in capsys.readouterr().err
