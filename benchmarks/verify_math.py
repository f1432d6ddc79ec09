"""Math verification throughput: math-verify called directly vs VerifierPool(MathVerifier).

    python benchmarks/verify_math.py [--n 1000] [--workers N]

(a) direct: math-verify's parse + verify, sequentially in this process, the way TRL's
    accuracy_reward calls it (gold wrapped in $...$, math-verify's own signal timeouts on);
(b) pool:   VerifierPool("math") with one worker per CPU: extraction, hardened equivalence,
    each sample in a worker process killed on timeout.
Both score the same 1,000 deterministic samples: 125 problems x 8 completions as in a GRPO
batch (--group-size 1: every gold different), about half of them the gold in another form, half
near misses. The script prints both times, the ratio, and how often the two disagree (none on
these forms; the hardening rejects some answers math-verify accepts, e.g. 0.333333 for 1/3).
Nearly all the time is ANTLR parsing LaTeX; the pool parses each gold once per worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import time
from fractions import Fraction


def make_samples(n: int, group_size: int = 8, seed: int = 0) -> list[dict[str, str]]:
    """(completion, gold) pairs: a short reasoning trace, then \\boxed{...}. As in GRPO,
    `group_size` consecutive completions answer the same problem (same gold), each in its own
    words: a right answer in a random equivalent form, or a wrong one off by a random k."""
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        problem = i // group_size
        kind = problem % 8
        a, b = random.Random(f"{seed}-{problem}").sample(range(2, 100), 2)
        same, k = rng.random() < 0.5, rng.randint(1, 40)
        if kind == 0:  # integer, sometimes with a thousands separator
            gold = str(a * 1000 + b)
            pred = rng.choice([f"{a},{b:03d}", f"{a}{{,}}{b:03d}"]) if same else str(a * 1000 + k)
        elif kind == 1:  # fraction vs decimal
            q = Fraction(a, 4)
            gold = f"\\frac{{{q.numerator}}}{{{q.denominator}}}"
            pred = f"{float(q):.{k % 3 + 2}f}" if same else str(float(q) + k / 8)
        elif kind == 2:  # unsimplified fraction
            gold = f"{Fraction(a, b)}"
            pred = f"\\dfrac{{{a * k}}}{{{b * k}}}" if same else f"\\dfrac{{{a}}}{{{b + k}}}"
        elif kind == 3:  # surds
            gold = f"{a}\\sqrt{{2}}"
            pred = f"\\sqrt{{{2 * a * a}}}" if same else f"{a + k}\\sqrt{{2}}"
        elif kind == 4:  # multiples of pi
            gold = f"\\frac{{{a}\\pi}}{{{b}}}"
            pred = f"\\frac{{{a * k}}}{{{b * k}}}\\pi" if same else f"\\frac{{{a}}}{{{b + k}}}\\pi"
        elif kind == 5:  # ordered pairs
            gold = f"({a}, {b})"
            pred = (
                rng.choice([f"\\left( {a}, {b} \\right)", f"({a},{b})"])
                if same
                else f"({b}, {a + k})"
            )
        elif kind == 6:  # intervals
            gold = f"[{a}, {a + b})"
            pred = f"[{a},{a + b})" if same else f"[{a}, {a + b + k}]"
        else:  # polynomials
            gold = f"x^2 + {a + b}x + {a * b}"
            pred = f"(x+{a})(x+{b})" if same else f"(x+{a})(x+{b + k})"
        completion = f"<think>Let me work it out step by step: {a} and {b}.</think>\n"
        completion += f"The answer is $\\boxed{{{pred}}}$."
        samples.append({"completion": completion, "answer": gold})
    return samples


def direct(samples: list[dict[str, str]]) -> list[float]:
    from math_verify import parse, verify

    rewards = []
    for s in samples:
        gold = parse(f"${s['answer']}$")
        pred = parse(s["completion"])
        rewards.append(float(verify(gold, pred)) if gold else 0.0)
    return rewards


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--group-size", type=int, default=8, help="completions per problem (1: unique golds)"
    )
    parser.add_argument("--workers", type=int, default=None, help="default: os.cpu_count()")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    from rlvr.rewards.pool import VerifierPool

    samples = make_samples(args.n, args.group_size)
    completions = [s["completion"] for s in samples]
    direct(samples[:20])  # imports and first-call caches out of the timing

    start, cpu = time.perf_counter(), time.process_time()
    ref = direct(samples)
    t_direct, cpu_direct = time.perf_counter() - start, time.process_time() - cpu

    start = time.perf_counter()
    pool = VerifierPool("math", workers=args.workers, timeout_s=10.0)
    t_start = time.perf_counter() - start
    pool.score_batch(completions[:20], samples[:20])  # same warm-up as (a)
    pids = pool.pids
    cpu = sum(_cpu_seconds(p) for p in pids)
    start = time.perf_counter()
    result = pool.score_batch(completions, samples)
    t_pool = time.perf_counter() - start
    cpu_pool = sum(_cpu_seconds(p) for p in pids) - cpu
    pool.close()

    disagree = sum(a != b for a, b in zip(ref, result.rewards))
    print(
        f"samples: {args.n} (groups of {args.group_size})  cpus: {os.cpu_count()}  "
        f"pool workers: {pool.workers}  load average: {os.getloadavg()[0]:.1f}"
    )
    mean_ref = sum(ref) / len(ref)
    print(f"(a) math-verify direct, sequential: {t_direct:7.2f} s  mean reward {mean_ref:.3f}")
    print(
        f"(b) VerifierPool(math):             {t_pool:7.2f} s  mean reward "
        f"{sum(result.rewards) / len(result.rewards):.3f}  failures {result.failures}"
        f"  (+ {t_start:.2f} s pool start-up)"
    )
    with_start = (t_pool + t_start) / t_direct
    print(f"ratio pool/direct: {t_pool / t_direct:.2f} (with start-up {with_start:.2f})")
    print(f"disagreements: {disagree}")
    if cpu_pool > 0:  # CPU seconds do not depend on what else runs on a shared machine
        print(
            f"CPU seconds: direct {cpu_direct:.2f}, pool workers {cpu_pool:.2f} in all; "
            f"on {pool.workers} idle cores the pool would take ~{cpu_pool / pool.workers:.2f} s "
            f"wall (ratio ~{cpu_pool / pool.workers / cpu_direct:.2f})"
        )


if __name__ == "__main__":
    main()
