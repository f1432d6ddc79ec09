"""`rlvr eval --config`: a training config's held-out evaluation, equal to the trainer's own
eval_before; flags override the config; the temperature-1 pass can be skipped."""

import argparse
import json

import pytest

from rlvr.cli import main
from rlvr.commands.eval import add_parser, format_table, run
from rlvr.errors import UserError
from rlvr.observe.report import load_runs, render_html


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", *argv])


def train_0_steps(run_dir, *overrides: str) -> dict:
    """`rlvr train` with no update step: only eval_before; returns summary.json."""
    args = [
        "train", "--output-dir", str(run_dir), "training.steps=0", "eval.after=false",
        "checkpoint.save_final=false", "logging.samples_every=0", *overrides,
    ]  # fmt: skip
    assert main(args) == 0
    return json.loads((run_dir / "summary.json").read_text())


def test_eval_config_reproduces_the_trainers_eval_before_exactly(tmp_path, capsys):
    # The embedded default's addition task, a stop string that cuts some greedy answers, and
    # pass@k: every part of the evaluation a config sets.
    settings = ["eval.size=16", "eval.t1_samples=3", "eval.k=2", 'rollout.stop=["3"]']
    config = tmp_path / "eval.yaml"
    config.write_text("eval:\n  size: 16\n  t1_samples: 3\n  k: 2\nrollout:\n  stop: ['3']\n")
    before = train_0_steps(tmp_path / "run", *settings)["eval_before"]
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert run(parse("--config", str(config), "--output", str(out))) == 0  # --model: embedded
    header, row = capsys.readouterr().out.strip().splitlines()
    metrics = json.loads(out.read_text())["models"][0]["metrics"]
    assert {key: metrics[key] for key in before} == before
    assert header.split() == [
        "model", "accuracy", "pass@1", "pass@2", "maj@2", "reasoning_fraction", "mean_length",
    ]  # fmt: skip
    assert row.split()[:3] == ["embedded", f"{before['accuracy']:.3f}", f"{before['pass@1']:.3f}"]
    # The stop string is applied: without it the greedy answers run on to their EOS.
    free = tmp_path / "free.json"
    assert run(parse("eval.size=16", "eval.t1_samples=0", "--output", str(free))) == 0
    unstopped = json.loads(free.read_text())["models"][0]["metrics"]
    assert unstopped["mean_length_greedy"] > before["mean_length_greedy"]


def test_eval_config_of_a_run_reproduces_its_eval_after_on_its_final_model(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [
        "train", "--quiet", "--output-dir", str(run_dir), "training.steps=1", "eval.size=8",
        "eval.t1_samples=2", "rollout.prompts_per_step=2", "rollout.group_size=4",
        "logging.samples_every=0",
    ]  # fmt: skip
    assert main(args) == 0
    after = json.loads((run_dir / "summary.json").read_text())["eval_after"]
    out = tmp_path / "eval.json"
    config, final = str(run_dir / "config.yaml"), str(run_dir / "final")
    assert run(parse("--config", config, "--model", final, "--output", str(out))) == 0
    metrics = json.loads(out.read_text())["models"][0]["metrics"]
    assert {key: metrics[key] for key in after} == after


def test_t1_samples_0_skips_the_sampled_pass_in_training_and_in_eval(tmp_path, capsys):
    # Another task, verifier and prompt template, all read from the config by both commands.
    settings = [
        "eval.size=8", "eval.t1_samples=0", "data.task=countdown", "reward.verifier=countdown",
        "data.prompt_template=Numbers and target: {prompt}", "rollout.max_new_tokens=16",
    ]  # fmt: skip
    summary = train_0_steps(tmp_path / "run", *settings)
    before = summary["eval_before"]
    assert "pass1_t1" not in before and "mean_length" not in before
    assert {"accuracy", "mean_length_greedy", "n"} <= set(before)
    assert f"eval before: accuracy {before['accuracy']:.3f}  (n=8)" in capsys.readouterr().err
    assert "<td>—</td>" in render_html(load_runs([tmp_path / "run"]), [])  # report: no pass1_t1
    out = tmp_path / "eval.json"
    assert run(parse(*settings, "--output", str(out))) == 0  # overrides alone: the default
    header, row = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["model", "accuracy"]
    assert row.split() == ["embedded", f"{before['accuracy']:.3f}"]
    metrics = json.loads(out.read_text())["models"][0]["metrics"]
    assert {key: metrics[key] for key in before} == before


def test_flags_override_the_config_and_each_model_gets_a_row(tmp_path, capsys):
    out = tmp_path / "eval.json"
    args = parse(
        "eval.size=50", "eval.t1_samples=0", "--n", "3", "--k", "0", "--max-new-tokens", "5",
        "--seed", "7", "--device", "cpu", "--model", "embedded", "--model", "embedded",
        "--output", str(out),
    )  # fmt: skip
    assert run(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[1].split()[1:] == lines[2].split()[1:]
    report = json.loads(out.read_text())
    cfg = report["config"]
    assert cfg["eval"]["size"] == 3 and cfg["eval"]["k"] == 0
    assert cfg["eval"]["max_new_tokens"] == 5
    assert cfg["data"]["seed"] == 7 and cfg["training"]["seed"] == 7
    assert cfg["model"]["device"] == "cpu"
    assert [m["metrics"]["n"] for m in report["models"]] == [3, 3]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval.size=4", "--data", "humaneval"], "--data: not with --config"),
        (["eval.size=4", "--digits", "4"], "--digits: not with --config"),
        (["eval.size=0"], "eval.size: 0 evaluates nothing"),
        (["eval.size=4", "--k", "-1"], "--k: must be >= 0"),
        (["eval.size=4", "--n", "0"], "--n: must be >= 1"),
        (["eval.t1_samples=-1"], "eval.t1_samples"),
        ([], "--model: required without --config"),
    ],
)
def test_bad_arguments_are_one_line_user_errors(argv, message):
    with pytest.raises(UserError, match=message) as info:
        run(parse(*argv))
    assert "\n" not in str(info.value)


def test_missing_config_file_exits_2_with_one_line(tmp_path, capsys):
    assert main(["eval", "--config", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.yaml" in err


def test_table_without_pass_at_k_shows_pass1_t1_and_omits_what_no_model_has():
    t1 = {"accuracy": 0.5, "pass1_t1": 0.25, "reasoning_fraction": 0.0, "mean_length": 3.0}
    assert format_table(["m"], [t1], k=0).splitlines()[0].split() == [
        "model", "accuracy", "pass1_t1", "reasoning_fraction", "mean_length",
    ]  # fmt: skip
    greedy = {"accuracy": 0.5, "mean_length_greedy": 3.0}
    header, first, second = format_table(["a", "b"], [t1, greedy], k=0).splitlines()
    assert second.split()[2:] == ["nan", "nan", "nan"]  # b drew no temperature-1 sample


def test_a_gguf_file_is_kept_only_where_it_exists(tmp_path):
    from rlvr.commands.eval import model_config
    from rlvr.config import ModelConfig

    original = tmp_path / "gguf"
    original.mkdir()
    (original / "m.gguf").write_text("")
    cfg = ModelConfig(name_or_path=str(original), gguf_file="m.gguf")
    assert model_config(cfg, str(original)).gguf_file == "m.gguf"
    final = tmp_path / "run" / "final"  # safetensors written by the trainer
    final.mkdir(parents=True)
    trained = model_config(cfg, str(final))
    assert trained.name_or_path == str(final) and trained.gguf_file is None
