"""errors.jsonl and the failure warnings, end to end: a real tiny `rlvr train` run whose user
verifier raises, returns None or returns "1.0" completes, training and held-out evaluation
alike; errors.jsonl has the failed completions and one traceback; the warning is printed once.
An environment whose step raises: its rows score 0 and count in environment_failures."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli import main

BAD_VERIFIER = """
def verify(completion, sample):
    kind = len(completion) % 3
    if kind == 0:
        raise ValueError("boom")
    if kind == 1:
        return None
    return "1.0"
"""

RAISING_ENVIRONMENT = """
from rlvr.environments import StepResult


class Raises:
    def reset(self, sample):
        return None

    def step(self, text):
        raise RuntimeError("environment bug")
"""

TINY = [
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "eval.size=3",
    "eval.t1_samples=1",
    "logging.samples_every=0",
    "logging.progress=false",
    "checkpoint.save_final=false",
]
KEYS = {"step", "phase", "kind", "sample_id", "row", "component", "error", "traceback"}


def _train(run: Path, *overrides: str) -> None:
    assert main(["train", "--output-dir", str(run), *TINY, *overrides]) == 0


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_failing_verifier_is_logged_with_one_traceback_and_warned_about_once(tmp_path, capsys):
    verifier = tmp_path / "bad.py"
    verifier.write_text(BAD_VERIFIER)
    run = tmp_path / "run"
    _train(run, f"reward.verifier={verifier}:verify", "training.steps=3", "eval.every=2")
    err = capsys.readouterr().err
    rows = _jsonl(run / "metrics.jsonl")
    steps = [r for r in rows if "reward_mean" in r]
    assert [r["verifier_failures"] for r in steps] == [8, 8, 8]  # every completion failed
    assert all(r["reward_mean"] == 0.0 for r in steps)
    assert all("environment_failures" not in r for r in rows)  # no environment: no such key
    # held-out evaluation does not crash: it scores the failures 0 and reports them
    assert rows[0]["step"] == 0 and rows[0]["eval_verifier_failures"] == 6  # 3 greedy + 3 T=1
    assert steps[1]["eval_verifier_failures"] == 6  # the evaluation of step 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_after"]["verifier_failures"] == 6

    lines = _jsonl(run / "errors.jsonl")
    assert all(set(line) == KEYS for line in lines)
    train = [line for line in lines if line["phase"] == "train"]
    evals = [line for line in lines if line["phase"] == "eval"]
    assert sorted({line["step"] for line in train}) == [1, 2, 3]
    assert sorted({line["step"] for line in evals}) == [0, 2, 3]  # before, every 2, after
    assert len(train) == 24 and len(evals) == 18  # one line per failed completion
    assert {line["kind"] for line in lines} == {"verifier"}
    assert all(line["sample_id"].startswith("addition-") for line in lines)  # the samples' ids
    errors = {line["error"] for line in lines}
    assert "ValueError: boom" in errors
    assert errors <= {
        "ValueError: boom",
        "TypeError: the verifier returned None (expected a finite number)",
        "TypeError: the verifier returned str '1.0' (expected a finite number)",
    }
    # one traceback in the whole run: the first ValueError's (a wrong return value has none)
    traced = [line for line in lines if line["traceback"] is not None]
    assert len(traced) == 1
    assert traced[0] is next(line for line in lines if line["error"] == "ValueError: boom")
    assert 'bad.py", line 5, in verify' in traced[0]["traceback"]
    assert traced[0]["traceback"].rstrip().endswith("ValueError: boom")

    # one warning for the training steps and one for the evaluations, for the whole run
    assert err.count("warning [verifier_failures] step 1: 8 of 8 completions failed in the ") == 1
    assert err.count("warning [verifier_failures]") == 1
    assert err.count("warning [eval_verifier_failures] step 0: 6 of 6 held-out completions") == 1
    assert err.count("warning [eval_verifier_failures]") == 1
    assert "(errors.jsonl has the traceback)" in err or "(errors.jsonl lists them)" in err


def test_an_environment_that_raises_in_step_scores_0_and_is_logged(tmp_path, capsys):
    env = tmp_path / "env.py"
    env.write_text(RAISING_ENVIRONMENT)
    one = tmp_path / "one.py"
    one.write_text("def one(completion, sample):\n    return 1.0\n")
    run = tmp_path / "run"
    _train(
        run,
        f"environment.name={env}:Raises",
        f"reward.verifier={one}:one",  # 1 for every row: a failed environment's row scores 0
        "training.steps=2",
        "eval.before=false",
    )
    err = capsys.readouterr().err
    steps = [r for r in _jsonl(run / "metrics.jsonl") if "reward_mean" in r]
    failed = [r["environment_failures"] for r in steps]
    assert all(0 < n <= 8 for n in failed)  # every row stepped (not cut at the token limit)
    assert [r["reward_mean"] for r in steps] == [1 - n / 8 for n in failed]
    assert [r["verifier_failures"] for r in steps] == [0, 0]
    evaluation = json.loads((run / "summary.json").read_text())["eval_after"]
    assert 0 < evaluation["environment_failures"] <= 6
    lines = _jsonl(run / "errors.jsonl")
    assert {line["kind"] for line in lines} == {"environment"}
    assert [line["error"] for line in lines] == ["RuntimeError: environment bug"] * len(lines)
    assert len(lines) == sum(failed) + evaluation["environment_failures"]
    traced = [line for line in lines if line["traceback"] is not None]
    assert len(traced) == 1 and (traced[0]["step"], traced[0]["phase"]) == (1, "train")
    assert 'env.py", line 10, in step' in traced[0]["traceback"]  # from the step's thread
    assert err.count(f"warning [environment_failures] step 1: {failed[0]} of 8 completions") == 1
    assert err.count("warning [environment_failures]") == 1


# -- the file itself (ErrorLog, error_rows) ---------------------------------------------------


def _failure(row: int, key: str = "k", kind: str = "verifier", traceback: str | None = "tb"):
    from rlvr.rewards.base import Failure

    return Failure(kind, f"ValueError: {key}", traceback, key, row=row, sample_id=f"s{row}")


def test_lines_are_capped_per_step_and_kind_new_errors_first():
    from rlvr.training.step_metrics import error_rows

    failures = [_failure(i) for i in range(100)] + [_failure(150, key="late")]
    failures += [_failure(i, kind="environment", key="env") for i in range(5)]
    rows = error_rows(7, "train", failures, set(), limit=32)
    verifier = [r for r in rows if r["kind"] == "verifier"]
    assert len(verifier) == 32 and len(rows) == 32 + 5
    # the later error is written though it lies past the cap, with its traceback
    assert [r["row"] for r in verifier] == [*range(31), 150]
    assert [r["traceback"] is not None for r in verifier] == [True] + [False] * 30 + [True]
    assert all(r["step"] == 7 and r["phase"] == "train" for r in rows)


def test_the_file_is_appended_and_flushed_kept_on_resume_and_made_only_on_failure(tmp_path):
    from rlvr.training.step_metrics import ErrorLog

    said: list[str] = []
    log = ErrorLog(tmp_path, warn=said.append)
    log.write(1, "train", [], 16)
    assert not (tmp_path / "errors.jsonl").exists()  # nothing failed: no file
    log.write(1, "train", [_failure(0), _failure(1)], 16)
    assert len(_jsonl(tmp_path / "errors.jsonl")) == 2  # flushed before close
    assert said == []  # 2 of 16: no warning
    log.write(2, "train", [_failure(i) for i in range(9)], 16)
    log.write(3, "train", [_failure(i) for i in range(9)], 16)
    assert said == [
        "warning [verifier_failures] step 2: 9 of 16 completions failed in the verifier: "
        "ValueError: k (errors.jsonl has the traceback)"
    ]
    log.close()
    resumed = ErrorLog(tmp_path)  # a resumed run appends
    resumed.write(4, "eval", [_failure(0)], 8)
    resumed.close()
    assert [r["step"] for r in _jsonl(tmp_path / "errors.jsonl")] == [1, 1, *[2] * 9, *[3] * 9, 4]
    ErrorLog(tmp_path, fresh=True).close()  # a run that starts over starts a fresh file
    assert not (tmp_path / "errors.jsonl").exists()


def test_only_rank_0_writes(tmp_path):
    from rlvr.training.step_metrics import ErrorLog

    log = ErrorLog(tmp_path, main=False, warn=lambda line: None)
    log.write(1, "train", [_failure(i) for i in range(9)], 9)
    log.close()
    assert not (tmp_path / "errors.jsonl").exists()
