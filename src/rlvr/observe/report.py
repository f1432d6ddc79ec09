"""Read run directories and write one self-contained HTML report with training-curve plots.

A run directory (written by `rlvr train`) holds metrics.jsonl (one JSON object per step, names in
docs/metrics.md; since issue 22 a step-0 row holds the evaluation before training), summary.json
(eval_before / eval_after), config.yaml, samples/step-N.jsonl, errors.jsonl (the completions
whose verifier or environment failed) and events.jsonl (where the run was resumed). Only
metrics.jsonl is required; the report says so where another file is missing.

Decisions:
- The report is one HTML file with the PNGs embedded as base64 data URIs and inline CSS, so it
  can be mailed or attached to an issue and opened offline; the PNGs are also written to
  plots/NAME.png next to it for slides.
- Every plot is always drawn, with an empty-state note when no run logged its metric (`kl` is
  only logged when β > 0), so two reports always have the same layout.
- Several runs are overlaid on each plot, one colour per run, labelled by the run directory name;
  a resume is a dotted vertical line in the run's colour on every plot.
- Per-function rewards (`reward/<name>_mean`: a weighted sum's components, TRL reward functions)
  share one plot, one line style per function; so do an environment's own figures (`env/<name>`:
  a rubric's components, a game's outcomes).
- Everything taken from a run (prompts, completions, config values) is HTML-escaped: completions
  are model output and may contain markup.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.observe.run_files import Run, load_run, load_runs, read_jsonl

__all__ = ["Run", "load_run", "load_runs", "read_jsonl", "render_html", "write_report"]

EVAL_FIELDS = ("accuracy", "pass1_t1", "reasoning_fraction", "mean_length", "n")
TOP_SAMPLES = 10  # rows in each run's sample audit table
MAX_DIAGNOSTIC_ROWS = 200  # rows of the diagnostics table; the rest are counted
MAX_ERROR_ROWS = 20  # distinct errors listed per run; the rest are counted
_COMPONENT = re.compile(r"^reward/(.+)_mean$")
_ENV_METRIC = re.compile(r"^env/(.+)$")
_STYLES = ("-", "--", "-.", ":")


@dataclass
class Plot:
    name: str  # file stem: plots/NAME.png
    title: str
    png: bytes


# ---------------------------------------------------------------------------------------------
# Plots


def _series(run: Run, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows where `key` is a finite number."""
    xs, ys = [], []
    for row in run.rows:
        v = row.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(row["step"])
            ys.append(float(v))
    return xs, ys


def _draw_lines(ax: Any, runs: list[Run], colors: list[Any], keys: list[tuple[str, str]]) -> bool:
    """One line per (run, key); keys are (metric, linestyle). True when anything was drawn."""
    drawn = False
    for run, color in zip(runs, colors):
        for i, (key, style) in enumerate(keys):
            xs, ys = _series(run, key)
            if xs:
                label = run.name if len(keys) == 1 else f"{run.name}: {key}"
                ax.plot(xs, ys, style, color=color, label=label, linewidth=1.4, alpha=1 - 0.2 * i)
                drawn = True
    return drawn


def _draw_reward(ax: Any, runs: list[Run], colors: list[Any]) -> bool:
    drawn = False
    for run, color in zip(runs, colors):
        xs, mean = _series(run, "reward_mean")
        if not xs:
            continue
        std_by_step = dict(zip(*_series(run, "reward_std")))
        std = [std_by_step.get(x, 0.0) for x in xs]
        ax.plot(xs, mean, color=color, label=run.name, linewidth=1.4)
        lo = [m - s for m, s in zip(mean, std)]
        hi = [m + s for m, s in zip(mean, std)]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
        drawn = True
    return drawn


def _draw_eval(ax: Any, runs: list[Run], colors: list[Any]) -> bool:
    """eval_accuracy at the steps that ran it (step 0: the evaluation before training), or
    eval_before of summary.json at step 0 for a run without that row (written before issue 22),
    and eval_after at the end."""
    drawn = False
    for run, color in zip(runs, colors):
        xs, ys = _series(run, "eval_accuracy")
        summary = run.summary or {}
        before = (summary.get("eval_before") or {}).get("accuracy")
        after = (summary.get("eval_after") or {}).get("accuracy")
        last = summary.get("steps") or (run.rows[-1]["step"] if run.rows else 0)
        if isinstance(before, (int, float)) and 0 not in xs:
            xs, ys = [0, *xs], [float(before), *ys]
        if isinstance(after, (int, float)):
            xs, ys = [*xs, last], [*ys, float(after)]
        if xs:
            ax.plot(xs, ys, "o-", color=color, label=run.name, linewidth=1.2, markersize=5)
            drawn = True
    if drawn:
        ax.set_ylim(-0.02, 1.02)
    return drawn


