"""A discrete-event model of an RL training cluster: N generators, M learners, one schedule.

    python benchmarks/cluster_model.py --sync-run DIR [--async-run DIR] [--accelerators 8 64]
                                       [--staleness 4] [--mode deterministic|free]
                                       [--unit batch|group] [--long-tail] [--json out.json]

It predicts the wall time per step, the learner's and the generators' idle fractions, the
staleness and the speedup of asynchronous over synchronous training, from per-token costs fitted
on an rlvr run directory (made on this machine) and a run's own completion lengths. Pure
standard library, deterministic for a seed; an `rlvr train` run is never started.

What is modelled
----------------
Costs (`Costs`, seconds; fitted on a synchronous run by `fit_costs`, except r and p):

    generation of a set of rows decoded together on one generator (continuous/static batching)
        gen(rows) = p * prompt_tokens + sum_{t=1..max_len} (a + b * active(t))
                  = p * prompt_tokens + a * max_len + b * sum(len),  active(t) = #{len >= t}
      plus `score` per completion (the verifier, on the generator side) and `w` when the
      generator loads a weight version it does not hold (a weight sync; also before its first
      batch, as rlvr syncs before batch 1);
    the learner step on M data-parallel learners, T = mu * sum(len) trained tokens
        learn(T, M) = c * T / M + d + r * log2(M)
      i.e. efficiency(M) = (c T / M) / (c T / M + r log2 M): the gradient all-reduce of a
      tree/recursive-doubling collective costs r per doubling of M (r = `allreduce`, not
      measurable on one machine: the CLI's --allreduce-s, default 10% of a one-learner step).

Schedules (`Schedule`), as rlvr implements them (src/rlvr/training/schedules.py):

  - sync (max_staleness=0): batch s is generated once update s-1 is done, update s once batch s
    is ready; the sides alternate. Step time = w + gen + score + learn exactly.
  - deterministic K: batch s may start once update s-1-K is done; update s needs batch s and
    update s-1. Staleness of batch s = min(s-1, K).
  - free K: a generator starts a new batch whenever fewer than K batches are ready or being
    made (admission control), from the newest weights; the learner takes the oldest ready
    batch; one more than K versions stale when taken is dropped, counted and replaced
    (admission control makes that impossible; the count checks it).
  - unit=batch: a batch's rows are split over the N generators in contiguous shares; each
    generator works through its shares in batch order; a batch is ready when its slowest share
    is. unit=group: the work unit is a group (the G rows of one prompt). A free generator takes
    a wave of up to ceil(B/N) groups of one weight version and decodes them together
    (`wave_offsets`: the cost above over the wave's rows), handing each group out when its
    longest row ends; it is free again when the wave's longest row ends. In sync/deterministic
    mode batch s is its own B groups; in free mode it is the first B groups to finish, so a slow
    group lands in a later batch (admission: at most K*B groups ready or being made; a group
    more than K versions stale when its batch is formed is dropped and replaced: with groups,
    admission no longer bounds the staleness, so `dropped_groups` can be > 0).

Placement (`Cluster`): separate (generators and learners on their own accelerators: the sides
never slow each other) or shared (both on the same cores, e.g. rlvr in one process or Ray on
one box): while at least one generator job and the learner job run at the same instant, every
running job progresses at rate 1/contention; a side alone runs at rate 1. The event loop keeps
a work clock per side, so rates change exactly when the other side starts or stops.

Calibration (`fit_costs`, on the training rows of metrics.jsonl: step >= 1 with step_time_s):

  - a, b: least squares over steps, no intercept, of
        time_generate_s = a * completion_length_max + b * generated_tokens,
    generated_tokens = tokens_per_s_rollout * time_generate_s (the formula above needs only the
    longest row and the total, which metrics.jsonl has for every step). A negative or
    ill-conditioned solution falls back to one per-token cost: a = 0, b = sum time / sum tokens.
  - c, d: least squares with intercept of the learner's busy time per step,
        step_time_s - time_rollout_wait_s = c * trained_tokens + d,
    trained_tokens = tokens_per_s_train * time_update_s (ppo_epochs included). The busy time,
    not time_update_s alone, so that the old-policy/reference log-prob passes and the step's
    bookkeeping are counted: then the sync run is reproduced (sum of step_time_s). Rows that
    ran a held-out evaluation (eval_* keys) are left out of the fit; their mean residual is
    `eval_s`, added to the learner on the same steps in `validate`. c_update (time_update_s per
    trained token) is reported for information.
  - mu = sum trained tokens / sum generated tokens; score = sum time_score_s / completions;
    w = mean(time_rollout_wait_s - time_generate_s - time_score_s) of a sync run (its weight
    sync and prompt drawing; 0 from an asynchronous run, where it is not separable).

Per-completion lengths (`run_workload`): samples/step-N.jsonl holds every completion of some
steps (logging.samples_every) with its text, not its token count. Each step's lengths are
rebuilt with the step's exact count, total and maximum from metrics.jsonl (completions =
generated_tokens / completion_length_mean), shaped like the nearest sampled step's texts (one
token per character plus EOS, rescaled to the total; one row per group as in that file;
prompt-major order); without samples every row but the longest has the same length.

Validation (`validate`): costs fitted on the sync run, the async run's own lengths, and a
contention factor = (time_generate_s per generated token, async run) / (the same, sync run):
the phase costs come from measurements, the model predicts how the schedule overlaps them. That
ratio is an average over moments with and without overlap, so it understates the factor during
overlap; `contention_matched` (the factor at which the simulated generation slows by the
measured ratio) is reported beside it. The sync run is predicted too (near-exact by
construction: a sanity check of the fit and the event loop).

What is not modelled: partial rollouts and in-flight weight updates; prefill and prefix sharing
(p = 0 from the fit: the decode costs absorb it); new groups joining a wave mid-decode (true
continuous batching, unit=group); memory limits and KV-cache pressure;
dynamic sampling's extra rounds; per-accelerator speed at scale (costs are this machine's: the
absolute times at scale are those of accelerators as fast as it, the ratios are the output);
network time other than w and r; evaluation at scale; noise (every cost is deterministic).

How to run it
-------------
Two runs of the same config on this machine, then the model (a few seconds, stdlib only):

    rlvr train rollout.max_staleness=0 --output-dir runs/k0 --quiet
    rlvr train rollout.max_staleness=4 --output-dir runs/k4 --quiet
    python benchmarks/cluster_model.py --sync-run runs/k0 --async-run runs/k4 \
        --accelerators 8 64 --staleness 4 --json cluster.json

It prints the fitted costs, the validation (predicted vs measured sum of step_time_s), one
table row per accelerator count, split (A/2 each; the best of the splits tried) and mode, and
the whole report as one JSON object on its last line. --long-tail swaps the run's lengths for
lognormal ones (--median, --spread, --max-new-tokens); --mode free / --unit group choose the
asynchronous schedule; tests: tests/benchmarks/test_cluster_model.py.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from _cluster_sim import (  # noqa: E402 - the benchmarks folder is on sys.path
    Cluster,
    Costs,
    Schedule,
    SimResult,
    Workload,
    learner_efficiency,
    learner_time,
    lognormal_lengths,
    make_workload,
    repeat_groups,
    scaled_lengths,
    simulate,
    summarize,
)

# -- run directories --------------------------------------------------------------------------


def load_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl's training rows: step >= 1 with step_time_s (step 0 is an evaluation)."""
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r.get("step", 0) >= 1 and "step_time_s" in r]


