"""Latency of the code verifier: one sandbox launch per sample, one forked process per test.

    python benchmarks/verify_code.py [--repeats 30]

Prints median and p95 wall time per sample and per test for: a trivial 1-test program, a
10-test stdin/stdout sample, a 10-test function-call sample, and, for comparison, the same 10
tests run as 10 single-test samples (what one sandbox launch per test would cost).
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlvr.rewards.code import CodeVerifier

TRIVIAL = {"tests": [{"input": "", "output": "ok"}]}
TRIVIAL_CODE = "```python\nprint('ok')\n```"

STDIO = {"tests": [{"input": f"{i} {i * 7}\n", "output": f"{i * 8}\n"} for i in range(10)]}
STDIO_CODE = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"

CALLS = {"fn_name": "add", "tests": [{"args": [i, i * 7], "expected": i * 8} for i in range(10)]}
CALLS_CODE = "```python\ndef add(a, b):\n    return a + b\n```"


def measure(verifier: CodeVerifier, completion: str, sample: dict, repeats: int) -> list[float]:
    verifier(completion, sample)  # warm-up: imports, page cache
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert verifier(completion, sample) == 1.0
        times.append(time.perf_counter() - started)
    return times


def report(name: str, times: list[float], tests: int) -> None:
    times = sorted(times)
    median = statistics.median(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(
        f"{name:<34} per sample: median {median * 1e3:6.1f} ms  p95 {p95 * 1e3:6.1f} ms"
        f"   per test: median {median / tests * 1e3:5.1f} ms  p95 {p95 / tests * 1e3:5.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    verifier = CodeVerifier(timeout_s=5.0)
    report("trivial program, 1 test", measure(verifier, TRIVIAL_CODE, TRIVIAL, args.repeats), 1)
    report("stdin/stdout, 10 tests", measure(verifier, STDIO_CODE, STDIO, args.repeats), 10)
    report("function call, 10 tests", measure(verifier, CALLS_CODE, CALLS, args.repeats), 10)
    singles = [{"tests": [t]} for t in STDIO["tests"]]
    per_launch = []
    for _ in range(max(1, args.repeats // 3)):
        started = time.perf_counter()
        for sample in singles:
            assert verifier(STDIO_CODE, sample) == 1.0
        per_launch.append(time.perf_counter() - started)
    report("10 tests, one launch per test", per_launch, 10)


if __name__ == "__main__":
    main()
