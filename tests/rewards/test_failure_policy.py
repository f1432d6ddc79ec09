"""One policy for failing user code: in the Scorer, the VerifierPool's workers, composite
components, Ray reward actors and `rlvr verify`, a verifier that raises (anything but a
ConfigError or KeyboardInterrupt) or returns anything but a finite real number fails that one
completion: reward 0, counted, and recorded with its error line and traceback."""

from __future__ import annotations

import argparse
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from rlvr.errors import ConfigError, DataError, UserError
from rlvr.isolation.sandbox import SandboxUnavailable
from rlvr.rewards.base import Score
from rlvr.rewards.compose import build_verifier
from rlvr.rewards.pool import VerifierPool
from rlvr.rewards.scoring import Scorer

USER = """
import math
import os

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.base import Score

RETURNS = {
    "none": None,
    "str": "1.0",
    "list": [1.0],
    "dict": {"reward": 1.0},
    "score-str": Score("1.0"),
    "huge": 10**400,
    "nan": math.nan,
    "inf": math.inf,
}


def verify(completion, sample):
    if completion == "raise":
        raise ValueError("boom")
    if completion == "data":
        raise DataError("sample has no 'answer'")
    if completion == "exit":
        raise SystemExit(3)
    if completion == "crash":
        os._exit(3)
    if completion == "config":
        raise ConfigError("reward.verifier: needs the extra 'foo'")
    if completion in RETURNS:
        return RETURNS[completion]
    return 0.5


def half(completion, sample):
    return 0.5
"""


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("verifiers") / "mine.py"
    path.write_text(USER)
    return path


def verifier_returning(value):
    return lambda completion, sample: value


# -- return values ---------------------------------------------------------------------------


WRONG = [
    (None, "TypeError: the verifier returned None (expected a finite number)"),
    ("1.0", "TypeError: the verifier returned str '1.0' (expected a finite number)"),
    ([1.0], "TypeError: the verifier returned list [1.0] (expected a finite number)"),
    ({"r": 1}, "TypeError: the verifier returned dict {'r': 1} (expected a finite number)"),
    (torch.tensor(1.0), "TypeError: the verifier returned Tensor tensor(1.) (expected"),
    (
        Score("1.0"),
        "TypeError: the verifier returned a Score whose reward is str '1.0' (expected",
    ),
    (10**400, "ValueError: the verifier returned int of 1329 bits (expected a finite number)"),
    (math.nan, "ValueError: the verifier returned float nan (expected a finite number)"),
    (-math.inf, "ValueError: the verifier returned float -inf (expected a finite number)"),
]


@pytest.mark.parametrize(("value", "error"), WRONG, ids=lambda x: type(x).__name__)
def test_a_return_value_that_is_not_a_finite_number_fails_the_completion(value, error):
    scorer = Scorer(verifier_returning(value))
    rewards, failures = scorer(["a", "b"], [{"id": "s1"}, {}])
    assert (rewards, failures) == ([0.0, 0.0], 2)
    records = scorer.pop_failures()
    assert [f.error[: len(error)] for f in records] == [error, error]
    assert [f.kind for f in records] == ["verifier", "verifier"]
    # a wrong return value has no user frame to show: no traceback, one error per returned type
    assert [f.traceback for f in records] == [None, None]
    assert records[0].key == records[1].key


@pytest.mark.parametrize(
    ("value", "reward"),
    [
        (True, 1.0),
        (0, 0.0),
        (0.25, 0.25),
        (Fraction(1, 4), 0.25),
        (np.float32(0.5), 0.5),
        (np.int64(1), 1.0),
        (np.bool_(True), 1.0),
        (Score(0.75, "detail"), 0.75),
    ],
    ids=lambda x: type(x).__name__,
)
def test_real_numbers_are_rewards(value, reward):
    assert Scorer(verifier_returning(value))(["a"], [{}]) == ([reward], 0)