def generated_tokens(row: dict) -> float:
    """Completion tokens of the step: tokens_per_s_rollout * time_generate_s."""
    return row["tokens_per_s_rollout"] * row["time_generate_s"]


def trained_tokens(row: dict) -> float:
    """Tokens the update trained on (x ppo_epochs): tokens_per_s_train * time_update_s."""
    return row["tokens_per_s_train"] * row["time_update_s"]


def completions(row: dict) -> int:
    """Rows of the step: generated tokens / completion_length_mean."""
    return max(1, round(generated_tokens(row) / max(row["completion_length_mean"], 1e-9)))


def is_eval_row(row: dict) -> bool:
    return any(key.startswith("eval_") for key in row)


def read_samples(run_dir: Path) -> dict[int, list[dict]]:
    """samples/step-N.jsonl by step (rlvr.training.step_metrics.write_samples' format)."""
    out = {}
    for path in sorted((Path(run_dir) / "samples").glob("step-*.jsonl")):
        match = re.fullmatch(r"step-(\d+)\.jsonl", path.name)
        if match:
            out[int(match.group(1))] = [json.loads(x) for x in path.read_text().splitlines() if x]
    return out


def sample_shape(samples: list[dict]) -> list[int]:
    """Token estimates of a step's completions in prompt-major order: len(text) + 1 (EOS)."""
    rows = sorted(samples, key=lambda r: r.get("group", 0))  # stable: the file's order kept
    return [len(r.get("completion") or "") + 1 for r in rows]