def _lines(*keys: tuple[str, str]) -> Callable[[Any, list[Run], list[Any]], bool]:
    return lambda ax, runs, colors: _draw_lines(ax, runs, colors, list(keys))


def reward_components(run: Run, pattern: re.Pattern[str] = _COMPONENT) -> list[str]:
    """The per-function reward names a run logged (reward/<name>_mean), in first-seen order;
    with `pattern`, the names its group 1 matches (env/<name>: an environment's figures)."""
    names: dict[str, None] = {}
    for row in run.rows:
        names.update(dict.fromkeys(m.group(1) for m in map(pattern.match, row) if m))
    return list(names)


def _draw_components(
    ax: Any, runs: list[Run], colors: list[Any], pattern: re.Pattern[str] = _COMPONENT
) -> bool:
    """reward/<name>_mean of every function (or env/<name> of every figure, `pattern`), one
    line style per name."""
    drawn = False
    key = "reward/{}_mean" if pattern is _COMPONENT else "env/{}"
    for run, color in zip(runs, colors):
        for i, name in enumerate(reward_components(run, pattern)):
            xs, ys = _series(run, key.format(name))
            if xs:
                label = name if len(runs) == 1 else f"{run.name}: {name}"
                ax.plot(xs, ys, _STYLES[i % len(_STYLES)], color=color, label=label, linewidth=1.4)
                drawn = True
    return drawn


# (file stem, title, y label, draw, note shown when no run logged the metric)
PLOTS: list[tuple[str, str, str, Callable[[Any, list[Run], list[Any]], bool], str]] = [
    ("reward", "Training reward (mean ± std)", "reward", _draw_reward, "no reward_mean logged"),
    (
        "eval_accuracy",
        "Held-out accuracy (greedy): before, during, after",
        "accuracy",
        _draw_eval,
        "no held-out evaluation (eval_accuracy, summary.json)",
    ),
    (
        "completion_length",
        "Completion length (solid: mean, dashed: p95)",
        "tokens",
        _lines(("completion_length_mean", "-"), ("completion_length_p95", "--")),
        "no completion_length_mean logged",
    ),
    (
        "reward_components",
        "Reward per function (reward/<name>_mean)",
        "reward",
        _draw_components,
        "no per-function rewards logged (a weighted sum or TRL reward functions log them)",
    ),
    (
        "environment_metrics",
        "The environment's own figures (env/<name>)",
        "mean over completions",
        lambda ax, runs, colors: _draw_components(ax, runs, colors, _ENV_METRIC),
        "no env/<name> logged (environments report them in StepResult.metrics)",
    ),
    (
        "verifier_failures",
        "Failed completions per step (solid: verifier, dashed: environment)",
        "completions",
        _lines(("verifier_failures", "-"), ("environment_failures", "--")),
        "no verifier_failures logged",
    ),
    (
        "critic",
        "PPO's critic (solid: explained variance of V_old, dashed: value loss)",
        "explained variance / loss",
        _lines(("explained_variance", "-"), ("critic_loss", "--")),
        "no critic: algorithm.advantage=gae trains one (docs/concepts/ppo.md)",
    ),
    ("entropy", "Policy entropy", "nats / token", _lines(("entropy", "-")), "no entropy logged"),
    (
        "zero_std_group_fraction",
        "Groups with zero reward variance (no gradient)",
        "fraction of groups",
        _lines(("zero_std_group_fraction", "-")),
        "no zero_std_group_fraction logged",
    ),
    (
        "kl",
        "KL(policy ‖ reference)",
        "nats / token",
        _lines(("kl", "-")),
        "no kl logged: KL is only computed when algorithm.kl_coef > 0",
    ),
    (
        "clip_fraction",
        "Clip fraction (tokens where a clip bound binds)",
        "fraction of tokens",
        _lines(("clip_fraction", "-")),
        "no clip_fraction logged",
    ),
    (
        "throughput",
        "Throughput (solid: rollout, dashed: train)",
        "tokens / s",
        _lines(("tokens_per_s_rollout", "-"), ("tokens_per_s_train", "--")),
        "no tokens_per_s_rollout / tokens_per_s_train logged",
    ),
]


