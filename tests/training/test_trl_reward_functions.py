"""Issue 36: a TRL user's two reward functions, unchanged, train the embedded model through
`rlvr train` on a JSONL of arithmetic prompts with a `ground_truth` column; their per-function
metrics land in metrics.jsonl and the report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlvr.cli import main

# As a TRL script has them (the seeds): batched, keyword lists in, a list out. The file
# imports a module beside it, which must work without PYTHONPATH.
REWARDS = '''
import re

from answer_parsing import final_number


def accuracy_reward(completions, ground_truth, **kwargs):
    """1.0 when the completion's final number equals ground_truth."""
    return [
        1.0 if final_number(c) is not None and final_number(c) == str(gt) else 0.0
        for c, gt in zip(completions, ground_truth)
    ]


def format_reward(completions, **kwargs):
    """1.0 for optional <think>...</think> reasoning followed by one number."""
    pattern = re.compile(r"^(<think>.*?</think>)?\\s*-?\\d+\\s*$", re.DOTALL)
    return [1.0 if pattern.match(c) else 0.0 for c in completions]
'''
HELPER = """
import re


def final_number(text):
    numbers = re.findall(r"-?\\d+", text.rsplit("</think>", 1)[-1])
    return numbers[-1] if numbers else None
"""
TINY = [
    "training.steps=2",
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=24",
    "eval.size=2",
    "eval.t1_samples=1",
    "logging.samples_every=1",
    "logging.progress=false",
    "checkpoint.save_final=false",
]


def write_data(folder: Path) -> None:
    rng = random.Random(0)
    rows = []
    for _ in range(12):
        a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
        rows.append({"prompt": f"{a}+{b}=", "ground_truth": str(a + b)})
    (folder / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "rewards.py").write_text(REWARDS)
    (folder / "answer_parsing.py").write_text(HELPER)


def test_two_trl_reward_functions_train_the_embedded_model_through_the_cli(tmp_path, monkeypatch):
    write_data(tmp_path)
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them; no PYTHONPATH
    run = tmp_path / "run"
    verifier = "reward.verifier=trl:rewards.py:accuracy_reward:1.0,rewards.py:format_reward:0.2"
    args = ["train", "--quiet", "--output-dir", str(run), *TINY, verifier]
    assert main([*args, "data.task=dataset", "data.path=arith.jsonl"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward_mean" in r]
    assert len(steps) == 2
    for row in steps:
        for name in ("accuracy_reward", "format_reward"):
            assert 0.0 <= row[f"reward/{name}_mean"] <= 1.0
            assert f"reward/{name}_std" in row
        assert row["verifier_failures"] == 0
        expected = row["reward/accuracy_reward_mean"] + 0.2 * row["reward/format_reward_mean"]
        assert row["reward_mean"] == pytest.approx(expected, abs=1e-6)
    assert not (run / "errors.jsonl").exists()
    config = (run / "config.yaml").read_text()
    assert "trl:" in config and "accuracy_reward" in config

    pytest.importorskip("matplotlib")
    from rlvr.observe.report import write_report

    html = write_report([run], tmp_path / "report").read_text()
    assert "Reward per function" in html
    assert (tmp_path / "report" / "plots" / "reward_components.png").stat().st_size > 0


def test_a_dataset_row_without_the_functions_column_stops_the_run_before_training(
    tmp_path, monkeypatch, capsys
):
    write_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = (tmp_path / "arith.jsonl").read_text().splitlines()
    lines[6] = json.dumps({"prompt": "1+2="})  # row 7 has no ground_truth
    (tmp_path / "arith.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    code = main(
        [
            "train",
            "--output-dir",
            str(run),
            *TINY,
            "reward.verifier=rewards.py:accuracy_reward",
            "data.task=dataset",
            "data.path=arith.jsonl",
        ]
    )
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "rlvr: error: arith.jsonl row 7: field 'ground_truth' is missing; the verifier "
        "'accuracy_reward' needs it"
    )
    assert not (run / "metrics.jsonl").exists()  # nothing trained
