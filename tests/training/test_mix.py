"""DeepSeek-R1's last stage: prompts without answers mixed into a task (data.mix_path), scored
by reward.mix_verifier while the task's prompts keep reward.verifier."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.data.mix import MIX_ROUTE, MixedTask
from rlvr.data.registry import build_task
from rlvr.errors import ConfigError, DataError
from rlvr.rewards.scoring import Scorer

OPEN = """
def brevity(completion, sample):
    assert "answer" not in sample, "a mixed prompt has no reference answer"
    assert sample["reward_route"] == "mix"
    return 1.0 / (1 + len(completion))

def explode(completion, sample):
    raise RuntimeError("the open-prompt verifier broke")
"""


def _prompts(tmp_path: Path, n: int = 5) -> Path:
    path = tmp_path / "open.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"Say something about {i}."}) + "\n" for i in range(n))
    )
    return path


def test_the_mixed_task_draws_its_share_and_holds_out_the_tasks_own(tmp_path):
    mix = [f"data.mix_path={_prompts(tmp_path)}", "data.mix_fraction=0.25"]
    cfg = load_config(None, [*mix, "reward.mix_verifier=exact_answer"])
    task = build_task(cfg.data)
    assert isinstance(task, MixedTask)
    rng = random.Random(0)
    draws = [task.sample_train(rng) for _ in range(2000)]
    mixed = [d for d in draws if d.get("reward_route") == MIX_ROUTE]
    assert 0.22 < len(mixed) / len(draws) < 0.28
    assert all("answer" not in d and d["prompt"].startswith("Say something") for d in mixed)
    assert all("answer" in d for d in draws if d.get("reward_route") != MIX_ROUTE)
    assert all("answer" in s and "reward_route" not in s for s in task.heldout(20))
    # the same RNG state draws the same prompts (resumes repeat them)
    again = build_task(cfg.data)
    rng2 = random.Random(0)
    assert [again.sample_train(rng2) for _ in range(2000)] == draws


def test_a_curriculum_observes_its_own_prompts_only():
    seen = []

    class Task:
        def sample_train(self, rng):
            return {"prompt": "p", "answer": "1"}

        def heldout(self, n):
            return []

        def observe(self, samples, rewards):
            seen.append((samples, rewards))

    mixed = MixedTask(Task(), [{"prompt": "open"}], 0.5, "open.jsonl")
    rows = [{"prompt": "p"}, {"prompt": "open", "reward_route": MIX_ROUTE}, {"prompt": "q"}]
    mixed.observe(rows, [1.0, 0.3, 0.0])
    assert seen == [([{"prompt": "p"}, {"prompt": "q"}], [1.0, 0.0])]


def test_the_scorer_routes_mixed_rows_and_numbers_their_failures_by_row():
    rule = Scorer(lambda text, sample: float(text == sample["answer"]))
    broken = Scorer(lambda text, sample: 1 / 0 if text == "boom" else 0.5)
    scorer = Scorer(rule.verifier, routes={MIX_ROUTE: broken})
    samples = [
        {"prompt": "a", "answer": "1"},
        {"prompt": "b", "reward_route": MIX_ROUTE},
        {"prompt": "c", "answer": "2"},
        {"prompt": "d", "reward_route": MIX_ROUTE},
    ]
    rewards, failed = scorer(["1", "x", "3", "boom"], samples, first_row=10)
    assert rewards == [1.0, 0.5, 0.0, 0.0]
    assert failed == 1
    (failure,) = scorer.pop_failures()
    assert failure.row == 13  # the mixed row's place in the batch
    # a skipped row is scored by neither
    rewards, failed = scorer(["1", "x"], samples[:2], skip=[False, True])
    assert rewards == [1.0, 0.0] and failed == 0


def test_a_run_mixes_open_prompts_scored_by_their_own_verifier(tmp_path):
    open_py = tmp_path / "open.py"
    open_py.write_text(OPEN)
    out = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(out), "training.steps=2"]
    args += ["rollout.prompts_per_step=8", "rollout.group_size=2", "eval.size=8", "eval.every=0"]
    args += [f"data.mix_path={_prompts(tmp_path)}", "data.mix_fraction=0.5"]
    args += [f"reward.mix_verifier={open_py}:brevity", "logging.samples_every=1"]
    assert main(args) == 0
    rows = [
        json.loads(line) for line in (out / "samples" / "step-1.jsonl").read_text().splitlines()
    ]
    mixed = [r for r in rows if r["answer"] is None]
    assert mixed and len(mixed) < len(rows)
    for r in mixed:
        assert r["reward"] == pytest.approx(1.0 / (1 + len(r["completion"])))
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m.get("verifier_failures", 0) == 0 for m in metrics if m["step"] > 0)
    recorded = (out / "config.yaml").read_text()
    assert str(tmp_path / "open.jsonl") in recorded  # made absolute: resumable from anywhere


def test_a_mix_without_its_verifier_or_share_is_a_one_line_error(tmp_path, capsys):
    path = _prompts(tmp_path)
    assert main(["train", f"data.mix_path={path}", "data.mix_fraction=0.5"]) == 2
    assert "reward.mix_verifier" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="data.mix_fraction"):
        load_config(None, [f"data.mix_path={path}", "reward.mix_verifier=exact_answer"])
    with pytest.raises(DataError, match="no rows"):
        MixedTask(object(), [], 0.5, "empty.jsonl")
    from rlvr.config import config_warnings

    lines = config_warnings(load_config(None, ["reward.mix_verifier=exact_answer"]))
    assert any(line.startswith("reward.mix_verifier=exact_answer has no effect") for line in lines)


def test_eval_verifier_scores_held_out_accuracy_with_its_own_rule(tmp_path):
    """Held-out accuracy by eval.verifier, not by a training reward that is no accuracy."""
    always = tmp_path / "always.py"
    always.write_text("def one(completion, sample):\n    return 1.0\n")
    base = ["train", "--quiet", "training.steps=0", "eval.size=16", "eval.t1_samples=0"]
    base += [f"reward.verifier={always}:one"]
    assert main([*base, "--output-dir", str(tmp_path / "a")]) == 0
    assert main([*base, "--output-dir", str(tmp_path / "b"), "eval.verifier=exact_answer"]) == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())["eval_before"]["accuracy"]
    b = json.loads((tmp_path / "b" / "summary.json").read_text())["eval_before"]["accuracy"]
    assert a == 1.0 and b < 0.5  # the base model is wrong on most problems


def test_a_pipeline_stage_trains_on_the_mix(tmp_path):
    """R1's last stage as a pipeline stage: rule-scored task prompts and open prompts with
    their own verifier; the stage table measures the rule on the task's held-out prompts."""
    import yaml

    open_py = tmp_path / "open.py"
    open_py.write_text(OPEN)
    tree = {
        "name": "mixed",
        "models": {"base": "embedded"},
        "task": {"task": "addition"},
        "reward": {"verifier": "exact_answer"},
        "eval": {"size": 8, "t1_samples": 0},
        "stages": [
            {
                "name": "last",
                "kind": "grpo",
                "config": {
                    "training.steps": 2,
                    "rollout.prompts_per_step": 4,
                    "rollout.group_size": 2,
                    "logging.samples_every": 1,
                    "data.mix_path": str(_prompts(tmp_path)),
                    "data.mix_fraction": 0.5,
                    "reward.mix_verifier": f"{open_py}:brevity",
                },
            }
        ],
    }
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(tree))
    out = tmp_path / "out"
    assert main(["pipeline", str(path), "--output-dir", str(out), "--quiet"]) == 0
    samples = (out / "stages" / "last" / "samples" / "step-1.jsonl").read_text().splitlines()
    mixed = [r for r in map(json.loads, samples) if r["answer"] is None]
    assert mixed and all(
        r["reward"] == pytest.approx(1 / (1 + len(r["completion"]))) for r in mixed
    )
