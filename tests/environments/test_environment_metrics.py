"""What every environment adapter builds on: an environment's own figures (StepResult.metrics)
checked, averaged into `env/<name>` metrics and kept in samples/; another library's
environment named 'LIBRARY:REF' made by its adapter module; `data.task=environment` training
on the prompts the environment brings."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import EnvironmentConfig
from rlvr.environments import StepResult, registry
from rlvr.environments.registry import environment_from_config, environment_rows
from rlvr.errors import ConfigError
from rlvr.rollout import ToolRecord
from rlvr.rollout.multi_turn import checked_step, environment_metrics


class ScoredGuess:
    """Two turns: a hint, then the answer; reports whether the first turn was right."""

    def reset(self, sample):
        self.answer = sample["answer"]
        self.turn = 0
        return None

    def step(self, text):
        self.turn += 1
        right = self.answer in text
        if self.turn == 1 and not right:
            return StepResult(observation=" again: ", metrics={"first_right": 0.0})
        return StepResult(
            reward=float(right), done=True, metrics={"solved": right, "turns": self.turn}
        )


def test_metrics_are_checked_and_copied():
    mine = {"a": 1, "b": True}
    out = checked_step(StepResult(metrics=mine))
    assert out.metrics == {"a": 1.0, "b": 1.0} and out.metrics is not mine
    assert all(type(v) is float for v in out.metrics.values())
    for bad, error in [
        ({"a": float("nan")}, ValueError),
        ({"a": "1"}, TypeError),
        ({"a": None}, TypeError),
        ({"": 1.0}, TypeError),
        ({3: 1.0}, TypeError),
        ([("a", 1.0)], TypeError),
        ("a=1", TypeError),
    ]:
        with pytest.raises(error, match="the environment's step returned"):
            checked_step(StepResult(metrics=bad))  # type: ignore[arg-type]


def test_env_metrics_are_means_over_the_rows_that_report_them():
    records = [
        ToolRecord(metrics={"solved": 1.0, "turns": 1.0}),
        ToolRecord(metrics={"solved": 0.0, "turns": 2.0, "first_right": 0.0}),
        ToolRecord(),  # reported nothing (or its environment failed)
    ]
    assert environment_metrics(records) == {
        "env/first_right": 0.0,
        "env/solved": 0.5,
        "env/turns": 1.5,
    }
    assert environment_metrics([ToolRecord(), ToolRecord()]) == {}


def test_a_training_run_logs_the_environments_metrics(tmp_path):
    out = tmp_path / "run"
    args = [
        "train",
        "--quiet",
        "--output-dir",
        str(out),
        f"environment.name={Path(__file__)}:ScoredGuess",
        "environment.max_turns=2",
        "training.steps=1",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "eval.size=2",
        "eval.t1_samples=2",
        "logging.samples_every=1",
    ]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "reward_mean" in r)
    assert 0.0 <= step["env/solved"] <= 1.0 and 1.0 <= step["env/turns"] <= 2.0
    evaluation = json.loads((out / "summary.json").read_text())["eval_after"]
    assert "env/solved" in evaluation and "env/solved_greedy" in evaluation
    samples = [json.loads(line) for line in (out / "samples/step-1.jsonl").read_text().splitlines()]
    for sample in samples:
        if sample["finish_reason"] != "length":
            assert sample["env_metrics"]["solved"] == sample["reward"]


@pytest.fixture
def fake_library(monkeypatch):
    """An adapter module for 'textarena' whose environment brings its own prompts."""
    made = []

    def factory(ref, env, settings):
        made.append((ref, settings))

        def make():
            return ScoredGuess()

        def rows(split):
            n = settings.get("n", 6)
            base = 100 if split == "eval" else 0
            return [{"prompt": f"{base + i}+0=", "answer": str(base + i)} for i in range(n)]

        make.rows = rows  # type: ignore[attr-defined]
        make.stop = ("\n",)  # type: ignore[attr-defined]
        return make

    monkeypatch.setattr(registry, "_FACTORIES", {})
    module = types.ModuleType("rlvr.environments.adapters.textarena")
    module.factory = factory  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rlvr.environments.adapters.textarena", module)
    return made


def test_a_library_prefix_reaches_its_adapter_with_the_settings(fake_library):
    env = EnvironmentConfig(name="textarena:Guess-v0", args=["n=3", "mode=[a, b]"])
    make, stop = environment_from_config(env)
    assert stop == ("\n",) and isinstance(make(), ScoredGuess)
    assert fake_library == [("Guess-v0", {"n": 3, "mode": ["a", "b"]})]
    train, heldout = environment_rows(env)
    assert [r["answer"] for r in train] == ["0", "1", "2"]
    assert [r["answer"] for r in heldout] == ["100", "101", "102"]
    assert len(fake_library) == 1  # made once, shared by the task and the rollouts


def test_environment_errors_name_the_field(fake_library):
    with pytest.raises(ConfigError, match="environment.name: 'textarena:' names no textarena"):
        environment_from_config(EnvironmentConfig(name="textarena:"))
    with pytest.raises(ConfigError, match=r"environment.args\[0\]: expected KEY=VALUE"):
        environment_from_config(EnvironmentConfig(name="textarena:X", args=["oops"]))
    with pytest.raises(ConfigError, match="has no prompts of its own"):
        environment_rows(EnvironmentConfig(name=f"{Path(__file__)}:ScoredGuess"))


def test_data_task_environment_trains_on_the_environments_prompts(fake_library, tmp_path):
    out = tmp_path / "run"
    args = [
        "train",
        "--quiet",
        "--output-dir",
        str(out),
        "data.task=environment",
        "environment.name=textarena:Guess-v0",
        "environment.args=[n=8]",
        "environment.max_turns=2",
        "training.steps=1",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "eval.size=4",
        "eval.t1_samples=1",
        "logging.samples_every=1",
    ]
    assert main(args) == 0
    samples = [json.loads(line) for line in (out / "samples/step-1.jsonl").read_text().splitlines()]
    assert {s["prompt"] for s in samples} <= {f"{i}+0=" for i in range(8)}
    summary = json.loads((out / "summary.json").read_text())
    assert 0.0 <= summary["eval_after"]["env/solved"] <= 1.0


def test_data_task_environment_without_an_environment_is_a_config_error(capsys, tmp_path):
    code = main(["train", "--quiet", "--output-dir", str(tmp_path / "r"), "data.task=environment"])
    assert code == 2
    assert "data.task: 'environment'" in capsys.readouterr().err
