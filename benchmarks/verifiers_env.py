"""A multi-turn `verifiers` environment, written with verifiers' API only, trained unchanged.

    python benchmarks/verifiers_env.py [--steps 30] [--eval-size 200] [--json out.json]

Runs `rlvr train --config examples/verifiers.yaml` (the embedded model on
docs/examples/verifiers_env.py: addition, "higher"/"lower" after a wrong answer and a second
try, a rubric of first_try 0.5 + solved 0.5) and reads summary.json: the held-out figures
before and after training (greedy `accuracy`: rows whose reward is at least 1, i.e. right at
the first try; `pass1_t1`: the mean temperature-1 reward; the rubric's components
`env/first_try_greedy`, `env/solved_greedy` and the `turns_mean_greedy`), the gain in
accuracy (points) and the wall time of the whole command (start-up, both evaluations and the
training). Prints a table, then one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = (
    "accuracy",
    "pass1_t1",
    "env/first_try_greedy",
    "env/solved_greedy",
    "turns_mean_greedy",
)


def train(run: Path, steps: int, eval_size: int, extra: list[str]) -> float:
    """Seconds `rlvr train` took, from the repository root (the config's env path is
    relative to it)."""
    cmd = [sys.executable, "-m", "rlvr", "train", "--config", "examples/verifiers.yaml"]
    cmd += [f"training.steps={steps}", f"eval.size={eval_size}", f"eval.every={steps}"]
    cmd += [*extra, "--output-dir", str(run), "--quiet"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"rlvr train failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="more KEY=VALUE config overrides")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        wall_s = train(run, args.steps, args.eval_size, args.overrides)
        summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    report = {
        "config": "examples/verifiers.yaml",
        "steps": args.steps,
        "eval_size": args.eval_size,
        "before": {k: before.get(k) for k in KEYS},
        "after": {k: after.get(k) for k in KEYS},
        "gain_points": round(100 * (after["accuracy"] - before["accuracy"]), 1),
        "wall_s": round(wall_s, 1),
    }
    print(f"{'held-out':<22} {'before':>8} {'after':>8}")
    for key in KEYS:
        b, a = (report[when][key] for when in ("before", "after"))
        print(f"{key:<22} {_figure(b):>8} {_figure(a):>8}")
    print(f"gain: {report['gain_points']} points of greedy accuracy in {report['wall_s']} s")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
