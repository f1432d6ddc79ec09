"""Issue 22: the evaluation before training is metrics.jsonl's step-0 row, written once even
across resumes, and a run whose stderr is a file logs plain progress lines."""

import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.training.grpo import GRPOTrainer

RUN = [
    "training.steps=3",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=12",
    "eval.size=4",
    "eval.t1_samples=1",
    "eval.every=2",
    "checkpoint.every=2",
    "checkpoint.save_final=false",
    "logging.samples_every=0",
    "checkpoint.deterministic=true",  # wall-clock keys in timings.jsonl: rows compare equal
]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


class _Crash(Exception):
    pass


def _crash_at(run: Path, step: int) -> None:
    """Run RUN into `run` and raise in the update of `step`, as a crash would."""
    run.mkdir()
    trainer = GRPOTrainer(load_config(None, RUN), run, progress=False, log=lambda _m: None)
    real_update = trainer.update

    def crash(scored):
        if trainer.step == step:
            raise _Crash
        return real_update(scored)

    trainer.update = crash
    with pytest.raises(_Crash):
        trainer.train()


def test_the_evaluation_before_training_is_the_step_0_row(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--output-dir", str(run), *RUN]) == 0  # not --quiet
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    before = json.loads((run / "summary.json").read_text())["eval_before"]
    assert rows[0] == {"step": 0, **{f"eval_{k}": v for k, v in before.items()}}
    assert "eval_accuracy" in rows[2] and "eval_accuracy" not in rows[3]  # eval.every=2; after
    assert all("reward_mean" in r for r in rows[1:])
    # stderr is not a terminal under capsys: plain lines (3 steps: every step), no bar
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlvr train: step ")]
    assert [line.split()[3] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all(" reward=" in line and " step_s=" in line for line in lines)
    assert " acc=" in lines[1]  # step 2 evaluated
    assert "\r" not in err


def test_a_resumed_run_keeps_one_step_0_row(tmp_path):
    whole = tmp_path / "whole"
    assert main(["train", "--quiet", "--output-dir", str(whole), *RUN]) == 0
    # crashed after its checkpoint at step 2: the step-0 row is kept, not evaluated again
    cut = tmp_path / "cut"
    _crash_at(cut, 3)
    assert [r["step"] for r in _rows(cut)] == [0, 1, 2]
    assert main(["train", "--quiet", "--resume", "--output-dir", str(cut), *RUN]) == 0
    assert _rows(cut) == _rows(whole)
    # the resume is recorded beside metrics.jsonl (whose rows stay equal), for the report
    events = [json.loads(line) for line in (cut / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["step"], e["checkpoint"]) for e in events] == [("resume", 2, "step-2")]
    assert not (whole / "events.jsonl").exists()
    # crashed before any checkpoint: --resume is an error (it would start over at step 0) and
    # keeps what is there; --overwrite starts over, with a fresh metrics.jsonl
    early = tmp_path / "early"
    _crash_at(early, 1)
    assert [r["step"] for r in _rows(early)] == [0]
    assert main(["train", "--quiet", "--resume", "--output-dir", str(early), *RUN]) == 2
    assert [r["step"] for r in _rows(early)] == [0]
    assert main(["train", "--quiet", "--overwrite", "--output-dir", str(early), *RUN]) == 0
    assert [r["step"] for r in _rows(early)] == [0, 1, 2, 3]
