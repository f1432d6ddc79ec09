"""`rlvr train` as a new user meets it (issue 36): Ctrl-C and the printed resume line, --resume
without a checkpoint, a run's config.yaml used from another directory, strict-JSON run files,
and a --help that fits the terminal and takes a section."""

from __future__ import annotations

import json
import math
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.observe.metrics import JsonlWriter
from rlvr.runs.run import StopSignals, write_summary

TINY = [
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=8",
    "eval.size=4",
    "eval.t1_samples=1",
    "logging.samples_every=0",
    "optimizer.warmup_steps=0",
]

# Presses Ctrl-C `PRESSES` times while the first step is scored, the first time it is called
# (a marker file beside it remembers), as a user would in the middle of a step.
CTRL_C = """
import os, pathlib, signal
PRESSES = {presses}
def reward(completion, sample):
    marker = pathlib.Path(__file__).with_suffix(".pressed")
    if not marker.exists():
        marker.write_text("")
        for _ in range(PRESSES):
            os.kill(os.getpid(), signal.SIGINT)
    return float(sample["answer"] in completion)
"""


def _rlvr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlvr", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def _rows(run: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_once_or_twice_saves_the_step_and_the_printed_line_resumes_as_written(
    tmp_path, presses
):
    (tmp_path / "press.py").write_text(CTRL_C.format(presses=presses))
    args = ["train", "--output-dir", "run", *TINY, "training.steps=4", "eval.every=0"]
    first = _rlvr(*args, "reward.verifier=press.py:reward", cwd=tmp_path)
    assert first.returncode == 128 + signal.SIGINT, first.stderr
    assert "Traceback" not in first.stderr
    assert "stopping after this step, which then writes a checkpoint" in first.stderr
    if presses == 2:
        assert "SIGINT again: still finishing the step" in first.stderr
    run = tmp_path / "run"
    assert (run / "checkpoints" / "step-1" / "trainer_state.pt").is_file()
    assert [r["step"] for r in _rows(run)] == [0, 1]

    # The line as printed, word for word: no --config, none of the first command's overrides.
    line = next(x for x in first.stderr.splitlines() if "continue with `" in x)
    command = shlex.split(line.split("`")[1])
    assert command[:2] == ["rlvr", "train"]
    again = _rlvr(*command[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resumed from checkpoint at step 1" in again.stderr
    assert [r["step"] for r in _rows(run)] == [0, 1, 2, 3, 4]


def test_a_third_ctrl_c_quits_at_once_and_the_second_does_not(capfd):
    signals = StopSignals()
    try:
        try:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)  # the second: the stop stays asked for
        except KeyboardInterrupt:
            pytest.fail("the second Ctrl-C quit at once, without the step's checkpoint")
        assert signals.signum == signal.SIGINT and signals.presses == 2
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        signals.restore()
    err = capfd.readouterr().err
    assert "stopping after this step" in err and "one more Ctrl-C quits at once" in err


def test_resume_of_a_run_without_a_checkpoint_is_a_one_line_error_that_keeps_the_run(
    tmp_path, capsys
):
    run = tmp_path / "run"
    assert main(["train", "--quiet", "--output-dir", str(run), *TINY, "training.steps=1"]) == 0
    before = (run / "metrics.jsonl").read_text()
    capsys.readouterr()
    code = main(["train", "--resume", str(run), *TINY, "training.steps=1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("rlvr: error: --resume ")
    assert "no checkpoint to continue from" in err and "--overwrite" in err
    assert (run / "metrics.jsonl").read_text() == before


def test_a_runs_config_yaml_works_from_another_directory(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "data").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "my_reward.py").write_text(
        "def reward(completion, sample):\n    return float(sample['answer'] in completion)\n"
    )
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]
    (project / "data" / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trained = _rlvr(
        "train",
        "--quiet",
        "--output-dir",
        "run",
        *TINY,
        "training.steps=1",
        "data.path=data/sums.jsonl",  # data.task=dataset follows (a note says so)
        "reward.verifier=my_reward.py:reward",
        cwd=project,
    )
    assert trained.returncode == 0, trained.stderr
    assert "data.task=dataset" in trained.stderr
    recorded = (project / "run" / "config.yaml").read_text()
    assert f"path: {project / 'data' / 'sums.jsonl'}" in recorded
    assert f"verifier: {project / 'my_reward.py'}:reward" in recorded
    assert "name_or_path: embedded" in recorded  # a name, not a path: left as it is

    evaluated = _rlvr("eval", "--config", str(project / "run" / "config.yaml"), cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "accuracy" in evaluated.stdout


def test_run_files_are_strict_json_with_null_for_non_finite_values(tmp_path):
    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))

    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    writer.write({"step": 1, "completion_length_correct_mean": math.nan, "loss": 0.5})
    writer.write({"step": 2, "grad_norm": math.inf, "nested": {"x": -math.inf, "y": [1.0]}})
    writer.close()
    rows = [strict(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [
        {"step": 1, "completion_length_correct_mean": None, "loss": 0.5},
        {"step": 2, "grad_norm": None, "nested": {"x": None, "y": [1.0]}},
    ]
    write_summary(tmp_path, {"eval_before": {"accuracy": math.nan}, "steps": 2})
    assert strict((tmp_path / "summary.json").read_text()) == {
        "eval_before": {"accuracy": None},
        "steps": 2,
    }


def _help(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(["train", *args])
    assert info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [60, 100])
def test_train_help_fits_the_terminal_and_lists_every_key(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _help(capsys, "--help")
    assert max(len(line) for line in out.splitlines()) <= columns
    assert len(out.splitlines()) < 150
    for key in ("rollout.group_size", "algorithm.clip_ratio_high", "optimizer.lr"):
        assert key in out
    everything = _help(capsys, "--help", "all")
    assert max(len(line) for line in everything.splitlines()) <= columns
    assert "completions per prompt (G)" in everything


def _keys(listing: str) -> list[str]:
    """The keys of a `--help SECTION` listing: its lines indented by exactly four spaces."""
    return [x.split()[0] for x in listing.splitlines() if x[:4] == "    " and x[4:5] != " "]


def test_train_help_takes_a_section_or_a_key(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rollout = _help(capsys, "--help", "rollout")
    keys = _keys(rollout)
    assert keys and all(k.startswith("rollout.") for k in keys)
    assert "rollout.group_size = 8" in rollout and "completions per prompt (G)" in rollout
    assert "optimizer.lr" not in rollout and "--output-dir" not in rollout
    one = _help(capsys, "-h", "optimizer.lr")
    assert _keys(one) == ["optimizer.lr"]
    with pytest.raises(SystemExit) as info:
        main(["train", "--help", "rolout"])
    assert info.value.code == 2
    assert "no such section or key; sections: model, data" in capsys.readouterr().err
