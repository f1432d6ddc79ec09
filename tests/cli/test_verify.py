"""`rlvr verify`: JSONL in, JSONL with reward and detail out, one-line errors for bad input."""

import argparse
import json
import subprocess
import sys

import pytest

from rlvr.commands.verify import add_parser, run
from rlvr.errors import ConfigError, DataError

SAMPLES = [
    {"id": 1, "completion": "so \\boxed{\\frac12}", "answer": "0.5"},
    {"id": 2, "completion": "<answer>7</answer>", "answer": "8"},
    {"id": 3, "completion": "no final answer here", "answer": "3"},
]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["verify", *argv])


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_scores_every_line_into_the_output_file(tmp_path, capsys):
    src = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    out = tmp_path / "out" / "scored.jsonl"
    assert run(parse("--verifier", "math", "--input", str(src), "--output", str(out))) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0]
    assert [r["detail"] for r in rows] == ["\\frac12", "7", "no final answer"]
    assert rows[0]["answer"] == "0.5"  # the input fields are kept
    err = capsys.readouterr().err
    assert "n=3" in err and "mean_reward=0.3333" in err and "failures=0" in err


def test_without_output_lines_go_to_stdout_in_process(tmp_path, capsys):
    src = write_jsonl(tmp_path / "samples.jsonl", SAMPLES[:2])
    assert run(parse("--verifier", "math", "--input", str(src), "--workers", "0")) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 0.0]
    assert "in-process" in captured.err


def test_user_verifier_spec_and_failures_are_counted(tmp_path, capsys):
    user = tmp_path / "mine.py"
    user.write_text(
        "def verify(completion, sample):\n"
        "    print('noise from the verifier')\n"
        "    if completion == 'bad':\n"
        "        raise KeyError('x')\n"
        "    return 0.5\n"
    )
    src = write_jsonl(tmp_path / "s.jsonl", [{"completion": "ok"}, {"completion": "bad"}])
    args = parse("--verifier", f"{user}:verify", "--input", str(src), "--workers", "1")
    assert run(args) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]  # prints went to stderr
    assert [r["reward"] for r in rows] == [0.5, 0.0]
    assert rows[1]["detail"].startswith("error: KeyError")
    assert "failures=1" in captured.err


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('["not", "an", "object"]', "line 3: expected a JSON object with 'completion'"),
        ('{"answer": "1"}', "line 3: expected a JSON object with 'completion'"),
        ('{"completion": 5}', "line 3: expected a JSON object with 'completion'"),
        ("{not json", "line 3: expected a JSON object with 'completion' (invalid JSON"),
    ],
)
def test_malformed_line_is_a_data_error_naming_file_and_line(tmp_path, bad_line, message):
    src = tmp_path / "samples.jsonl"
    src.write_text(json.dumps(SAMPLES[0]) + "\n\n" + bad_line + "\n")  # blank line 2 is skipped
    out = tmp_path / "out.jsonl"
    out.write_text("earlier results\n")
    with pytest.raises(DataError) as e:
        run(parse("--verifier", "math", "--input", str(src), "--output", str(out)))
    assert str(e.value) == f"{src} {message}" or str(e.value).startswith(f"{src} {message}")
    assert "\n" not in str(e.value)
    assert out.read_text() == "earlier results\n"  # nothing written before the input is valid


def test_missing_input_and_unknown_verifier_are_user_errors(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        run(parse("--verifier", "math", "--input", str(tmp_path / "nope.jsonl")))
    src = write_jsonl(tmp_path / "s.jsonl", SAMPLES[:1])
    with pytest.raises(ConfigError, match="unknown verifier 'nosuch'"):
        run(parse("--verifier", "nosuch", "--input", str(src), "--workers", "1"))


def _cli_has_verify() -> bool:
    probe = [sys.executable, "-m", "rlvr", "verify", "--help"]
    return subprocess.run(probe, capture_output=True, timeout=120).returncode == 0


@pytest.mark.slow
def test_cli_end_to_end_with_one_line_error(tmp_path):
    if not _cli_has_verify():
        pytest.skip("`rlvr verify` is not wired into cli.py yet")
    src = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    cmd = [sys.executable, "-m", "rlvr", "verify", "--verifier", "math", "--input", str(src)]
    done = subprocess.run(cmd + ["--workers", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [json.loads(x)["reward"] for x in done.stdout.splitlines()] == [1.0, 0.0, 0.0]
    src.write_text("oops\n")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"rlvr: error: {src} line 1: expected a JSON object with 'completion' "
        "(invalid JSON: Expecting value)"
    ]


def test_module_entry_keeps_stdout_clean_jsonl_and_exits_2_on_bad_input(tmp_path):
    user = tmp_path / "noisy.py"
    user.write_text("def verify(completion, sample):\n    print('noise')\n    return 1.0\n")
    src = write_jsonl(tmp_path / "samples.jsonl", [{"completion": "a"}, {"completion": "b"}])
    cmd = [sys.executable, "-m", "rlvr.commands.verify", "--input", str(src), "--workers", "1"]
    done = subprocess.run(
        cmd + ["--verifier", f"{user}:verify"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(x)["reward"] for x in done.stdout.splitlines()] == [1.0, 1.0]
    assert "noise" in done.stderr and "n=2" in done.stderr
    src.write_text('{"completion": "a"}\n{"answer": 1}\n')
    done = subprocess.run(cmd + ["--verifier", "math"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"rlvr: error: {src} line 2: expected a JSON object with 'completion'"
    )
