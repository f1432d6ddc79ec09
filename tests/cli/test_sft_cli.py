"""`rlvr sft`: end to end on the embedded model, resume, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from rlvr.cli import main


def test_sft_on_addition_demonstrations_raises_heldout_accuracy(tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(
        [
            "sft",
            "--output-dir",
            str(run),
            "data.num_examples=192",
            "eval.size=40",
            "eval.t1_samples=1",
            "checkpoint.every=3",
            "checkpoint.keep_last=1",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "eval before: accuracy" in err and "eval after: accuracy" in err
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
    assert after >= before + 0.3, (before, after)
    assert summary["eval_after"]["reasoning_fraction_greedy"] > 0.8  # it learned to think
    assert summary["steps"] == 6 and summary["examples"] == 192 and summary["dropped_long"] == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert metrics[0] == {"step": 0, **{f"eval_{k}": v for k, v in summary["eval_before"].items()}}
    metrics = metrics[1:]  # the training steps
    assert [m["step"] for m in metrics] == list(range(1, 7))
    for key in ("loss", "lr", "grad_norm", "tokens", "padding_fraction", "tokens_per_s"):
        assert all(key in m for m in metrics), key
    assert max(m["padding_fraction"] for m in metrics) < 0.05
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-6"]
    assert AutoModelForCausalLM.from_pretrained(run / "final").num_parameters() > 0

    # --resume of a finished run uses its config.yaml and only re-evaluates.
    assert main(["sft", "--output-dir", str(run), "--resume", "eval.before=false"]) == 2
    assert "config differs" in capsys.readouterr().err
    assert main(["sft", "--output-dir", str(run), "--resume", "--quiet"]) == 0
    assert json.loads((run / "summary.json").read_text())["resumed_from_step"] == 6


@pytest.mark.parametrize(
    "args, expected",
    [
        (["optimzer.lr=1e-5"], "did you mean 'optimizer.lr'?"),
        (["training.micro_batch_size=0"], "training.micro_batch_size: must be >= 1, got 0"),
        (["data.path=/nope/sft.jsonl"], "/nope/sft.jsonl: file not found"),
        (["model.name_or_path=/not/here"], "model.name_or_path: directory /not/here not found"),
        (["--resume"], "--resume: name the run directory"),
        (["eval.size=50000"], "eval.size: AdditionTask(digits=3): asked for 50000 held-out"),
    ],
)
def test_bad_input_is_one_line_on_stderr(tmp_path, capsys, args, expected):
    out = [] if "--resume" in args else ["--output-dir", str(tmp_path / "run")]
    assert main(["sft", *out, *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlvr: error: ")
    assert expected in lines[0]
    assert not (tmp_path / "run").exists()  # a failed start leaves nothing behind


def test_resume_needs_a_run_directory_and_an_old_run_is_not_clobbered(tmp_path, capsys):
    assert main(["sft", "--output-dir", str(tmp_path / "empty"), "--resume"]) == 2
    assert "config.yaml not found" in capsys.readouterr().err
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    assert main(["sft", "--output-dir", str(old)]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_help_lists_the_sft_config_keys(capsys):
    with pytest.raises(SystemExit):
        main(["sft", "--help"])
    out = capsys.readouterr().out
    for key in ("--resume", "data.completion_field", "training.packing", "task.digits"):
        assert key in out, key
    assert "rollout.group_size" not in out
    with pytest.raises(SystemExit):
        main(["sft", "--help", "optimizer"])  # a section: its keys with defaults and help
    assert "optimizer.lr = 0.001" in capsys.readouterr().out


def test_cli_sft_on_a_file_of_rows(tmp_path, tiny_model_dir):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"{a}+{a}=", "completion": str(2 * a)}) + "\n" for a in range(10)
        )
    )
    run = tmp_path / "run"
    rc = main(
        [
            "sft",
            "--output-dir",
            str(run),
            "--quiet",
            f"model.name_or_path={tiny_model_dir}",
            f"data.path={rows}",
            "training.batch_size=4",
            "training.epochs=2",
            "eval.size=0",
        ]
    )
    assert rc == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["examples"] == 10
    assert "eval_before" not in summary  # no held-out problems asked for
    assert (run / "config.yaml").is_file() and (run / "final" / "config.json").is_file()


def test_the_example_config_is_valid():
    from rlvr.config import load_config
    from rlvr.sft.trainer import SFTConfig

    example = Path(__file__).resolve().parents[2] / "examples" / "sft.yaml"
    cfg = load_config(example, schema=SFTConfig)
    assert cfg.model.lora_rank == 16 and cfg.training.pack_length >= cfg.data.max_length