def make_plots(runs: list[Run]) -> list[Plot]:
    """Every plot in PLOTS as PNG bytes, all runs overlaid."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("rlvr report needs matplotlib: pip install 'rlvr[report]'") from None
    matplotlib.use("Agg")  # no display: render to files only
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    colors = [cmap(i % 10) for i in range(len(runs))]
    plots = []
    for name, title, ylabel, draw, note in PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        try:
            if draw(ax, runs, colors):
                _mark_resumes(ax, runs, colors)
                ax.legend(fontsize=7, loc="best")
                ax.grid(alpha=0.3)
            else:
                ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, wrap=True)
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            fig.tight_layout()
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
        finally:
            plt.close(fig)
        plots.append(Plot(name, title, buf.getvalue()))
    return plots


def _mark_resumes(ax: Any, runs: list[Run], colors: list[Any]) -> None:
    """A dotted vertical line in the run's colour where each resume continued from."""
    for run, color in zip(runs, colors):
        for i, step in enumerate(run.resumes):
            label = f"{run.name}: resumed" if i == 0 else None
            ax.axvline(step, color=color, linestyle=":", linewidth=1.2, label=label)


# ---------------------------------------------------------------------------------------------
# HTML


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "—"
    return _esc(value) if isinstance(value, str) else _esc(json.dumps(value))


def _table(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table; cells must already be escaped."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {'a.b.c': leaf}; lists are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


_MISSING = object()


def config_differences(runs: list[Run]) -> list[tuple[str, list[Any]]]:
    """(dotted key, value per run) for every key whose value is not the same in all runs."""
    flat = [flatten(r.config or {}) for r in runs]
    keys = sorted(set().union(*flat))
    diffs = []
    for key in keys:
        values = [f.get(key, _MISSING) for f in flat]
        if any(v != values[0] for v in values[1:]):
            diffs.append((key, values))
    return diffs


def _runs_section(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        s = r.summary or {}
        wall = s.get("wall_seconds")
        rows.append(
            [
                _esc(r.name),
                _esc(r.path),
                _fmt(r.rows[-1]["step"] if r.rows else None),
                _fmt(s.get("model")),
                _fmt(round(wall, 1) if isinstance(wall, (int, float)) else None),
                _esc(", ".join(f"step {s}" for s in r.resumes)) if r.resumes else _fmt(None),
            ]
        )
    return _table(["run", "directory", "last step", "model", "wall seconds", "resumed at"], rows)


def error_counts(errors: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], int, int, int]]:
    """((phase, kind, component, error), count, first step, last step) per distinct error of
    errors.jsonl's lines, most frequent first."""
    seen: dict[tuple[str, ...], list[int]] = {}
    for e in errors:
        key = tuple(str(e.get(k) or "") for k in ("phase", "kind", "component", "error"))
        step = e.get("step")
        seen.setdefault(key, []).append(step if isinstance(step, int) else 0)
    rows = [(key, len(steps), min(steps), max(steps)) for key, steps in seen.items()]
    return sorted(rows, key=lambda r: (-r[1], r[2]))


def _failures_section(runs: list[Run]) -> str:
    parts = []
    for r in runs:
        total = sum(int(row.get("verifier_failures") or 0) for row in r.rows)
        if r.errors is None:
            note = f"{total} in metrics.jsonl" if total else "no errors.jsonl: none failed"
            parts.append(f'<p class="empty">{_esc(r.name)}: {_esc(note)}.</p>')
            continue
        counts = error_counts(r.errors)
        rows = [
            [*map(_esc, key[:2]), _esc(key[2] or "—"), f"<pre>{_esc(key[3])}</pre>"]
            + [_fmt(v) for v in numbers]
            for key, *numbers in counts[:MAX_ERROR_ROWS]
        ]
        more = len(counts) - MAX_ERROR_ROWS
        tail = f'<p class="empty">… and {more} more distinct errors.</p>' if more > 0 else ""
        header = ["phase", "kind", "function", "error", "lines", "first step", "last step"]
        title = f"{_esc(r.name)}: {total} failed training completions (verifier_failures)"
        parts.append(f"<h3>{title}</h3>{_table(header, rows)}{tail}")
    return "".join(parts)