# -- exceptions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ValueError("boom"),
        DataError("sample 3: no 'answer'"),
        UserError("anything but a config error"),
        SystemExit(3),
        GeneratorExit(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_but_a_config_error_fails_only_its_completion(error):
    def verifier(text, sample):
        if text == "bad":
            raise error
        return 1.0

    scorer = Scorer(verifier)
    assert scorer(["ok", "bad", "ok"], [{}] * 3) == ([1.0, 0.0, 1.0], 1)
    (record,) = scorer.pop_failures()
    assert record.row == 1 and record.error.startswith(type(error).__name__)
    assert "test_failure_policy.py" in record.traceback  # the verifier's own frame


@pytest.mark.parametrize(
    "error",
    [ConfigError("reward.verifier: needs an extra"), SandboxUnavailable("no bwrap found")],
)
def test_a_config_error_stops_the_run(error):
    def verifier(text, sample):
        raise error

    with pytest.raises(ConfigError):
        Scorer(verifier)(["x"], [{}])


def test_keyboard_interrupt_stops_the_run():
    def verifier(text, sample):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Scorer(verifier)(["x"], [{}])


def test_a_record_names_its_row_and_sample_and_only_the_first_keeps_the_traceback():
    def verifier(text, sample):
        raise ValueError(f"boom on {text}")  # one line, messages that differ: one error

    scorer = Scorer(verifier)
    samples = [{"id": "a"}, {"task_id": "HumanEval/3"}, {"prompt": "no id"}]
    scorer(["x", "y", "z"], samples, first_row=8, indices=[4, 4, 5])
    records = scorer.pop_failures()
    assert [f.row for f in records] == [8, 9, 10]
    assert [f.sample_id for f in records] == ["a", "HumanEval/3", 5]
    assert [f.error for f in records] == [f"ValueError: boom on {t}" for t in "xyz"]
    assert "raise ValueError" in records[0].traceback
    assert records[1].traceback is records[2].traceback is None
    assert len({f.key for f in records}) == 1


def test_an_error_line_is_one_line_of_at_most_300_characters():
    def verifier(text, sample):
        raise RuntimeError("first line\nsecond line " + "x" * 1000)

    scorer = Scorer(verifier)
    scorer(["x"], [{}])
    (record,) = scorer.pop_failures()
    assert record.error.startswith("RuntimeError: first line second line xxx")
    assert "\n" not in record.error and len(record.error) == 300


# -- composite verifiers -----------------------------------------------------------------------


def test_a_failing_component_fails_the_completion_and_is_named(user_file):
    half, verify = f"{user_file}:half", f"{user_file}:verify"
    scorer = Scorer(build_verifier(f"{half}:1.0,{verify}:2.0"))
    rewards, failures = scorer(["ok", "str", "raise"], [{}] * 3)
    assert (rewards, failures) == ([1.5, 0.0, 0.0], 2)
    records = scorer.pop_failures()
    assert [f.component for f in records] == [verify, verify]
    assert records[0].error == (
        f"TypeError: the verifier '{verify}' returned str '1.0' (expected a finite number)"
    )
    assert records[1].error == "ValueError: boom" and "mine.py" in records[1].traceback
    assert scorer.pop_components() == {half: [0.5], verify: [0.5]}  # the completion that scored


# -- the pool: the same policy, tracebacks from the workers ------------------------------------


@pytest.fixture(scope="module")
def pool(user_file):
    with VerifierPool(f"{user_file}:verify", workers=2, timeout_s=10.0) as p:
        yield p


TEXTS = ["ok", "raise", "data", "exit", "none", "str", "list", "dict", "score-str", "huge", "nan"]


def test_the_pool_fails_the_same_completions_with_the_same_errors_as_in_process(pool, user_file):
    samples = [{"id": t} for t in TEXTS]
    local = Scorer(build_verifier(f"{user_file}:verify"))
    pooled = Scorer(build_verifier(f"{user_file}:verify"), pool)
    assert pooled(TEXTS, samples) == local(TEXTS, samples) == ([0.5] + [0.0] * 10, 10)
    got, want = pooled.pop_failures(), local.pop_failures()
    assert [(f.row, f.sample_id, f.error) for f in got] == [
        (f.row, f.sample_id, f.error) for f in want
    ]
    assert got[3].error == "TypeError: the verifier returned None (expected a finite number)"
    assert got[4].error == "TypeError: the verifier returned str '1.0' (expected a finite number)"
    # the worker's traceback reaches the parent: the user's file and line
    assert 'mine.py", line' in got[0].traceback and "raise ValueError" in got[0].traceback
    assert got[0].key == want[0].key


def test_a_pool_records_raised_errors_and_crashed_workers_in_row_order(pool):
    scores, _, records = pool.score_with_failures(["raise", "ok", "crash", "nan"], [{}] * 4)
    assert scores.rewards == [0.0, 0.5, 0.0, 0.0] and scores.failures == 3
    assert [f.row for f in records] == [0, 2, 3]
    assert scores.details[0] == "error: ValueError: boom"
    assert records[1].error == "WorkerCrashed: worker crashed (exit code 3)"
    assert records[1].traceback is None


def test_a_config_error_in_a_worker_stops_the_run_and_the_pool_goes_on(pool):
    with pytest.raises(ConfigError, match="needs the extra 'foo'"):
        pool.score_batch(["ok", "config", "ok"], [{}] * 3)
    assert pool.score_batch(["ok"] * 4, [{}] * 4).rewards == [0.5] * 4


def test_a_pool_composite_fails_the_completion_and_names_the_component(user_file):
    half, verify = f"{user_file}:half", f"{user_file}:verify"
    spec = f"{half}:1.0,{verify}:2.0"
    with VerifierPool(spec, workers=1, timeout_s=10.0) as p:
        scores, components, records = p.score_with_failures(["ok", "nan"], [{}] * 2)
    assert scores.rewards == [1.5, 0.0]
    assert components == {half: [0.5], verify: [0.5]}
    (record,) = records
    assert record.component == verify and record.error.startswith(
        f"ValueError: the verifier '{verify}' returned float nan"
    )


# -- Ray reward actors (the class behind them, called directly) --------------------------------


def test_a_ray_reward_worker_returns_the_records_numbered_in_the_round(user_file):
    from rlvr.distributed.ray_rollouts import RewardWorker

    worker = RewardWorker(f"{user_file}:verify", 0, 10.0)
    scored = worker.score(["ok", "raise", "str"], [{}, {}, {"id": "z"}], 6, [3, 3, 4])
    assert scored.rewards == [0.5, 0.0, 0.0] and scored.failures == 2
    assert [(f.row, f.sample_id) for f in scored.errors] == [(7, 3), (8, "z")]
    assert "raise ValueError" in scored.errors[0].traceback


# -- rlvr verify -------------------------------------------------------------------------------


def _verify(tmp_path, user_file, workers: str):
    from rlvr.commands.verify import add_parser, run

    rows = [{"completion": t} for t in ("ok", "str", "raise", "raise", "none")]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    argv = ["verify", "--verifier", f"{user_file}:verify", "--input", str(src)]
    return run(parser.parse_args([*argv, "--workers", workers]))


@pytest.mark.parametrize("workers", ["0", "1"])
def test_rlvr_verify_fails_wrong_returns_and_prints_each_traceback_once(
    tmp_path, user_file, capsys, workers
):
    assert _verify(tmp_path, user_file, workers) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["reward"] for r in rows] == [0.5, 0.0, 0.0, 0.0, 0.0]
    assert rows[1]["detail"] == (
        "error: TypeError: the verifier returned str '1.0' (expected a finite number)"
    )
    assert "failures=4" in captured.err
    assert captured.err.count("the verifier failed on sample 3: ValueError: boom") == 1
    assert captured.err.count("Traceback (most recent call last)") == 1
    assert "the verifier failed on sample 4" not in captured.err  # the same error, said once
