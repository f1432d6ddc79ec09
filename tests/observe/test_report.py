"""`rlvr report`: a self-contained HTML report of run directories, one-line errors for bad input."""

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from rlvr.commands.report import add_parser, run  # noqa: E402
from rlvr.errors import DataError  # noqa: E402
from rlvr.observe.report import PLOTS, Run, config_differences, flatten  # noqa: E402

IMG_TAG = '<img src="data:image/png;base64,'
EVIL = "<script>alert(1)</script>"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["report", *argv])


def write_run(path: Path, lr: float = 1e-4, diagnostics_at: int = 4) -> Path:
    """A small run directory like the trainer writes: 6 steps, eval at step 3, one diagnostic."""
    path.mkdir(parents=True)
    rows = []
    for step in range(1, 7):
        row = {
            "step": step,
            "reward_mean": 0.1 * step,
            "reward_std": 0.3,
            "completion_length_mean": 5.0 + step,
            "completion_length_p95": 20.0,
            "entropy": 0.5 / step,
            "zero_std_group_fraction": 0.25,
            "clip_fraction": 0.01,
            "tokens_per_s_rollout": 1000.0,
            "tokens_per_s_train": 800.0,
        }
        if step == 3:
            row |= {"eval_accuracy": 0.5, "eval_pass1_t1": 0.45, "eval_n": 20}
        if step == diagnostics_at:
            row["diagnostics"] = ["entropy_collapse", "length_inflation"]
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        "model": "embedded",
        "eval_before": {
            "accuracy": 0.125,
            "pass1_t1": 0.2,
            "reasoning_fraction": 0.05,
            "mean_length": 6.5,
            "n": 20,
        },
        "eval_after": {
            "accuracy": 0.875,
            "pass1_t1": 0.8,
            "reasoning_fraction": 0.9,
            "mean_length": 31.25,
            "n": 20,
        },
        "steps": 6,
        "wall_seconds": 3.2,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "config.yaml").write_text(
        f"model:\n  name_or_path: embedded\noptimizer:\n  lr: {lr}\n  weight_decay: 0.0\n"
    )
    (path / "samples").mkdir()
    old = {"prompt": "1+1=", "completion": "old step", "reward": 1.0, "advantage": 0.0}
    (path / "samples" / "step-2.jsonl").write_text(json.dumps(old) + "\n")
    samples = [
        {"prompt": "2+2=", "completion": f"4 {EVIL}", "reward": 1.0, "advantage": 0.75},
        {"prompt": "3+3=", "completion": "5", "reward": 0.0, "advantage": -0.75},
    ]
    (path / "samples" / "step-6.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return path


def test_one_run_writes_a_self_contained_report_with_plots_tables_and_pngs(tmp_path):
    run_dir = write_run(tmp_path / "run_a")
    assert run(parse(str(run_dir))) == 0  # default output: the run directory itself
    html = (run_dir / "report.html").read_text()
    assert html.count(IMG_TAG) >= 8
    for name, *_ in PLOTS:
        assert (run_dir / "plots" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    # eval before/after table
    for value in ("eval_before", "eval_after", "0.125", "0.875", "31.25", "6.5"):
        assert f"<td>{value}</td>" in html
    # diagnostics: the step and the names
    assert "<td>4</td><td>entropy_collapse, length_inflation</td>" in html
    # the latest samples file, escaped; not the older one
    assert "step 6" in html and "old step" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html
    # one run: the full config, collapsed
    assert "<details>" in html and "optimizer.lr" in html
    assert "http://" not in html and "https://" not in html  # nothing fetched from the network


def test_two_runs_are_overlaid_and_their_config_differences_listed(tmp_path):
    a = write_run(tmp_path / "run_a", lr=1e-4)
    b = write_run(tmp_path / "run_b", lr=3e-4)
    out = tmp_path / "cmp"
    assert run(parse(str(a), str(b), "--output", str(out))) == 0
    html = (out / "report.html").read_text()
    assert html.count(IMG_TAG) >= 8
    assert "<code>optimizer.lr</code></td><td>0.0001</td><td>0.0003</td>" in html
    assert "weight_decay" not in html  # equal values are not differences
    assert "<th>run_a</th><th>run_b</th>" in html
    assert not (a / "report.html").exists()


class _Axes:
    """Records what `_draw_eval` plots."""

    def __init__(self):
        self.lines = []

    def plot(self, xs, ys, *args, **kwargs):
        self.lines.append((list(xs), list(ys)))

    def set_ylim(self, *args):
        pass


def test_the_step_0_row_of_the_evaluation_before_training_is_plotted_once(tmp_path):
    # Issue 22: metrics.jsonl starts with {"step": 0, "eval_accuracy": ...}; a run written
    # before it has only summary.json's eval_before. Both give one point at step 0.
    from rlvr.observe.report import _draw_eval, load_run

    new = write_run(tmp_path / "new")
    metrics = new / "metrics.jsonl"
    before = {"step": 0, "eval_accuracy": 0.125, "eval_pass1_t1": 0.2, "eval_n": 20}
    metrics.write_text(json.dumps(before) + "\n" + metrics.read_text())
    old = write_run(tmp_path / "old")
    for run_dir in (new, old):
        ax = _Axes()
        assert _draw_eval(ax, [load_run(run_dir)], ["C0"])
        assert ax.lines == [([0, 3, 6], [0.125, 0.5, 0.875])]
    assert run(parse(str(new))) == 0
    html = (new / "report.html").read_text()
    assert "<td>6</td>" in html  # last step: a training step, not the step-0 row
    assert "<td>4</td><td>entropy_collapse, length_inflation</td>" in html


def test_config_differences_uses_dotted_keys_and_marks_absent_keys():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
    r1 = Run(path=Path("x"), name="x", rows=[], config={"a": {"b": 1, "c": 2}})
    r2 = Run(path=Path("y"), name="y", rows=[], config={"a": {"b": 1}})
    diffs = config_differences([r1, r2])
    assert [key for key, _ in diffs] == ["a.c"]


def test_a_run_without_kl_or_eval_still_gets_every_plot(tmp_path):
    run_dir = tmp_path / "bare"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    assert run(parse(str(run_dir))) == 0
    html = (run_dir / "report.html").read_text()
    assert html.count(IMG_TAG) == len(PLOTS)
    assert "No summary.json" in html and "No config.yaml" in html


def test_a_missing_metrics_file_is_a_one_line_error_naming_it(tmp_path):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    with pytest.raises(DataError) as e:
        run(parse(str(run_dir)))
    message = str(e.value)
    assert str(run_dir / "metrics.jsonl") in message and "not found" in message
    assert "\n" not in message


def test_a_malformed_metrics_line_is_an_error_naming_the_line(tmp_path):
    run_dir = write_run(tmp_path / "run_a")
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[2] = '{"step": 3, "reward_mean": '
    metrics.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"metrics\.jsonl line 3: invalid JSON") as e:
        run(parse(str(run_dir)))
    assert "\n" not in str(e.value)
    assert not (run_dir / "report.html").exists()


@pytest.mark.parametrize("text", ["model: [", "model:\n  name_or_path: !!int\n", "!!float"])
def test_a_damaged_config_yaml_is_an_error_naming_it(tmp_path, text):
    run_dir = write_run(tmp_path / "run_a")
    (run_dir / "config.yaml").write_text(text)
    with pytest.raises(DataError, match="invalid YAML") as e:
        run(parse(str(run_dir)))
    assert str(run_dir / "config.yaml") in str(e.value) and "\n" not in str(e.value)


def test_the_standalone_entry_prints_user_errors_without_a_traceback(tmp_path, capsys):
    from rlvr.commands.report import main

    assert main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr: error: ") and "not a directory" in err
    assert "Traceback" not in err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_headless_chromium_renders_the_report(tmp_path):
    run_dir = write_run(tmp_path / "run_a")
    run(parse(str(run_dir)))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (run_dir / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert shot.exists()
    assert shot.stat().st_size > 50_000  # a blank 1200x2000 page is a few kB


def test_a_transcript_marks_tool_output_and_is_escaped():
    from rlvr.observe.report import _completion_html

    sample = {
        "completion": "ignored",
        "transcript": [
            {"from": "model", "text": "<python>print(2*3)</python>"},
            {"from": "env", "text": "<output>6\n</output>"},
            {"from": "model", "text": "6"},
        ],
    }
    html = _completion_html(sample)
    assert html.count('<span class="tool"') == 1
    assert "&lt;python&gt;" in html and "<python>" not in html
    assert '<span class="tool" title="tool output">&lt;output&gt;6' in html
    assert _completion_html({"completion": "<b>x</b>"}) == "&lt;b&gt;x&lt;/b&gt;"


def test_per_function_rewards_verifier_failures_and_resumes_are_in_the_report(tmp_path):
    from rlvr.observe.events import record_event
    from rlvr.observe.report import _draw_components, _mark_resumes, load_run

    run_dir = write_run(tmp_path / "trl")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row |= {"reward/accuracy_reward_mean": 0.1 * row["step"], "reward/format_reward_mean": 1.0}
        row["verifier_failures"] = 2 if row["step"] == 5 else 0
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    error = {"phase": "train", "kind": "verifier", "component": "accuracy_reward"}
    error |= {"sample_id": "d-1", "row": 0, "traceback": None}
    lines = [error | {"step": 5, "error": f"ValueError: boom {EVIL}"}] * 2
    lines.append(error | {"step": 6, "phase": "eval", "error": "TypeError: other"})
    (run_dir / "errors.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    record_event(run_dir, "resume", step=4, checkpoint="step-4")

    run_ = load_run(run_dir)
    assert run_.resumes == [4]
    ax = _Axes()
    ax.axvline = lambda x, **kw: ax.lines.append(("resume", x))
    assert _draw_components(ax, [run_], ["C0"])
    assert ax.lines[0] == ([1, 2, 3, 4, 5, 6], [0.1 * s for s in range(1, 7)])
    assert ax.lines[1][1] == [1.0] * 6
    _mark_resumes(ax, [run_], ["C0"])
    assert ax.lines[-1] == ("resume", 4)

    assert run(parse(str(run_dir))) == 0
    html = (run_dir / "report.html").read_text()
    for name in ("reward_components", "verifier_failures"):
        assert (run_dir / "plots" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert "<td>step 4</td>" in html  # the runs table: resumed at
    assert "2 failed training completions" in html
    assert "<td>train</td><td>verifier</td><td>accuracy_reward</td>" in html
    assert "<td>2</td><td>5</td><td>5</td>" in html  # lines, first and last step
    assert "&lt;script&gt;" in html and "<script" not in html


def test_a_run_without_errors_says_none_failed(tmp_path):
    run_dir = write_run(tmp_path / "clean")
    assert run(parse(str(run_dir))) == 0
    assert "no errors.jsonl: none failed" in (run_dir / "report.html").read_text()


def test_an_environments_own_figures_share_one_plot(tmp_path):
    from rlvr.observe.report import _ENV_METRIC, _draw_components, load_run

    run_dir = write_run(tmp_path / "env")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row |= {"env/win": 0.1 * row["step"], "env/turns": 3.0}
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ax = _Axes()
    assert _draw_components(ax, [load_run(run_dir)], ["C0"], _ENV_METRIC)
    assert ax.lines[0] == ([1, 2, 3, 4, 5, 6], [0.1 * s for s in range(1, 7)])
    assert ax.lines[1][1] == [3.0] * 6
    assert run(parse(str(run_dir))) == 0
    assert (run_dir / "plots/environment_metrics.png").read_bytes().startswith(b"\x89PNG")
