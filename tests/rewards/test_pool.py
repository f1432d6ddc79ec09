"""VerifierPool: per-sample isolation of raising, crashing and hanging verifiers."""

import sys
import time

import pytest

from rlvr.errors import ConfigError
from rlvr.rewards.pool import VerifierPool

TIMEOUT_S = 1.0

BAD_VERIFIER = """
import ctypes, os, time

def verify(completion, sample):
    if completion == "raise":
        raise ZeroDivisionError("boom")
    if completion == "exit":
        os._exit(3)
    if completion == "segfault":
        ctypes.string_at(0)
    if completion == "hang":
        while True:
            pass
    if completion == "sleep":
        time.sleep(60)
    if completion == "nan":
        return float("nan")
    if completion == "spawn-and-hang":
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(sample["pidfile"], "w").write(str(child.pid))
        time.sleep(60)
    return float(completion == sample["answer"])

class Unpicklable:
    def __init__(self):
        self.lock = __import__("threading").Lock()  # verifiers need not be picklable

    def __call__(self, completion, sample):
        return 1.0

unpicklable = Unpicklable()
"""


@pytest.fixture(scope="module")
def verifier_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("verifiers") / "bad.py"
    path.write_text(BAD_VERIFIER)
    return path


@pytest.fixture(scope="module")
def pool(verifier_file):
    with VerifierPool(f"{verifier_file}:verify", workers=2, timeout_s=TIMEOUT_S) as p:
        yield p


def test_good_samples_score_in_order(pool):
    completions = [str(i % 3) for i in range(20)]
    samples = [{"answer": "1"}] * 20
    result = pool.score_batch(completions, samples)
    assert result.rewards == [float(c == "1") for c in completions]
    assert result.failures == 0


@pytest.mark.parametrize(
    "bad, detail",
    [
        ("raise", "error: ZeroDivisionError: boom"),
        ("exit", "worker crashed (exit code 3)"),
        ("segfault", "worker crashed (exit code -11)"),
        ("hang", f"timeout after {TIMEOUT_S:g} s"),
        ("nan", "error: ValueError: the verifier returned float nan (expected a finite number)"),
    ],
)
def test_a_failing_sample_scores_zero_and_is_counted_alone(pool, bad, detail):
    start = time.monotonic()
    result = pool.score_batch(["1", bad, "1", "1"], [{"answer": "1"}] * 4)
    assert time.monotonic() - start < TIMEOUT_S + 1.5
    assert result.rewards == [1.0, 0.0, 1.0, 1.0]
    assert result.failures == 1
    assert result.details[1] == detail
    # the worker was replaced: the pool keeps working at full size
    assert pool.score_batch(["1"] * 4, [{"answer": "1"}] * 4).rewards == [1.0] * 4


def test_wall_time_per_sample_is_bounded_when_all_hang(pool):
    start = time.monotonic()
    result = pool.score_batch(["sleep"] * 4, [{"answer": "1"}] * 4)
    elapsed = time.monotonic() - start
    assert result.failures == 4 and result.rewards == [0.0] * 4
    assert elapsed < 2 * TIMEOUT_S + 2.0  # 4 samples on 2 workers: two rounds of one limit


def test_wrong_length_is_an_error_never_broadcast(pool):
    with pytest.raises(ValueError, match="3 completions but 1 samples"):
        pool.score_batch(["1", "2", "3"], [{"answer": "1"}])


def test_empty_batch(pool):
    assert pool.score_batch([], []) == ([], 0, [])


def test_verifier_is_resolved_in_the_worker_so_it_need_not_pickle(verifier_file):
    with VerifierPool(f"{verifier_file}:unpicklable", workers=1) as p:
        assert p.score_batch(["x"], [{}]).rewards == [1.0]


def test_math_builtin_with_details_and_timeouts():
    samples = [{"answer": "0.5"}, {"answer": "5"}, {"answer": "3"}]
    completions = ["\\boxed{\\frac12}", "\\boxed{5^{5^{5^{5^5}}}}", "\\boxed{4}"]
    with VerifierPool("math", workers=2, timeout_s=TIMEOUT_S) as p:
        result = p.score_batch(completions, samples)
    assert result.rewards == [1.0, 0.0, 0.0]
    assert result.failures == 1 and result.details[0] == "\\frac12"


def test_composite_spec_in_workers():
    with VerifierPool("math:1.0,format:0.1", workers=1) as p:
        result = p.score_batch(["<think>a</think><answer>5</answer>"], [{"answer": "5"}])
    assert result.rewards == [pytest.approx(1.1)]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nosuch", "unknown verifier 'nosuch'"),
        ("/nonexistent/v.py:f", "not found"),
        ("rlvr.rewards.math:nosuch", "has no function 'nosuch'"),
    ],
)
def test_bad_spec_is_a_config_error_at_construction(spec, message):
    with pytest.raises(ConfigError, match=message):
        VerifierPool(spec, workers=1)


def test_default_size_is_the_cpu_count():
    import os

    with VerifierPool("format") as p:
        assert p.workers == (os.cpu_count() or 1)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_processes_started_by_a_timed_out_verifier_are_killed_too(pool, tmp_path):
    import os

    pidfile = tmp_path / "child.pid"
    result = pool.score_batch(["spawn-and-hang"], [{"answer": "1", "pidfile": str(pidfile)}])
    assert result.details == [f"timeout after {TIMEOUT_S:g} s"]
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # a killed child stays a zombie until its parent is reaped; check its state
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"grandchild {pid} still running")


def test_a_composite_returns_each_component_in_sample_order(verifier_file):
    spec = f"{verifier_file}:verify:0.5,{verifier_file}:unpicklable:2"
    with VerifierPool(spec, workers=2, timeout_s=TIMEOUT_S) as p:
        scores, components = p.score_batch_with_components(
            ["1", "raise", "2", "nan"], [{"answer": "1"}] * 4
        )
    assert scores.rewards == [2.5, 0.0, 2.0, 0.0]
    assert scores.failures == 2
    verify, unpicklable = (item.rsplit(":", 1)[0] for item in spec.split(","))
    said = f"error: ValueError: the verifier '{verify}' returned float nan (expected a finite"
    assert scores.details[3] == f"{said} number)"[:200]
    # a failed sample (one component raised, one returned NaN) logs no component
    assert components[verify] == [1.0, 0.0]
    assert components[unpicklable] == [1.0, 1.0]