def _fill(budget: float, weights: list[float], cap: float) -> list[float]:
    """Split `budget` proportionally to `weights`, none above `cap` (water-filling)."""
    out = [0.0] * len(weights)
    free = set(range(len(weights)))
    while free:
        total = sum(weights[i] for i in free)
        share = {i: budget * (weights[i] / total if total else 1 / len(free)) for i in free}
        over = {i for i in free if share[i] > cap}
        if not over:
            for i in free:
                out[i] = share[i]
            break
        for i in over:
            out[i] = cap
        budget -= cap * len(over)
        free -= over
    return out


def step_lengths(total: int, longest: int, rows: int, shape: list[int] | None) -> list[int]:
    """`rows` integer lengths summing to `total` (when feasible) with maximum `longest`.

    The row with the largest shape value gets `longest`; every other row gets 1 plus a share of
    what is left proportional to shape - 1 (capped at longest), rounded by largest remainder. A
    shape equal to the true lengths gives them back exactly."""
    if rows == 1:
        return [max(1, total)]
    if not shape:
        shape = [1] * rows
    shape = [shape[i * len(shape) // rows] for i in range(rows)]  # resampled by position
    top = shape.index(max(shape))
    longest = max(1, longest)
    others = [i for i in range(rows) if i != top]
    extra = min(max(total - longest - len(others), 0), len(others) * (longest - 1))
    shares = _fill(extra, [max(shape[i] - 1, 0) for i in others], longest - 1)
    floors = [math.floor(x + 1e-9) for x in shares]
    left = extra - sum(floors)
    order = sorted(range(len(others)), key=lambda i: (floors[i] - shares[i], i))
    for i in order[:left]:
        floors[i] += 1
    out = [0] * rows
    out[top] = longest
    for i, extra_i in zip(others, floors):
        out[i] = 1 + extra_i
    return out


def config_value(run_dir: Path, key: str) -> str | None:
    """The first `key: value` line of RUN_DIR/config.yaml (rlvr dumps it there), else None."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return None
    match = re.search(rf"^\s*{re.escape(key)}:\s*([^\s#]+)", path.read_text(), re.MULTILINE)
    return match.group(1) if match else None


def group_size_of(run_dir: Path, samples: dict[int, list[dict]]) -> int:
    """Rows per group: the commonest group count in the samples, else config.yaml, else 1."""
    for rows in samples.values():
        counts = Counter(r.get("group", 0) for r in rows)
        if counts:
            return Counter(counts.values()).most_common(1)[0][0]
    value = config_value(run_dir, "group_size")
    return int(value) if value and value.isdigit() else 1


def run_workload(run_dir: Path, rows: list[dict] | None = None) -> Workload:
    """Per-step lengths of a run (see the module docstring): the count, total and maximum from
    metrics.jsonl, the shape from the nearest step with samples."""
    rows = load_rows(run_dir) if rows is None else rows
    samples = read_samples(run_dir)
    g = group_size_of(run_dir, samples)
    steps = []
    for row in rows:
        n = completions(row)
        n -= n % g if n >= g else 0
        nearest = min(samples, key=lambda s: (abs(s - row["step"]), s)) if samples else None
        shape = sample_shape(samples[nearest]) if nearest is not None else None
        total = round(generated_tokens(row))
        steps.append(step_lengths(total, int(row["completion_length_max"]), n, shape))
    return make_workload(steps, g if all(len(s) % g == 0 for s in steps) else 1)


# -- fitting ----------------------------------------------------------------------------------


def lstsq2(x1: list[float], x2: list[float], y: list[float]) -> tuple[float, float] | None:
    """min sum (y - u x1 - v x2)^2 by the normal equations; None when ill-conditioned."""
    s11 = sum(a * a for a in x1)
    s22 = sum(b * b for b in x2)
    s12 = sum(a * b for a, b in zip(x1, x2))
    det = s11 * s22 - s12 * s12
    if det <= 1e-12 * max(s11 * s22, 1e-300):
        return None
    r1 = sum(a * t for a, t in zip(x1, y))
    r2 = sum(b * t for b, t in zip(x2, y))
    return (r1 * s22 - r2 * s12) / det, (r2 * s11 - r1 * s12) / det


def line_fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """y = slope * x + intercept (least squares); a slope through 0 if x is constant or the
    slope comes out negative."""
    mx, my = statistics.fmean(x), statistics.fmean(y)
    var = sum((a - mx) ** 2 for a in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / var if var > 0 else -1.0
    if slope < 0:
        return sum(y) / sum(x), 0.0
    return slope, my - slope * mx


def rel_rmse(pred: list[float], meas: list[float]) -> float:
    """sqrt(mean (pred - meas)^2) / mean meas."""
    err = math.sqrt(statistics.fmean((p - m) ** 2 for p, m in zip(pred, meas)))
    return err / statistics.fmean(meas) if any(meas) else 0.0


def fit_generation(rows: list[dict]) -> tuple[float, float, str]:
    """(a, b, method): time_generate_s = a * completion_length_max + b * generated tokens."""
    longest = [float(r["completion_length_max"]) for r in rows]
    tokens = [generated_tokens(r) for r in rows]
    times = [r["time_generate_s"] for r in rows]
    solved = lstsq2(longest, tokens, times)
    if solved is not None and solved[0] >= 0 and solved[1] >= 0:
        return solved[0], solved[1], "a*max_len+b*tokens"
    return 0.0, sum(times) / sum(tokens), "per_token"


def learner_busy(row: dict) -> float:
    """The learner's share of the step: step_time_s - time_rollout_wait_s."""
    return row["step_time_s"] - row["time_rollout_wait_s"]


def fit_costs(rows: list[dict]) -> tuple[Costs, dict]:
    """Costs from a run's training rows (module docstring: Calibration) and a report of the fit;
    the all-reduce cost r is left 0 (one machine cannot measure it)."""
    a, b, method = fit_generation(rows)
    plain = [r for r in rows if not is_eval_row(r)] or rows
    x = [trained_tokens(r) for r in plain]
    y = [learner_busy(r) for r in plain]
    c, d = line_fit(x, y)
    evals = [r for r in rows if is_eval_row(r)] if len(plain) < len(rows) else []
    residuals = [learner_busy(r) - c * trained_tokens(r) - d for r in evals]
    eval_s = max(0.0, statistics.fmean(residuals)) if residuals else 0.0
    generated = sum(generated_tokens(r) for r in rows)
    mu = sum(trained_tokens(r) for r in rows) / generated
    score = sum(r["time_score_s"] for r in rows) / sum(completions(r) for r in rows)
    on_policy = all(r.get("rollout_staleness", 0) == 0 for r in rows)
    w = 0.0
    if on_policy:
        rest = [r["time_rollout_wait_s"] - r["time_generate_s"] - r["time_score_s"] for r in rows]
        w = max(0.0, statistics.fmean(rest))
    costs = Costs(a=a, b=b, c=c, d=d, w=w, score=score, mu=mu)
    gen_pred = [a * r["completion_length_max"] + b * generated_tokens(r) for r in rows]
    report = {
        "generation_fit": method,
        "generation_rel_rmse": rel_rmse(gen_pred, [r["time_generate_s"] for r in rows]),
        "learner_rel_rmse": rel_rmse([c * v + d for v in x], y),
        "c_per_trained_token": c,
        "c_update_only": sum(r["time_update_s"] for r in plain) / sum(x),
        "rows_fitted": len(rows),
        "eval_rows": len(evals),
        "eval_s": eval_s,
        "on_policy": on_policy,
    }
    return costs, report


# -- validation against a measured asynchronous run --------------------------------------------


def schedule_of(run_dir: Path, rows: list[dict]) -> Schedule:
    """The run's schedule: config.yaml's max_staleness / off_policy_steps / async_mode, else
    the largest rollout_staleness and whether rollout_buffer_depth (free mode) is logged."""
    value = config_value(run_dir, "max_staleness")
    k = (
        int(value)
        if value and value.isdigit()
        else max(r.get("rollout_staleness", 0) for r in rows)
    )
    if k == 0 and config_value(run_dir, "off_policy_steps") == "1":
        k = 1
    if k == 0:
        return Schedule()
    mode = config_value(run_dir, "async_mode")
    free = mode == "free" if mode else any("rollout_buffer_depth" in r for r in rows)
    return Schedule("free" if free else "deterministic", k)


def seconds_per_generated_token(rows: list[dict]) -> float:
    """sum time_generate_s / sum generated tokens."""
    return sum(r["time_generate_s"] for r in rows) / sum(generated_tokens(r) for r in rows)


def eval_extras(rows: list[dict], eval_s: float) -> list[float]:
    """Seconds a held-out evaluation adds to the learner, per step (eval_s on eval rows)."""
    return [eval_s if is_eval_row(r) else 0.0 for r in rows]


def wall_seconds(run_dir: Path) -> float | None:
    """summary.json's wall_seconds (evaluations before and after included), if written."""
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text()).get("wall_seconds") if path.exists() else None


def compare(predicted: SimResult, rows: list[dict]) -> dict:
    """Predicted vs measured sum of step_time_s and learner idle fraction."""
    measured = sum(r["step_time_s"] for r in rows)
    idle = sum(r["time_rollout_wait_s"] for r in rows) / measured
    return {
        "measured_s": measured,
        "predicted_s": predicted.makespan,
        "relative_error": (predicted.makespan - measured) / measured,
        "learner_idle_measured": idle,
        "learner_idle_predicted": predicted.learner_idle_fraction,
        "staleness_mean_measured": statistics.fmean(r.get("rollout_staleness", 0) for r in rows),
        "staleness_mean_predicted": statistics.fmean(predicted.staleness),
    }


def matched_contention(
    work: Workload, costs: Costs, schedule: Schedule, target: float, extra, hi: float = 20.0
) -> float:
    """The factor at which the simulated generators are slowed by `target` on average
    (busy time / busy time without contention), by bisection on [1, hi]."""

    def slowdown(kappa: float) -> float:
        cluster = Cluster(1, 1, "shared", kappa)
        return sum(simulate(work, costs, cluster, schedule, extra).generator_busy)

    base = slowdown(1.0)
    if target <= 1.0 or base == 0:
        return 1.0
    lo, up = 1.0, hi
    if slowdown(up) / base < target:
        return up
    for _ in range(30):
        mid = (lo + up) / 2
        lo, up = (mid, up) if slowdown(mid) / base < target else (lo, mid)
    return (lo + up) / 2


def validate(sync_dir: Path, async_dir: Path) -> dict:
    """Predict both runs of one machine from the sync run's costs (module docstring)."""
    sync_rows, async_rows = load_rows(sync_dir), load_rows(async_dir)
    costs, fit = fit_costs(sync_rows)
    sync_work = run_workload(sync_dir, sync_rows)
    async_work = run_workload(async_dir, async_rows)
    schedule = schedule_of(async_dir, async_rows)
    ratio = seconds_per_generated_token(async_rows) / seconds_per_generated_token(sync_rows)
    contention = max(1.0, ratio)
    one = Cluster(1, 1, "shared", 1.0)
    extra_sync = eval_extras(sync_rows, fit["eval_s"])
    extra_async = eval_extras(async_rows, fit["eval_s"])
    sync_pred = simulate(sync_work, costs, one, Schedule(), extra_sync)
    shared = Cluster(1, 1, "shared", contention)
    async_pred = simulate(async_work, costs, shared, schedule, extra_async)
    kappa = matched_contention(async_work, costs, schedule, ratio, extra_async)
    matched = simulate(async_work, costs, Cluster(1, 1, "shared", kappa), schedule, extra_async)
    sync_out, async_out = compare(sync_pred, sync_rows), compare(async_pred, async_rows)
    async_out.update(mode=schedule.mode, staleness=schedule.staleness, contention=contention)
    sync_out["wall_seconds"], async_out["wall_seconds"] = map(wall_seconds, (sync_dir, async_dir))
    matched_out = {"contention": kappa, **compare(matched, async_rows)}
    return {
        "sync": sync_out,
        "async": async_out,
        "async_contention_matched": matched_out,
        "speedup_measured": sync_out["measured_s"] / async_out["measured_s"],
        "speedup_predicted": sync_out["predicted_s"] / async_out["predicted_s"],
    }


# -- predictions at scale ---------------------------------------------------------------------


def split_candidates(accelerators: int) -> list[int]:
    """Generator counts N tried for A accelerators (M = A - N): every N for A <= 16, else the
    powers of 2 and the multiples of A/16."""
    if accelerators <= 16:
        return list(range(1, accelerators))
    grid = {accelerators * i // 16 for i in range(1, 16)}
    grid |= {2**i for i in range(int(math.log2(accelerators)) + 1)}
    return sorted(n for n in grid if 1 <= n < accelerators)


def at_split(work: Workload, costs: Costs, n: int, m: int, schedule: Schedule) -> dict:
    """`summarize` on N separate generators and M learners, with the split and the learner's
    data-parallel efficiency at the mean batch."""
    out = summarize(simulate(work, costs, Cluster(n, m), schedule))
    tokens = statistics.fmean(sum(s) for s in work.lengths)
    return {
        "n_generators": n,
        "m_learners": m,
        **out,
        "learner_efficiency": learner_efficiency(tokens, m, costs),
    }


def scale_report(work: Workload, costs: Costs, accelerators: int, schedule: Schedule) -> dict:
    """Sync and async on A accelerators: split A/2 each, and the best split of each mode."""
    if accelerators < 2:
        raise ValueError("a split needs at least 2 accelerators")
    sync, runs = Schedule("sync", 0, schedule.unit), {}
    for n in split_candidates(accelerators):
        m = accelerators - n
        runs[n] = (at_split(work, costs, n, m, sync), at_split(work, costs, n, m, schedule))
    half = accelerators // 2
    if half not in runs:
        m = accelerators - half
        runs[half] = (
            at_split(work, costs, half, m, sync),
            at_split(work, costs, half, m, schedule),
        )
    best_sync = min((r[0] for r in runs.values()), key=lambda r: r["step_time_s"])
    best_async = min((r[1] for r in runs.values()), key=lambda r: r["step_time_s"])
    s, a = runs[half]
    return {
        "half": {"sync": s, "async": a, "speedup": s["step_time_s"] / a["step_time_s"]},
        "best": {
            "sync": best_sync,
            "async": best_async,
            "speedup": best_sync["step_time_s"] / best_async["step_time_s"],
        },
    }


# -- command line -----------------------------------------------------------------------------


def scale_workload(args: argparse.Namespace, work: Workload) -> tuple[Workload, dict]:
    """The lengths the scale predictions use, and a description of them."""
    flat = [x for s in work.lengths for x in s]
    if args.long_tail:
        median = args.median or statistics.median(flat)
        cap = args.max_new_tokens or max(1, round(20 * median))
        lengths = lognormal_lengths(
            work.steps, len(work.lengths[0]), median, cap, args.seed, args.spread
        )
        work = make_workload(lengths, work.group_size)
        desc = {"kind": "lognormal", "median": median, "spread_p99": args.spread, "max": cap}
    else:
        work = scaled_lengths(work, args.length_scale, args.max_new_tokens)
        desc = {"kind": "run", "scale": args.length_scale, "max": args.max_new_tokens}
    work = repeat_groups(work, args.batch_multiplier)
    flat = [x for s in work.lengths for x in s]
    desc.update(
        steps=work.steps,
        rows_per_step=len(work.lengths[0]),
        group_size=work.group_size,
        length_mean=statistics.fmean(flat),
        length_max=max(flat),
    )
    return work, desc


def print_table(report: dict) -> None:
    """The human-readable part of the output."""
    c = report["costs"]
    print(
        f"fitted costs: a={c['a']:.3g} s/decode step  b={c['b']:.3g} s/row-token  "
        f"c={c['c']:.3g} s/trained token  d={c['d']:.3g} s/step  w={c['w']:.3g} s/sync  "
        f"score={c['score']:.3g} s/completion  mu={c['mu']:.3g}  r={c['allreduce']:.3g} s/doubling"
    )
    f = report["fit"]
    print(
        f"fit: generation {f['generation_fit']} (rel RMSE {f['generation_rel_rmse']:.1%}), "
        f"learner c*T+d (rel RMSE {f['learner_rel_rmse']:.1%}), eval steps {f['eval_rows']} "
        f"(+{f['eval_s']:.3g} s each)"
    )
    v = report.get("validation")
    if v:
        for name in ("sync", "async", "async_contention_matched"):
            r = v[name]
            extra = f"  contention={r['contention']:.3f}" if "contention" in r else ""
            print(
                f"validation {name:<24} measured {r['measured_s']:9.3f} s  predicted "
                f"{r['predicted_s']:9.3f} s  error {r['relative_error']:+.1%}  learner idle "
                f"{r['learner_idle_measured']:.2f} vs {r['learner_idle_predicted']:.2f}{extra}"
            )
    sched = report["schedule"]
    print(
        f"scale: {sched['mode']} K={sched['staleness']} unit={sched['unit']}, lengths "
        f"{report['workload']['kind']} (mean {report['workload']['length_mean']:.1f}, "
        f"max {report['workload']['length_max']})"
    )
    print(
        f"{'A':>5} {'split':<6} {'mode':<6} {'N':>4} {'M':>4} {'s/step':>10} "
        f"{'learn idle':>10} {'gen idle':>9} {'stale':>6} {'speedup':>8}"
    )
    for a, entry in report["scale"].items():
        for split in ("half", "best"):
            for mode in ("sync", "async"):
                r = entry[split][mode]
                speed = f"{entry[split]['speedup']:8.2f}" if mode == "async" else ""
                print(
                    f"{a:>5} {split:<6} {mode:<6} {r['n_generators']:>4} {r['m_learners']:>4} "
                    f"{r['step_time_s']:10.4g} {r['learner_idle_fraction']:10.2f} "
                    f"{r['generator_idle_fraction']:9.2f} {r['staleness_mean']:6.2f} {speed}"
                )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sync-run", type=Path, required=True, help="a max_staleness=0 run dir")
    ap.add_argument("--async-run", type=Path, help="same config, K > 0: validate against it")
    ap.add_argument("--accelerators", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--staleness", type=int, default=4, help="K of the asynchronous schedule")
    ap.add_argument("--mode", choices=["deterministic", "free"], default="deterministic")
    ap.add_argument("--unit", choices=["batch", "group"], default="batch")
    ap.add_argument(
        "--long-tail", action="store_true", help="lognormal lengths (p99 = spread x median)"
    )
    ap.add_argument("--median", type=float, help="--long-tail median (default: the run's)")
    ap.add_argument("--spread", type=float, default=10.0, help="--long-tail p99 / median")
    ap.add_argument("--max-new-tokens", type=int, help="length cap (long tail: 20 x median)")
    ap.add_argument("--length-scale", type=float, default=1.0, help="the run's lengths x this")
    ap.add_argument("--batch-multiplier", type=int, default=1, help="groups per step x this")
    ap.add_argument(
        "--allreduce-s",
        type=float,
        help="r: s per learner step per doubling of M (default: 10%% of a one-learner step)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    for run_dir in filter(None, (args.sync_run, args.async_run)):
        if not (run_dir / "metrics.jsonl").is_file():
            raise SystemExit(f"{run_dir}: no metrics.jsonl (not an rlvr run directory)")
    rows = load_rows(args.sync_run)
    if not rows:
        raise SystemExit(f"{args.sync_run}: no training rows in metrics.jsonl")
    costs, fit = fit_costs(rows)
    work, desc = scale_workload(args, run_workload(args.sync_run, rows))
    r = args.allreduce_s
    if r is None:  # 10% of a one-learner step on the mean batch
        r = 0.1 * statistics.fmean(learner_time(sum(s), 1, costs) for s in work.lengths)
    costs = replace(costs, allreduce=r)
    schedule = Schedule(args.mode, args.staleness, args.unit)
    report = {
        "costs": asdict(costs),
        "fit": fit,
        "validation": validate(args.sync_run, args.async_run) if args.async_run else None,
        "schedule": asdict(schedule),
        "workload": desc,
        "scale": {str(a): scale_report(work, costs, a, schedule) for a in args.accelerators},
    }
    print_table(report)
    line = json.dumps(report)
    if args.json:
        args.json.write_text(line + "\n")
    print(line)
    return report


if __name__ == "__main__":
    main()