def _eval_section(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        for when in ("eval_before", "eval_after"):
            result = (r.summary or {}).get(when)
            if isinstance(result, dict):
                rows.append([_esc(r.name), when] + [_fmt(result.get(f)) for f in EVAL_FIELDS])
    if not rows:
        return '<p class="empty">No summary.json with eval_before / eval_after in any run.</p>'
    return _table(["run", "when", *EVAL_FIELDS], rows)


def _config_section(runs: list[Run]) -> str:
    if len(runs) == 1:
        config = runs[0].config
        if config is None:
            return '<p class="empty">No config.yaml in this run.</p>'
        rows = [[_esc(k), _fmt(v)] for k, v in flatten(config).items()]
        summary = f"<summary>Full config ({len(rows)} keys)</summary>"
        return f"<details>{summary}{_table(['key', 'value'], rows)}</details>"
    missing = [r.name for r in runs if r.config is None]
    note = f'<p class="empty">No config.yaml in: {_esc(", ".join(missing))}.</p>' if missing else ""
    diffs = config_differences(runs)
    if not diffs:
        return note + '<p class="empty">The runs have identical configs.</p>'
    rows = [
        [f"<code>{_esc(k)}</code>"]
        + ["<i>absent</i>" if v is _MISSING else _fmt(v) for v in values]
        for k, values in diffs
    ]
    return note + _table(["key", *(r.name for r in runs)], rows)


def _diagnostics_section(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        for row in r.rows:
            names = row.get("diagnostics")
            if isinstance(names, list) and names:
                rows.append([_esc(r.name), _fmt(row["step"]), _esc(", ".join(map(str, names)))])
    if not rows:
        return '<p class="empty">No diagnostics fired (see docs/metrics.md, Diagnostics).</p>'
    more = len(rows) - MAX_DIAGNOSTIC_ROWS
    tail = f'<p class="empty">… and {more} more rows.</p>' if more > 0 else ""
    return _table(["run", "step", "diagnostics"], rows[:MAX_DIAGNOSTIC_ROWS]) + tail


def top_samples(samples: list[dict[str, Any]], k: int = TOP_SAMPLES) -> list[dict[str, Any]]:
    """The k highest-reward samples, identical (prompt, completion) pairs counted once."""
    seen, unique = set(), []
    for s in samples:
        key = (str(s.get("prompt")), str(s.get("completion")))
        if key not in seen:
            seen.add(key)
            unique.append(s)

    def reward(s: dict[str, Any]) -> float:
        v = s.get("reward")
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else -math.inf

    return sorted(unique, key=reward, reverse=True)[:k]


def _completion_html(sample: dict[str, Any]) -> str:
    """A completion, escaped; a multi-turn transcript with what the environment inserted (tool
    output) set apart in a marked span."""
    transcript = sample.get("transcript")
    if not isinstance(transcript, list):
        return _esc(sample.get("completion", ""))
    parts = []
    for part in transcript:
        text = _esc(part.get("text", "")) if isinstance(part, dict) else ""
        if isinstance(part, dict) and part.get("from") == "env":
            parts.append(f'<span class="tool" title="tool output">{text}</span>')
        else:
            parts.append(text)
    return "".join(parts)


def _samples_section(runs: list[Run]) -> str:
    parts = []
    for r in runs:
        if r.samples_step is None:
            parts.append(f'<p class="empty">{_esc(r.name)}: no samples/step-N.jsonl.</p>')
            continue
        rows = [
            [
                f"<pre>{_esc(s.get('prompt', ''))}</pre>",
                f"<pre>{_completion_html(s)}</pre>",
                _fmt(s.get("reward")),
                _fmt(s.get("advantage")),
            ]
            for s in top_samples(r.samples)
        ]
        parts.append(
            f"<h3>{_esc(r.name)}: step {r.samples_step}</h3>"
            + _table(["prompt", "completion", "reward", "advantage"], rows)
        )
    return "".join(parts)


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1320px;
       color: #222; }
h1 { font-size: 1.6em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 12px; }
.plots img { width: 100%; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: .88em; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; max-width: 560px; }
.tool { background: #eef3fb; border-left: 3px solid #6b8fc7; padding: 0 .2em; }
.empty { color: #777; font-style: italic; }
"""


def render_html(runs: list[Run], plots: list[Plot]) -> str:
    title = "rlvr report: " + ", ".join(r.name for r in runs)
    images = "".join(
        f'<img src="data:image/png;base64,{base64.b64encode(p.png).decode("ascii")}" '
        f'alt="{_esc(p.title)}" title="{_esc(p.title)}">'
        for p in plots
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_esc(title)}</h1>"
        f"<h2>Runs</h2>{_runs_section(runs)}"
        f'<h2>Training curves</h2><div class="plots">{images}</div>'
        f"<h2>Held-out evaluation</h2>{_eval_section(runs)}"
        f"<h2>Configuration{' differences' if len(runs) > 1 else ''}</h2>{_config_section(runs)}"
        f"<h2>Diagnostics raised</h2>{_diagnostics_section(runs)}"
        f"<h2>Verifier failures (errors.jsonl)</h2>{_failures_section(runs)}"
        f"<h2>Top-reward samples (latest samples file)</h2>{_samples_section(runs)}"
        "</body></html>\n"
    )


def write_report(run_dirs: list[Path], output: Path) -> Path:
    """Write output/report.html and output/plots/NAME.png; return the report's path."""
    runs = load_runs(run_dirs)
    plots = make_plots(runs)
    (output / "plots").mkdir(parents=True, exist_ok=True)
    for p in plots:
        (output / "plots" / f"{p.name}.png").write_bytes(p.png)
    report = output / "report.html"
    report.write_text(render_html(runs, plots), encoding="utf-8")
    return report
