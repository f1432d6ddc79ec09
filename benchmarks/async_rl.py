"""Synchronous and K-step off-policy training side by side: wall time, learning, idle time.

    python benchmarks/async_rl.py [--staleness 0 1 2 4] [--units batch group] [--steps N]
                                  [--repeats 1] [--set key=value ...] [--json out.json]
                                  [--keep DIR]

Runs `rlvr train` once per K in --staleness (0 = on-policy, K > 0 = rollout.max_staleness=K),
each in a fresh process on the same cores, in the order given (--repeats > 1: interleaved
rounds, medians reported), on the embedded default unless --set overrides it. With
`--units ... group`, each K > 0 also runs free-running in groups (rollout.async_mode=free,
partial_rollouts=true, async_unit=group; reported as "K=k,group"). For each run:

  wall_s                   the run's wall time (summary.json), evaluations included
  train_s                  the sum of step_time_s: the steps alone
  learner_idle_fraction    Σ time_rollout_wait_s / train_s: the learner waiting for its batch
  generator_idle_fraction  Σ time_generator_idle_s / train_s (free-running: the generator
                           waiting to be admitted), else 1 − Σ (time_generate_s +
                           time_score_s) / train_s
  tokens_per_s_trained     completion tokens trained per second of train_s
  staleness_mean/max       rollout_staleness over the steps
  eval_before / eval_after the held-out accuracy, pass@1 at T=1 and reasoning fraction
  mismatch_kl_max          the largest rollout_mismatch_kl of the run

and prints one JSON object as its last line (also written to --json). On one process the
generator and the learner share the CPU cores, so the overlap K > 0 buys is bounded by how much
of a step each side leaves the cores idle; the idle fractions say where the time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def generator_idle(rows: list[dict], busy: float, train_s: float) -> float:
    """The generator's idle share of the steps: measured (time_generator_idle_s, the
    free-running generator waiting for admission) where the run has it, else the time it did
    not spend generating or scoring the batches trained on."""
    if rows and all("time_generator_idle_s" in r for r in rows):
        return sum(r["time_generator_idle_s"] for r in rows) / train_s
    return max(0.0, 1.0 - busy / train_s)


GROUP = ["rollout.async_mode=free", "rollout.partial_rollouts=true", "rollout.async_unit=group"]


def run_once(staleness: int, steps: int | None, overrides: list[str], out: Path) -> dict:
    args = [f"rollout.max_staleness={staleness}", *overrides]
    if steps is not None:
        args.append(f"training.steps={steps}")
    cmd = [sys.executable, "-m", "rlvr", "train", *args, "--output-dir", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"K={staleness} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 1 and "step_time_s" in r]
    summary = json.loads((out / "summary.json").read_text())
    train_s = sum(r["step_time_s"] for r in rows)
    busy = sum(r["time_generate_s"] + r["time_score_s"] for r in rows)
    trained = sum(r["tokens_per_s_train"] * r["time_update_s"] for r in rows)
    keep = ("accuracy", "pass1_t1", "reasoning_fraction")
    evals = {
        side: {k: summary[side][k] for k in keep if k in summary[side]}
        for side in ("eval_before", "eval_after")
        if side in summary
    }
    staleness_seen = [r.get("rollout_staleness", 0) for r in rows]
    return {
        "wall_s": summary["wall_seconds"],
        "train_s": train_s,
        "learner_idle_fraction": sum(r["time_rollout_wait_s"] for r in rows) / train_s,
        "generator_idle_fraction": generator_idle(rows, busy, train_s),
        "tokens_per_s_trained": trained / train_s,
        "staleness_mean": statistics.mean(staleness_seen),
        "staleness_max": max(staleness_seen),
        "mismatch_kl_max": max((r.get("rollout_mismatch_kl", 0.0) for r in rows), default=0.0),
        **evals,
    }


def median_of(runs: list[dict]) -> dict:
    out: dict = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = median_of([r[key] for r in runs])
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--units", nargs="+", default=["batch"], choices=["batch", "group"])
    parser.add_argument("--steps", type=int, help="training.steps (default: the config's)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="a config override")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the run directories here (kK-R: K, repeat R), e.g. for "
        "benchmarks/cluster_model.py --sync-run DIR/k0-0 --async-run DIR/k4-0",
    )
    args = parser.parse_args()
    arms = [
        (f"K={k}" + (",group" if unit == "group" else ""), k, GROUP if unit == "group" else [])
        for k in args.staleness
        for unit in args.units
        if unit == "batch" or k > 0
    ]
    results: dict[str, list[dict]] = {name: [] for name, _, _ in arms}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep if args.keep is not None else Path(tmp)
        for round_ in range(args.repeats):
            for name, k, extra in arms:
                out = root / f"k{k}{'-group' if extra else ''}-{round_}"
                results[name].append(run_once(k, args.steps, [*args.set, *extra], out))
                r = results[name][-1]
                print(
                    f"{name}  wall {r['wall_s']:.1f}s  steps {r['train_s']:.1f}s  "
                    f"learner idle {r['learner_idle_fraction']:.2f}  generator idle "
                    f"{r['generator_idle_fraction']:.2f}  staleness max {r['staleness_max']}  "
                    f"accuracy after {r.get('eval_after', {}).get('accuracy', float('nan')):.3f}",
                    flush=True,
                )
    report = {
        "overrides": args.set,
        "steps": args.steps,
        "repeats": args.repeats,
        "runs": {name: median_of(v) for name, v in results.items()},
    }
    base = report["runs"].get("K=0")
    if base:
        report["speedup_vs_sync"] = {
            name: base["train_s"] / r["train_s"] for name, r in report["runs"].items()
        }
    text = json.dumps(report)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
