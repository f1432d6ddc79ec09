"""A user environment end to end: docs/examples/guess_env.py loaded by name, stepped by hand,
then trained with for two steps through the CLI on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.environments import Environment, StepResult, environment_factory
from rlvr.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "docs/examples/guess_env.py"
SAMPLE = {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632"}


@pytest.fixture
def make_env(monkeypatch):
    monkeypatch.chdir(REPO)  # the spec is a path relative to the working directory
    return environment_factory(f"{EXAMPLE}:GuessEnv")


def test_the_example_loads_by_path_and_follows_the_protocol(make_env):
    env = make_env()
    assert isinstance(env, Environment)
    assert make_env() is not env  # one fresh environment per row
    assert env.reset(SAMPLE) is None


def test_a_right_first_answer_earns_1(make_env):
    env = make_env()
    env.reset(SAMPLE)
    assert env.step("<think>7+5+0=12, 4+8+1=13, 3+2+1=6</think>632") == StepResult(
        reward=1.0, done=True
    )


def test_hints_then_a_right_answer_earn_less(make_env):
    env = make_env()
    env.reset(SAMPLE)
    first = env.step("522")
    assert first == StepResult(observation="\nhigher\n347+285=", reward=0.0)
    second = env.step("<think>carry the ones</think>700")
    assert second.observation == "\nlower\n347+285=" and not second.done
    assert env.step("632") == StepResult(reward=0.5, done=True)


def test_out_of_guesses_or_no_answer_ends_with_0(make_env):
    env = make_env()
    env.reset(SAMPLE)
    assert not env.step("1").done and not env.step("2").done
    assert env.step("3") == StepResult(reward=0.0, done=True)
    env.reset(SAMPLE)  # a reset starts a new game
    assert env.step("<think>7+5=12, carry").done  # reasoning left open: no answer
    env.reset(SAMPLE)
    assert env.step("I do not know.") == StepResult(reward=0.0, done=True)


def test_a_sample_without_an_integer_answer_is_left_to_the_verifier(make_env):
    env = make_env()
    env.reset({"prompt": "Name a prime.", "answer": "\\frac{1}{2}"})
    assert env.step("7") == StepResult(done=True)


def test_a_wrong_class_name_is_a_config_error(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError, match="has no class 'Guess'"):
        environment_factory(f"{EXAMPLE}:Guess")


def test_training_with_the_example_environment(tmp_path):
    out = tmp_path / "run"
    args = [
        "train",
        "--quiet",
        "--output-dir",
        str(out),
        f"environment.name={REPO / EXAMPLE}:GuessEnv",
        "training.steps=2",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "eval.size=2",
        "eval.t1_samples=2",
        "logging.samples_every=1",
    ]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        for key in ("tool_calls", "tool_call_fraction", "tool_timeouts", "turns_mean"):
            assert key in row, key
        assert row["tool_calls"] == 0  # a game, not a tool: no step reports a tool call
        assert 1.0 <= row["turns_mean"] <= 4.0
    evaluation = json.loads((out / "summary.json").read_text())["eval_after"]
    for key in ("tool_call_fraction", "tool_calls_mean", "turns_mean"):
        assert key in evaluation and f"{key}_greedy" in evaluation
    samples = [json.loads(line) for line in (out / "samples/step-1.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    assert any(p["from"] == "env" for s in samples for p in s["transcript"])  # hints were shown
    for sample in samples:
        parts = sample["transcript"]
        assert parts and parts[0]["from"] == "model"
        assert sample["turns"] == sum(p["from"] == "model" for p in parts)
        assert sample["reward"] in (0.0, 0.5, 0.75, 1.0)  # the environment's, never the verifier's
        for part in parts:
            if part["from"] == "env":
                hint = part["text"].split("\n")[1]
                assert hint in ("higher", "lower") and part["text"].endswith(sample["prompt"])
