"""The command line: help, and one clear line (no traceback) for bad input."""

import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlvr", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def run_main(capsys, *args: str) -> tuple[int, str]:
    """`rlvr ARGS` in this process (what the console script calls): exit code and stderr."""
    code = main(list(args))
    return code, capsys.readouterr().err


def test_help_lists_commands_and_config_keys(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "train" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for key in (
        "--config",
        "--output-dir",
        "rollout.group_size",
        "algorithm.clip_ratio_high",
        "optimizer.lr",
        "algorithm.kl_coef",
    ):
        assert key in out


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["model.name_or_path=/definitely/not/here"],
            "model.name_or_path: directory /definitely/not/here not found",
        ),
        (["optimzer.lr=1e-5"], "did you mean 'optimizer.lr'?"),
        (["optimizer.lr=-0.1"], "optimizer.lr: must be > 0.0"),
        (["rollout.group_size=1"], "needs group_size >= 2"),
        (["reward.verifier=nope"], "reward.verifier: unknown verifier 'nope'"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_nonzero_exit(tmp_path, capsys, args, expected):
    code, err = run_main(capsys, "train", "--output-dir", str(tmp_path / "run"), *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rlvr: error: ")
    assert expected in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing is created before validation passes


def test_the_console_script_exits_2_with_one_line(tmp_path):
    """The same through a real process: `python -m rlvr` (the other tests call `main`)."""
    proc = run_cli("train", "--output-dir", str(tmp_path / "run"), "optimizer.lr=-0.1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "rlvr: error: optimizer.lr: must be > 0.0, got -0.1"
    ]


def test_debug_flag_shows_the_traceback(tmp_path):
    proc = run_cli("train", "--debug", "--output-dir", str(tmp_path / "r"), "optimizer.lr=-1")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr


def test_an_existing_run_is_never_clobbered_without_overwrite(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    code, err = run_main(capsys, "train", "--output-dir", str(run))
    assert code == 2
    assert "already holds a run (metrics.jsonl)" in err
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_model_dir_without_config_json_is_rejected(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    code, err = run_main(
        capsys, "train", "--output-dir", str(tmp_path / "r"), f"model.name_or_path={tmp_path / 'm'}"
    )
    assert code == 2
    assert "has no config.json" in err


@pytest.mark.slow
def test_train_says_once_per_option_what_the_rest_of_the_config_makes_ineffective(tmp_path):
    proc = run_cli(
        "train",
        "--output-dir",
        str(tmp_path / "r"),
        "training.steps=0",
        "eval.size=0",
        "algorithm.advantage=rloo",
        "algorithm.std=sample",
        "algorithm.tis_cap=3.0",
    )
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("rlvr: warning:")]
    assert len(warnings) == 2, proc.stderr
    assert any("algorithm.std=sample" in w and "rloo" in w for w in warnings)
    assert any("algorithm.tis_cap" in w and "max_staleness=0" in w for w in warnings)
    default = run_cli(
        "train", "--output-dir", str(tmp_path / "d"), "training.steps=0", "eval.size=0"
    )
    assert "warning" not in default.stderr
